"""LMCache KV connector for vLLM's CPU build.

The cpu profile's stand-in for LMCache's GPU connectors.
"""
