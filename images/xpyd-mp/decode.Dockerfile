# Rendered by xpyd-stacks from images/templates/engine-role.Dockerfile.j2: do not edit, re-render.
# The decode image: the stack's engine base stages, then a thin decode layer (a place
# for a role-only change without forking the base). Self-contained, so the compose project of
# any host builds it with a plain `docker compose build`; the prefill, decode and lmcache
# images of a stack share the base stages, which the build cache makes once.
# Engine base stages for the gpu profile (images/templates/engine-base-gpu.Dockerfile.j2):
# upstream's vLLM image plus pinned LMCache and NIXL.
ARG BASE_IMAGE=vllm/vllm-openai:v0.32.0

# === BEGIN engine-base ===
FROM ${BASE_IMAGE} AS engine-base
ARG VLLM_VERSION=0.32.0
ARG LMCACHE_VERSION=0.5.6
ARG NIXL_VERSION=1.5.1
ARG CUDA_MAJOR=13
LABEL org.opencontainers.image.title="xpyd engine base (gpu)" \
      org.xpyd.vllm="${VLLM_VERSION}" \
      org.xpyd.lmcache="${LMCACHE_VERSION}" \
      org.xpyd.nixl="${NIXL_VERSION}" \
      org.xpyd.cuda-major="${CUDA_MAJOR}"
# nftables: `bench --fault cut:HOST@T+D` runs nft from a one-off of this image in the host's
# network stack (generator/docker/netcut.py).
# Debian's packages, unpinned on purpose: point releases carry security fixes and old pins
# vanish from the mirror (hadolint DL3008 is disabled for this reason in .hadolint.yaml).
RUN apt-get update \
 && apt-get install -y --no-install-recommends nftables \
 && rm -rf /var/lib/apt/lists/*
# === BEGIN pip settings ===
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1

# === BEGIN python packages from images/locks/engine-gpu.txt ===
# Every package of the image, pinned with hashes and resolved for this image's Python, glibc and
# CUDA major by `python -m generator.locks`; --no-deps: the lock is the whole closure. Pins the
# image already has at that version stay as they are (pip neither downloads nor hash-checks
# them; a local label counts: torch 2.13.0+cu130 is torch==2.13.0); every other pin is
# downloaded and must match a hash. Upstream's image may carry every NIXL variant: only its
# CUDA major's stays (another's libraries link a CUDA runtime this image does not have).
COPY images/locks/engine-gpu.txt /tmp/requirements.lock
RUN python3 -m pip uninstall -y nixl-cu12 \
 && python3 -m pip install --require-hashes --no-deps -r /tmp/requirements.lock \
 && rm /tmp/requirements.lock
ENV PYTHONUNBUFFERED=1 \
    LMCACHE_TRACK_USAGE=false \
    VLLM_NO_USAGE_STATS=1 \
    DO_NOT_TRACK=1

# === BEGIN venv fix: NIXL progress thread idle ===
# NIXL's hard-coded zero poll timeout made to read XPYD_NIXL_PTHR_DELAY_US (unset or 0: upstream's
# behaviour; its UCX progress thread otherwise spins a core per engine on an idle stack).
# images/assets/fix_engine_venv.py, which the process runtime's env runs too.
COPY ["images/assets/fix_engine_venv.py", "/tmp/fix_engine_venv.py"]
RUN ["python3", "/tmp/fix_engine_venv.py", "--delay-env", "XPYD_NIXL_PTHR_DELAY_US"]

# === BEGIN build-time checks ===
# A broken image fails here, while building, not while serving: pip check (less the gaps named
# on purpose), NIXL's UCX plugin, vLLM's KV connectors and, with --cuda-major, LMCache's CUDA
# ops and the one NIXL variant. Needs no GPU: `docker build` has none.
COPY images/assets/check_engine_image.py /opt/xpyd/check_engine_image.py
RUN python3 /opt/xpyd/check_engine_image.py \
        --cuda-major "${CUDA_MAJOR}" \
        --connector NixlConnector \
        --connector LMCacheMPConnector \
        --connector LMCacheConnectorV1 \
        --allow-missing nixl:nixl-cu12

# === BEGIN KV path probe ===
# `doctor --kv-path` runs it in one-off containers of the engine services: a real NIXL transfer
# with exactly the devices and namespaces the engines get.
COPY generator/kvprobe/nixl_kv_probe.py /opt/xpyd/nixl_kv_probe.py
# observe.traces where the Collector's image cannot come: our OTLP receiver, run from here.
COPY ["generator/observe/otlp_receiver.py", "/opt/xpyd/otlp_receiver.py"]
# The upstream image's entrypoint is `vllm serve`; our services give their whole command.
ENTRYPOINT []

# === BEGIN decode ===
FROM engine-base AS decode
LABEL org.opencontainers.image.title="xpyd decode" \
      org.xpyd.role="decode"
ENV XPYD_ROLE=decode
# Restarted services run under it (generator/supervise.py: an exit nobody asked for fails).
COPY ["generator/supervise.py", "/opt/xpyd/supervise.py"]
CMD ["python3", "-m", "vllm.entrypoints.openai.api_server", "--help"]
