"""The requests a verdict sends through the router: a fresh prompt of a given size, a
completion, a streaming chat completion."""

from __future__ import annotations

import json
from typing import Any

import httpx

from generator.plan import Plan
from generator.probes.verdict import VerdictRow

__all__ = [
    "SMOKE_MAX_TOKENS",
    "answer_rows",
    "chat_stream",
    "complete",
    "completion_text",
    "sized_prompt",
]

SMOKE_MAX_TOKENS = 16
_SENTENCE = (
    "prefill decode cache tensor router token stream latency batch kernel memory transfer "
    "network engine model layer attention chunk buffer queue worker request session"
)
_WORDS = _SENTENCE.split()


def sized_prompt(client: httpx.Client, plan: Plan, nonce: str, tokens: int) -> str:
    """A fresh prompt (the nonce defeats prefix caches) of about ``tokens`` tokens, sized with
    the first decoder's own tokenizer to stay inside max_model_len."""
    limit = (plan.model.max_model_len or 4096) - SMOKE_MAX_TOKENS - 64
    target = max(1, min(tokens, limit))
    words = [f"run {nonce}:"] + [_WORDS[(i * 7 + len(nonce)) % len(_WORDS)] for i in range(target)]
    decoder = plan.decode[0]
    url = f"http://{plan.reach_address(decoder.host)}:{decoder.http_port}/tokenize"
    while len(words) > 2:
        prompt = " ".join(words)
        body = {"model": plan.model.served_name, "prompt": prompt}
        count = int(client.post(url, json=body).json()["count"])
        if count <= limit:
            return prompt
        words = words[: max(2, len(words) * limit // count - 1)]
    return " ".join(words)


def complete(
    client: httpx.Client, router: str, model: str, prompt: str, headers: dict[str, str]
) -> dict[str, Any]:
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": SMOKE_MAX_TOKENS,
        "temperature": 0,
        "ignore_eos": True,
    }
    response = client.post(f"{router}/v1/completions", json=body, headers=headers)
    response.raise_for_status()
    result: dict[str, Any] = response.json()
    # Our proxy names the pair it used in headers; vllm-router stamps the response id.
    result["_pair"] = (
        response.headers.get("X-Xpyd-Prefill"),
        response.headers.get("X-Xpyd-Decode"),
    )
    return result


def chat_stream(
    client: httpx.Client, router: str, model: str, prompt: str, headers: dict[str, str]
) -> tuple[str, int]:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": SMOKE_MAX_TOKENS,
        "temperature": 0,
        "stream": True,
    }
    text, chunks, done = [], 0, False
    with client.stream(
        "POST", f"{router}/v1/chat/completions", json=body, headers=headers
    ) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: "):
                continue
            payload = line.removeprefix("data: ").strip()
            if payload == "[DONE]":
                done = True
                break
            event = json.loads(payload)
            for choice in event.get("choices", []):
                text.append((choice.get("delta") or {}).get("content") or "")
            chunks += 1
    return "".join(text), chunks if done else 0


def answer_rows(completion: dict[str, Any], chunks: int) -> list[VerdictRow]:
    """Both kinds of request were answered in full through the router."""
    tokens = (completion.get("usage") or {}).get("completion_tokens")
    return [
        VerdictRow(
            "completion via router",
            f"{tokens or 0} tokens",
            f"{SMOKE_MAX_TOKENS} tokens",
            tokens == SMOKE_MAX_TOKENS,
        ),
        VerdictRow(
            "streaming chat via router", f"{chunks} chunks, [DONE]", "> 0 chunks", chunks > 0
        ),
    ]


def completion_text(completion: dict[str, Any]) -> str:
    choices = completion.get("choices") or [{}]
    return str(choices[0].get("text", ""))
