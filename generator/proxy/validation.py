"""The checks a request passes before its prefill is sent.

With lmcache-pd the prefill pushes the KV to the decoder before the decoder sees the request;
a decoder request refused afterwards leaves that KV unread in its receive buffer (and once the
buffer is full no notice comes again). So every field that changes the decoder's request is
checked here the way vLLM 0.32's OpenAI protocol models check it, and a request vLLM would
refuse is answered 400 in OpenAI's shape before anything reaches an engine. (What can only be
known after the prefill, such as ``max_tokens`` past ``max_model_len - prompt tokens``, is
refused by the decoder; flow.py then drains the KV.)
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, NamedTuple

from generator.proxy.errors import ProxyError

__all__ = [
    "MAX_BODY_DEPTH",
    "MAX_TOKEN_COUNT",
    "RequestFacts",
    "check_context",
    "check_nesting",
    "check_request",
    "nesting_depth",
]

_INVALID = "invalid_request_error"
# What orjson writes at most (it reads 1024 levels): a body nested deeper could not be sent to
# an engine, so it is refused as it is parsed, before a policy or anything else walks it (a
# recursive walk of a 1000-deep body exhausts Python's recursion: a 500 instead of a 400).
MAX_BODY_DEPTH = 254
# No model has a context of 2**31 tokens: past it a count is an attack, and orjson could not
# serialize a count past 2**64 anyway.
MAX_TOKEN_COUNT = 2**31 - 1
# vLLM validates requests with pydantic in lax mode: the proxy reads these fields the same way,
# so that it streams exactly when vLLM does, and refuses what vLLM would refuse.
_TRUE = frozenset({"1", "true", "t", "yes", "y", "on"})
_FALSE = frozenset({"0", "false", "f", "no", "n", "off"})
_INTEGER = re.compile(r"[+-]?[0-9]{1,18}")  # ASCII digits only (str.isdigit takes others)


class RequestFacts(NamedTuple):
    """What the proxy itself reads from a request body (everything else passes through)."""

    stream: bool
    max_tokens: int | None  # chat: max_completion_tokens if given, else max_tokens
    min_tokens: int = 0


def refuse(field: str, problem: str) -> ProxyError:
    return ProxyError(400, _INVALID, f"'{field}' {problem}", param=field)


def check_request(body: dict[str, Any], *, chat: bool, pd_first_token: bool) -> RequestFacts:
    """The facts the proxy acts on; ProxyError 400 naming the field vLLM would refuse.
    ``pd_first_token``: lmcache-pd, where the prefiller makes the first token."""
    stream = _flag(body, "stream")
    if body.get("stream_options") is not None and not stream:
        raise refuse("stream_options", "can only be set if 'stream' is true")
    budget = _token_count(body, "max_completion_tokens") if chat else None
    max_tokens = budget if budget is not None else _token_count(body, "max_tokens")
    if max_tokens is not None and max_tokens < 1:
        raise refuse("max_tokens", f"must be at least 1, got {max_tokens}")
    min_tokens = _token_count(body, "min_tokens") or 0
    if min_tokens < 0:
        raise refuse("min_tokens", f"must be at least 0, got {min_tokens}")
    if max_tokens is not None and min_tokens > max_tokens:
        raise refuse("min_tokens", f"must be at most max_tokens ({max_tokens}), got {min_tokens}")
    if pd_first_token:
        _check_one_choice(body)
    return RequestFacts(stream=stream, max_tokens=max_tokens, min_tokens=min_tokens)


def check_nesting(raw: bytes | bytearray, body: object) -> None:
    """ProxyError 400 for a body nested deeper than ``MAX_BODY_DEPTH``. A body with fewer
    brackets than that cannot nest so deep: counting them (in C) spares the walk for almost
    every request, token-id prompts of 100k ids included."""
    if raw.count(b"[") + raw.count(b"{") <= MAX_BODY_DEPTH:
        return
    if nesting_depth(body, beyond=MAX_BODY_DEPTH) > MAX_BODY_DEPTH:
        raise ProxyError(
            400,
            _INVALID,
            f"body nests deeper than {MAX_BODY_DEPTH} levels of arrays and objects",
        )


def nesting_depth(value: object, *, beyond: int | None = None) -> int:
    """How many arrays and objects ``value`` nests (a scalar: 0, ``[]``: 1), walked without
    recursion; once past ``beyond`` the count stops there."""
    deepest = 0
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, above = stack.pop()
        if isinstance(item, dict):
            children: Iterable[object] = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue  # a scalar at the top
        depth = above + 1
        deepest = max(deepest, depth)
        if beyond is not None and depth > beyond:
            break
        stack.extend((child, depth) for child in children if isinstance(child, dict | list))
    return deepest


def check_context(facts: RequestFacts, max_model_len: int | None) -> None:
    """vLLM refuses max_tokens past max_model_len (before counting the prompt); the decoder's
    limit, read from its /v1/models, is checked here so that no prefill runs for it."""
    if max_model_len is not None and (facts.max_tokens or 0) > max_model_len:
        raise refuse(
            "max_tokens",
            f"is {facts.max_tokens}: it cannot be greater than max_model_len={max_model_len}",
        )


def _check_one_choice(body: dict[str, Any]) -> None:
    # The decoder continues one sequence from the prefiller's one first token: n choices
    # would need n first tokens.
    for field in ("n", "best_of"):
        count = _token_count(body, field)
        if count is not None and count != 1:
            raise refuse(field, "must be 1 with lmcache-pd P/D (one first token per request)")


def _flag(body: dict[str, Any], key: str) -> bool:
    value = body.get(key)
    if value is None or isinstance(value, bool):
        return bool(value)
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise refuse(key, "must be true or false")


def _integral(value: object) -> bool:
    if isinstance(value, float):
        return value.is_integer()
    return isinstance(value, str) and _INTEGER.fullmatch(value.strip()) is not None


def _token_count(body: dict[str, Any], key: str) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        count = value
    elif _integral(value):
        count = int(value)
    else:
        raise refuse(key, "must be an integer")
    if abs(count) > MAX_TOKEN_COUNT:
        raise refuse(key, f"must be at most {MAX_TOKEN_COUNT}")
    return count
