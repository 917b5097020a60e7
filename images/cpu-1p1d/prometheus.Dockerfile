# Rendered by xpyd-stacks from images/templates/prometheus-cpu.Dockerfile.j2: do not edit, re-render.
# observe's Prometheus on the cpu profile: Debian's package on the stack's local base image
# (cpu machines may reach no container registry; GPU hosts pull prom/prometheus, pinned).
ARG BASE_IMAGE=debian:bookworm-slim

# === BEGIN prometheus ===
FROM ${BASE_IMAGE}
LABEL org.opencontainers.image.title="xpyd prometheus" \
      org.xpyd.role="prometheus"
# wget: the healthcheck asks /-/ready, as in the upstream image (busybox's wget there).
# Debian's packages, unpinned on purpose: point releases carry security fixes and old pins
# vanish from the mirror (hadolint DL3008 is disabled for this reason in .hadolint.yaml).
RUN apt-get update \
 && apt-get install -y --no-install-recommends prometheus wget \
 && rm -rf /var/lib/apt/lists/*
CMD ["prometheus", "--version"]
