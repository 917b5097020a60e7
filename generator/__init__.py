"""xpyd-stacks: one typed spec of a vLLM prefill/decode stack -> rendered, running, verified."""

__version__ = "0.1.0"
