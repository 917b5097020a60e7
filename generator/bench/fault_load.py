"""The load a fault drill keeps running through the fault: ``concurrency`` clients, each
sending one streamed completion after another through the router for ``duration_s``, each
with its own deadline. Every request's outcome is kept: when it started and ended, whether
any of its answer had arrived, and how it failed.

Our own client rather than vLLM's `bench serve`: the drill needs each request's start, end
and failure kind against the fault's time, which that benchmark does not report.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import asdict, dataclass
from typing import Any

import aiohttp

__all__ = ["LoadSettings", "Outcome", "run_load"]

_AFTER_FAILURE_S = 0.2
_WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india")


@dataclass(frozen=True)
class LoadSettings:
    url: str  # the router's /v1/completions
    model: str
    concurrency: int = 4
    duration_s: float = 60.0
    deadline_s: float = 30.0  # one request's whole time, as a client would set it
    prompt_words: int = 200
    max_tokens: int = 32
    headers: tuple[tuple[str, str], ...] = ()


@dataclass
class Outcome:
    start_s: float  # since the load started
    end_s: float
    ok: bool
    started: bool  # some of the answer had reached the client
    error: str | None = None  # http_<status>, error_event, cut, deadline, connect
    tokens: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_load(settings: LoadSettings) -> list[Outcome]:
    return asyncio.run(_load(settings))


async def _load(settings: LoadSettings) -> list[Outcome]:
    outcomes: list[Outcome] = []
    origin = time.monotonic()
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        clients = [
            _client(session, settings, origin, index, outcomes)
            for index in range(settings.concurrency)
        ]
        await asyncio.gather(*clients)
    return sorted(outcomes, key=lambda outcome: outcome.start_s)


async def _client(
    session: aiohttp.ClientSession,
    settings: LoadSettings,
    origin: float,
    index: int,
    outcomes: list[Outcome],
) -> None:
    words = random.Random(index)
    while (now := time.monotonic() - origin) < settings.duration_s:
        # A prompt of its own each time: no prefix cache hides a recomputation.
        prompt = " ".join(words.choice(_WORDS) for _ in range(settings.prompt_words))
        outcome = Outcome(start_s=now, end_s=now, ok=False, started=False)
        try:
            async with asyncio.timeout(settings.deadline_s):
                await _one(session, settings, prompt, outcome)
        except TimeoutError:
            outcome.error = "deadline"
        except aiohttp.ClientConnectorError:
            outcome.error = "connect"
        except aiohttp.ClientError:
            outcome.error = "cut"
        outcome.end_s = time.monotonic() - origin
        outcomes.append(outcome)
        if not outcome.ok:  # as a client would: a failure answered at once is no busy loop
            await asyncio.sleep(_AFTER_FAILURE_S)


async def _one(
    session: aiohttp.ClientSession, settings: LoadSettings, prompt: str, outcome: Outcome
) -> None:
    body = {
        "model": settings.model,
        "prompt": prompt,
        "max_tokens": settings.max_tokens,
        "min_tokens": settings.max_tokens,  # every answer as long: comparable seconds
        "stream": True,
    }
    async with session.post(settings.url, json=body, headers=dict(settings.headers)) as reply:
        if reply.status != 200:
            await reply.read()
            outcome.error = f"http_{reply.status}"
            return
        done = False
        async for line in reply.content:
            if not line.startswith(b"data: "):
                continue
            data = line[6:].strip()
            if data == b"[DONE]":
                done = True
                break
            event = json.loads(data)
            if "error" in event:
                outcome.error = "error_event"
                return
            outcome.started = True
            outcome.tokens += 1
        outcome.ok = done and outcome.error is None
        if not done:
            outcome.error = "cut"
