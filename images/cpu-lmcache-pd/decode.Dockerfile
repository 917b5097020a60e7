# Rendered by xpyd-stacks from images/templates/engine-role.Dockerfile.j2: do not edit, re-render.
# The decode image: a thin layer over the stack's engine base, so a role-only change
# (a patch, a plugin, a debug tool) has a place without forking the base.
ARG BASE_IMAGE=xpyd/engine-base:2cb0987e670e

# === BEGIN decode ===
FROM ${BASE_IMAGE}
LABEL org.opencontainers.image.title="xpyd decode" \
      org.xpyd.role="decode"
ENV XPYD_ROLE=decode

# === BEGIN LMCache CPU KV connector ===
# The cpu profile's stand-in for LMCache's GPU connectors: LMCache 0.5.6 has no KV connector for
# vLLM's CPU build and would silently recompute. A vLLM plugin (entry point) registers ours in
# LMCache's factory; cpu lmcache-pd images only. Exactness proof: images/assets/lmcache-cpu-connector.
COPY images/assets/lmcache-cpu-connector/ /opt/xpyd/src/xpyd-lmcache-cpu/
RUN pip install --no-cache-dir --no-deps --no-index --no-build-isolation /opt/xpyd/src/xpyd-lmcache-cpu \
 && python3 -c "from importlib.metadata import entry_points as e; assert 'xpyd_lmcache_cpu' in e(group='vllm.general_plugins').names"
CMD ["python3", "-m", "vllm.entrypoints.openai.api_server", "--help"]
