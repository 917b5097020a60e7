# Rendered by xpyd-stacks from images/templates/engine-role.Dockerfile.j2: do not edit, re-render.
# The lmcache image: a thin layer over the stack's engine base, so a role-only change
# (a patch, a plugin, a debug tool) has a place without forking the base.
ARG BASE_IMAGE=xpyd/engine-base:dc0b30dd1086

# === BEGIN lmcache ===
FROM ${BASE_IMAGE}
LABEL org.opencontainers.image.title="xpyd lmcache" \
      org.xpyd.role="lmcache"
ENV XPYD_ROLE=lmcache
CMD ["lmcache", "server", "--help"]
