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
RUN python3 -m venv /opt/venv
COPY images/locks/router.txt /tmp/requirements.lock
RUN /opt/venv/bin/pip install --no-deps -r /tmp/requirements.lock && rm /tmp/requirements.lock

COPY generator /opt/xpyd/generator
# Restarted services run under it (generator/supervise.py: an exit nobody asked for fails).
COPY ["generator/supervise.py", "/opt/xpyd/supervise.py"]
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONPATH=/opt/xpyd \
    PYTHONUNBUFFERED=1
# The lock holds what these import: the P/D proxy, and the verdict a Kubernetes Job runs.
RUN ["python3", "-c", "import generator.proxy.__main__, generator.probes.in_cluster"]
CMD ["vllm-router", "--help"]
