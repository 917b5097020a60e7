# Rendered by xpyd-stacks from images/templates/router.Dockerfile.j2: do not edit, re-render.
# The router image: vllm-router (Rust, from PyPI) and our P/D proxy (generator.proxy).
ARG BASE_IMAGE=debian:bookworm-slim

# === BEGIN builder ===
FROM ${BASE_IMAGE} AS builder
# Debian's packages, unpinned on purpose: point releases carry security fixes and old pins
# vanish from the mirror (hadolint DL3008 is disabled for this reason in .hadolint.yaml).
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv \
 && rm -rf /var/lib/apt/lists/*
# === BEGIN pip settings ===
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
# === BEGIN python venv from images/locks/router.txt ===
RUN python3 -m venv /opt/venv
COPY images/locks/router.txt /tmp/requirements.lock
RUN /opt/venv/bin/pip install --no-deps -r /tmp/requirements.lock


# === BEGIN runtime ===
FROM ${BASE_IMAGE}
ARG VLLM_ROUTER_VERSION=0.1.17
LABEL org.opencontainers.image.title="xpyd router" \
      org.xpyd.role="router" \
      org.xpyd.vllm-router="${VLLM_ROUTER_VERSION}"
# nftables: a link cut's one-off on a host that runs only the router (generator/docker/netcut.py).
# Debian's packages, unpinned on purpose: point releases carry security fixes and old pins
# vanish from the mirror (hadolint DL3008 is disabled for this reason in .hadolint.yaml).
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 ca-certificates nftables \
 && rm -rf /var/lib/apt/lists/*
COPY --from=builder /opt/venv /opt/venv
COPY generator /opt/xpyd/generator
# Restarted services run under it (generator/supervise.py: an exit nobody asked for fails).
COPY ["generator/supervise.py", "/opt/xpyd/supervise.py"]
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONPATH=/opt/xpyd \
    PYTHONUNBUFFERED=1
# The lock holds what these import: the P/D proxy, and the verdict a Kubernetes Job runs.
RUN ["python3", "-c", "import generator.proxy.__main__, generator.probes.in_cluster"]
CMD ["vllm-router", "--help"]
