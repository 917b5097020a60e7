# Rendered by xpyd-stacks from images/templates/router.Dockerfile.j2: do not edit, re-render.
# The router image: vllm-router (Rust, from PyPI) and our P/D proxy (generator.proxy).
ARG BASE_IMAGE=debian:bookworm-slim

# === BEGIN router ===
FROM ${BASE_IMAGE}
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
ARG VLLM_ROUTER_VERSION=0.1.17
LABEL org.opencontainers.image.title="xpyd router" \
      org.xpyd.role="router" \
      org.xpyd.vllm-router="${VLLM_ROUTER_VERSION}"
# === BEGIN pip settings ===
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
# === BEGIN python venv from images/locks/router.txt, in this stage ===
# Air-gapped build: every wheel comes from the wheelhouse, exact versions, no index at all.
# The wheelhouse, the lock and uv (images/locks/build-tools.txt, a venv of its own removed in the same
# step) are mounted for this one step, not copied: no layer holds them, and the venv is made
# where it runs (copied from a builder stage, its 3 GB were written twice). Bytecode is
# compiled here, all of it: left to the import checks, a first build was 6 s faster, but every
# fresh container compiled what the checks had not imported (vLLM's server and engine core:
# 1.6 s more per process start, on every start).
RUN --mount=type=bind,source=images/wheelhouse,target=/tmp/wheelhouse \
    --mount=type=bind,source=images/locks/router.txt,target=/tmp/requirements.lock \
    --mount=type=bind,source=images/locks/build-tools.txt,target=/tmp/build-tools.lock \
    python3 -m venv /opt/venv \
 && python3 -m venv /tmp/build-tools \
 && /tmp/build-tools/bin/pip install --no-index --no-deps --find-links /tmp/wheelhouse -r /tmp/build-tools.lock \
 && /tmp/build-tools/bin/uv pip install --python /opt/venv/bin/python --no-config --no-cache \
        --no-index --no-deps --find-links /tmp/wheelhouse --compile-bytecode -r /tmp/requirements.lock \
 && rm -rf /tmp/build-tools

COPY generator /opt/xpyd/generator
# Restarted services run under it (generator/supervise.py: an exit nobody asked for fails).
COPY ["generator/supervise.py", "/opt/xpyd/supervise.py"]
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONPATH=/opt/xpyd \
    PYTHONUNBUFFERED=1
# The lock holds what these import: the P/D proxy, and the verdict a Kubernetes Job runs.
RUN ["python3", "-c", "import generator.proxy.__main__, generator.probes.in_cluster"]
CMD ["vllm-router", "--help"]
