"""What a routing policy sees of a request: its prompt as a chain of block hashes.

Blocks are hashed the way LMCache and vLLM key KV: fixed-size blocks of the prompt, each hash
chained to the one before, so equal hashes at block i mean equal prompts up to block i; only
whole blocks count. The proxy has the prompt's token ids only where the client sent them
(``prompt`` as a list of ints); the tokens of a text prompt or of chat messages come from the
engine, after the choice. Those are hashed as text, in blocks of ``block_tokens x
chars_per_token`` characters: a shared text prefix is a shared token prefix, the block edges
merely differ from the engine's.

Hashes are Python's own ``hash()`` of (previous hash, block): fast, and stable within one
proxy process, which is where the LRU that stores them lives (text hashes are seeded per
process). A collision only misroutes one request.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["NO_VIEW", "RequestView"]

_SEED = 0x9E3779B97F4A7C15  # the chain's start: any constant


@dataclass(slots=True)
class RequestView:
    """The request as policies see it; hashes are made at most once, and only if a policy
    asks (round robin never does)."""

    prompt: object = None  # the body's prompt, or its chat messages
    chat: bool = False
    # per (block_tokens, chars_per_token, max_blocks): the two sides' policies may differ
    _hashes: dict[tuple[int, int, int], tuple[int, ...]] | None = field(default=None, repr=False)

    @classmethod
    def of(cls, body: dict[str, Any], *, chat: bool) -> RequestView:
        return cls(body.get("messages") if chat else body.get("prompt"), chat)

    def block_hashes(
        self, block_tokens: int, chars_per_token: int, max_blocks: int
    ) -> tuple[int, ...]:
        if self._hashes is None:
            self._hashes = {}
        key = (block_tokens, chars_per_token, max_blocks)
        if key not in self._hashes:  # after release(), no prompt: no blocks
            self._hashes[key] = _hashes(self.prompt, self.chat, *key)
        return self._hashes[key]

    def release(self) -> None:
        """The payloads are serialized: the view no longer holds the prompt (hashes made so
        far stay, for a retried prefill)."""
        self.prompt = None


NO_VIEW = RequestView()  # no prompt: prefix_aware falls back to load


def _hashes(
    prompt: object, chat: bool, block_tokens: int, chars_per_token: int, max_blocks: int
) -> tuple[int, ...]:
    if chat:
        text = _chat_text(prompt)
    else:
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], (list, str)):
            prompt = prompt[0]  # a batch: its first prompt
        if _token_ids(prompt):
            assert isinstance(prompt, list)
            return _chain(prompt, block_tokens, max_blocks)
        text = prompt if isinstance(prompt, str) else None
    if text is None:
        return ()
    return _chain(text, block_tokens * chars_per_token, max_blocks)


def _token_ids(prompt: object) -> bool:
    return isinstance(prompt, list) and bool(prompt) and type(prompt[0]) is int


def _chat_text(messages: object) -> str | None:
    """Messages as one text: role and content of each, in order (what the chat template
    renders, up to its own markup)."""
    if not isinstance(messages, list):
        return None
    parts: list[str] = []
    for message in messages:
        role = message.get("role") if isinstance(message, dict) else None
        if not isinstance(role, str):  # no text to hash (vLLM refuses such a message)
            return None
        parts += [role, "\x00", _content_text(message.get("content")), "\x00"]
    return "".join(parts)


def _content_text(content: object) -> str:
    """Text only: a value is never turned into text (str() of a deep one recurses)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI's content parts: the text ones
        return "".join(
            part["text"]
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""


def _chain(items: Sequence[Any], size: int, max_blocks: int) -> tuple[int, ...]:
    count = min(len(items) // size, max_blocks)
    hashes: list[int] = []
    previous = _SEED
    for start in range(0, count * size, size):
        block = items[start : start + size]
        try:
            previous = hash((previous, block if isinstance(block, str) else tuple(block)))
        except TypeError:  # a list or object among token ids: vLLM refuses it anyway
            break
        hashes.append(previous)
    return tuple(hashes)
