"""Routing policies: the one registry of policy names, each a factory with its options model.

The proxy's config (router.yaml) and the generator's router unit (routers/proxy.py) both read
``POLICIES``, so a name or an option valid in one is valid in the other. A policy is asked
after the request is parsed and before its payloads are serialized, with a ``RequestView``
of it; it only ever chooses among the candidates it is given (healthy, not ejected, not
excluded: the pool filters them), so it cannot pick an unavailable backend.

- ``round_robin``: the candidates in turn.
- ``least_outstanding``: the fewest requests in flight (ties in turn).
- ``prefix_aware``: requests sharing a prompt prefix go to the backend that served it last
  (its vLLM prefix cache and LMCache hold that prefix's KV), unless that backend is hot
  (outstanding > least + ``hot_threshold``); else least outstanding. Prefixes are chains of
  block hashes (prompt.py), kept in a bounded LRU of block hash -> backend name.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from generator.proxy.prompt import NO_VIEW, RequestView

__all__ = [
    "NO_VIEW",
    "POLICIES",
    "LeastOutstanding",
    "Policy",
    "PolicyKind",
    "PrefixAware",
    "PrefixAwareOptions",
    "RequestView",
    "RoundRobin",
    "Worker",
    "make_policy",
]


class Worker(Protocol):
    """What a policy reads of a backend."""

    @property
    def name(self) -> str: ...

    @property
    def outstanding(self) -> int: ...


W = TypeVar("W", bound=Worker)


class Policy(Protocol):
    def choose(self, candidates: Sequence[W], view: RequestView) -> W:
        """One of ``candidates`` (never empty) for this request."""
        ...


class NoOptions(BaseModel):
    # strict, as the stack spec is: "8" is not 8
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class PrefixAwareOptions(NoOptions):
    # Tokens per hashed block: LMCache's chunk_size (it stores and finds KV per chunk); the
    # generator renders the stack's own. Only whole blocks count, as in vLLM and LMCache.
    block_tokens: int = Field(256, ge=1, le=65536)
    # Text prompts (the proxy has no tokenizer) are hashed in blocks of block_tokens x this
    # many characters: ~4 characters per token for English text with BPE tokenizers.
    chars_per_token: int = Field(4, ge=1, le=64)
    # Bounds the LRU: ~150 bytes an entry, so the default holds ~15 MB, and 100k blocks of
    # 256 tokens is 25M prompt tokens: more KV than the prefillers' caches hold.
    capacity_blocks: int = Field(100_000, ge=1, le=10_000_000)
    # A prompt's first blocks only (CPU per request): 4096 x 256 tokens is a 1M-token prompt.
    max_blocks: int = Field(4096, ge=1, le=65536)
    # A backend with more than least + this many requests in flight is hot: a cache hit there
    # waits behind its queue, so the request goes to the least loaded instead.
    hot_threshold: int = Field(8, ge=0)


@dataclass
class RoundRobin:
    _turn: itertools.count[int] = field(default_factory=itertools.count)

    def choose(self, candidates: Sequence[W], view: RequestView) -> W:
        return candidates[next(self._turn) % len(candidates)]


@dataclass
class LeastOutstanding:
    _turn: RoundRobin = field(default_factory=RoundRobin)

    def choose(self, candidates: Sequence[W], view: RequestView) -> W:
        return self._turn.choose(least_loaded(candidates), view)


def least_loaded(candidates: Sequence[W]) -> list[W]:
    low = min(c.outstanding for c in candidates)
    return [c for c in candidates if c.outstanding == low]


@dataclass
class PrefixAware:
    options: PrefixAwareOptions
    _owners: OrderedDict[int, str] = field(default_factory=OrderedDict)  # block -> backend
    _fallback: LeastOutstanding = field(default_factory=LeastOutstanding)

    def choose(self, candidates: Sequence[W], view: RequestView) -> W:
        blocks = view.block_hashes(
            self.options.block_tokens, self.options.chars_per_token, self.options.max_blocks
        )
        chosen = self._longest_match(candidates, blocks) or self._fallback.choose(candidates, view)
        self._remember(blocks, chosen.name)
        return chosen

    def _longest_match(self, candidates: Sequence[W], blocks: Sequence[int]) -> W | None:
        """The backend holding the longest prefix among those not hot: blocks are chained,
        so a block's hash stands for the whole prefix up to it."""
        limit = min(c.outstanding for c in candidates) + self.options.hot_threshold
        cool = {c.name: c for c in candidates if c.outstanding <= limit}
        for block in reversed(blocks):
            owner = cool.get(self._owners.get(block, ""))
            if owner is not None:
                return owner
        return None

    def _remember(self, blocks: Sequence[int], name: str) -> None:
        owners = self._owners
        for block in blocks:
            owners[block] = name
            owners.move_to_end(block)
        while len(owners) > self.options.capacity_blocks:
            owners.popitem(last=False)

    def __len__(self) -> int:
        return len(self._owners)


@dataclass(frozen=True)
class PolicyKind:
    """A policy name's options model and how to make the policy from validated options."""

    options: type[BaseModel]
    make: Callable[[Any], Policy]
    summary: str


POLICIES: Mapping[str, PolicyKind] = MappingProxyType(
    {
        "round_robin": PolicyKind(NoOptions, lambda _: RoundRobin(), "candidates in turn"),
        "least_outstanding": PolicyKind(
            NoOptions, lambda _: LeastOutstanding(), "fewest requests in flight"
        ),
        "prefix_aware": PolicyKind(
            PrefixAwareOptions,
            PrefixAware,
            "same prompt prefix, same backend, unless it is hot",
        ),
    }
)


def make_policy(name: str, options: Mapping[str, object]) -> Policy:
    """KeyError for an unknown name, pydantic's ValidationError for bad options (the config
    model checks both first, with messages naming the field)."""
    kind = POLICIES[name]
    return kind.make(kind.options.model_validate(dict(options)))
