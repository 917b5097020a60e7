# Rendered by xpyd-stacks from images/templates/engine-role.Dockerfile.j2: do not edit, re-render.
# The decode image: a thin layer over the stack's engine base, so a role-only change
# (a patch, a plugin, a debug tool) has a place without forking the base.
ARG BASE_IMAGE=xpyd/engine-base:2cb0987e670e

# === BEGIN decode ===
FROM ${BASE_IMAGE}
LABEL org.opencontainers.image.title="xpyd decode" \
      org.xpyd.role="decode"
ENV XPYD_ROLE=decode
CMD ["python3", "-m", "vllm.entrypoints.openai.api_server", "--help"]
