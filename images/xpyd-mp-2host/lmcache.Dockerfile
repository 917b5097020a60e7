# Rendered by xpyd-stacks from images/templates/engine-role.Dockerfile.j2: do not edit, re-render.
# The lmcache image: the stack's engine base stages, then a thin lmcache layer (a place
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
LABEL org.opencontainers.image.title="xpyd engine base (gpu)" \
      org.xpyd.vllm="${VLLM_VERSION}" \
      org.xpyd.lmcache="${LMCACHE_VERSION}" \
      org.xpyd.nixl="${NIXL_VERSION}"
# === BEGIN pip settings ===
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
RUN pip install "lmcache==${LMCACHE_VERSION}" "nixl==${NIXL_VERSION}"
ENV PYTHONUNBUFFERED=1 \
    LMCACHE_TRACK_USAGE=false \
    VLLM_NO_USAGE_STATS=1 \
    DO_NOT_TRACK=1

# === BEGIN KV path probe ===
# `doctor --kv-path` runs it in one-off containers of the engine services: a real NIXL transfer
# with exactly the devices and namespaces the engines get.
COPY generator/kvprobe/nixl_kv_probe.py /opt/xpyd/nixl_kv_probe.py
# The upstream image's entrypoint is `vllm serve`; our services give their whole command.
ENTRYPOINT []

# === BEGIN lmcache ===
FROM engine-base AS lmcache
LABEL org.opencontainers.image.title="xpyd lmcache" \
      org.xpyd.role="lmcache"
ENV XPYD_ROLE=lmcache
CMD ["lmcache", "server", "--help"]
