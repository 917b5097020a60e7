# Rendered by xpyd-stacks from images/templates/engine-role.Dockerfile.j2: do not edit, re-render.
# The prefill image: a thin layer over the stack's engine base, so a role-only change
# (a patch, a plugin, a debug tool) has a place without forking the base.
ARG BASE_IMAGE=xpyd/engine-base:dc0b30dd1086

# === BEGIN prefill ===
FROM ${BASE_IMAGE}
LABEL org.opencontainers.image.title="xpyd prefill" \
      org.xpyd.role="prefill"
ENV XPYD_ROLE=prefill
CMD ["python3", "-m", "vllm.entrypoints.openai.api_server", "--help"]
