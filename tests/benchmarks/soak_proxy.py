"""Soak: the P/D proxy's memory, errors and health checks under many concurrent streams and a
few huge request bodies at once, on loopback, against STAND-IN backends (standin_backend.py,
stream events 200 ms apart: they only make the streams last; they are not vLLM).

While ``--rounds`` rounds of ``--streams`` concurrent SSE requests run, ``--bodies`` clients
each send a ``--body-mb`` MB body (half with Content-Length, half chunked: the proxy must
answer 413 without holding them), /health is polled every 200 ms (2 s timeout), and the
proxy's RSS is sampled every 100 ms. Bounded in count and in time (``--deadline-s``).

Then ``--answers`` concurrent non-streamed requests whose decode answers are ``--answer-mb``
MB each (the stand-in pads them): the proxy passes them on as they arrive.

Targets (issues 8 and 17): peak proxy RSS < 300 MB, no failed stream, every huge body refused
without being held (413; or 503 + Retry-After while the proxy's body budget is full), no failed
health check, every large answer whole with the proxy's RSS < 300 MB during them and back
within 50 MB of before after. Exit 1 if one is missed.

Run: python tests/benchmarks/soak_proxy.py [--streams 1000] [--rounds 2] [--bodies 10]
     [--answers 10] [--answer-mb 60]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

HERE = Path(__file__).resolve().parent
PREFILL_PORT, DECODE_PORT, PROXY_PORT = 18821, 18822, 18831
BASE = f"http://127.0.0.1:{PROXY_PORT}"
RSS_TARGET_MB = 300
RSS_LEFT_AFTER_ANSWERS_MB = 50


@dataclass
class Tally:
    streams: Counter[str] = field(default_factory=Counter)
    bodies: Counter[str] = field(default_factory=Counter)
    health_checks: int = 0
    health_failures: int = 0
    health_slowest_s: float = 0.0
    rss_peak_mb: float = 0.0
    answers: Counter[str] = field(default_factory=Counter)
    rss_before_answers_mb: float = 0.0
    rss_peak_answers_mb: float = 0.0
    rss_after_answers_mb: float = 0.0


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def sample_rss(pid: int, tally: Tally, attr: str = "rss_peak_mb") -> None:
    while True:
        setattr(tally, attr, max(getattr(tally, attr), rss_mb(pid)))
        await asyncio.sleep(0.1)


async def poll_health(client: aiohttp.ClientSession, tally: Tally) -> None:
    timeout = aiohttp.ClientTimeout(total=2)
    while True:
        started = time.monotonic()
        try:
            async with client.get(f"{BASE}/health", timeout=timeout) as reply:
                ok = reply.status == 200
        except (aiohttp.ClientError, TimeoutError):
            ok = False
        tally.health_checks += 1
        tally.health_failures += not ok
        tally.health_slowest_s = max(tally.health_slowest_s, time.monotonic() - started)
        await asyncio.sleep(0.2)


async def post_completion(client: aiohttp.ClientSession, body: bytes) -> tuple[int, bytes]:
    async with client.post(
        f"{BASE}/v1/completions", data=body, headers={"Content-Type": "application/json"}
    ) as reply:
        return reply.status, await reply.read()


async def one_stream(client: aiohttp.ClientSession, body: bytes, tally: Tally) -> None:
    try:
        status, raw = await post_completion(client, body)
        if status != 200:
            tally.streams[f"status {status}"] += 1
        elif b'"error"' in raw or not raw.endswith(b"data: [DONE]\n\n"):
            tally.streams["broken stream"] += 1
        else:
            tally.streams["ok"] += 1
    except (aiohttp.ClientError, TimeoutError) as exc:
        tally.streams[type(exc).__name__] += 1


async def chunks(data: bytes, size: int = 2**20) -> AsyncIterator[memoryview]:
    view = memoryview(data)
    for start in range(0, len(view), size):
        yield view[start : start + size]


async def one_huge_body(
    client: aiohttp.ClientSession, data: bytes, *, declared: bool, tally: Tally
) -> None:
    kind = "Content-Length" if declared else "chunked"
    started = time.monotonic()
    try:
        async with client.post(
            f"{BASE}/v1/completions",
            data=io.BytesIO(data) if declared else chunks(data),
            headers={"Content-Type": "application/json"},
        ) as reply:
            await reply.read()
        tally.bodies[f"{kind}: {reply.status} in {time.monotonic() - started:.1f} s"] += 1
    except (aiohttp.ClientError, TimeoutError) as exc:
        # A proxy that answers 413 early may close before the upload ends: a client error here
        # is only a failure if no 413 came (counted apart).
        tally.bodies[f"{kind}: {type(exc).__name__}"] += 1


async def soak(args: argparse.Namespace, proxy_pid: int) -> Tally:
    tally = Tally()
    stream_body = json.dumps(
        {"model": "m", "prompt": "soak " * 50, "max_tokens": 16, "stream": True}
    ).encode()
    huge = json.dumps({"model": "m", "prompt": "x" * (args.body_mb * 10**6)}).encode()
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as client:
        background = [
            asyncio.create_task(sample_rss(proxy_pid, tally)),
            asyncio.create_task(poll_health(client, tally)),
        ]
        for round_index in range(args.rounds):
            work = [one_stream(client, stream_body, tally) for _ in range(args.streams)]
            if round_index == 0:
                work += [
                    one_huge_body(client, huge, declared=index % 2 == 0, tally=tally)
                    for index in range(args.bodies)
                ]
            await asyncio.gather(*work)
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
    return tally


async def one_large_answer(
    client: aiohttp.ClientSession, body: bytes, expected_mb: int, tally: Tally
) -> None:
    try:
        status, raw = await post_completion(client, body)
        if status != 200:
            tally.answers[f"status {status}"] += 1
        elif len(json.loads(raw)["choices"][0]["text"]) < expected_mb * 10**6 * 0.99:
            tally.answers["short answer"] += 1
        else:
            tally.answers["ok"] += 1
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        tally.answers[type(exc).__name__] += 1


async def large_answers(args: argparse.Namespace, proxy_pid: int, tally: Tally) -> None:
    body = json.dumps({"model": "m", "prompt": "large", "max_tokens": 16}).encode()
    await asyncio.sleep(2)  # what the soak left behind settles first
    tally.rss_before_answers_mb = rss_mb(proxy_pid)
    sampler = asyncio.create_task(sample_rss(proxy_pid, tally, "rss_peak_answers_mb"))
    timeout = aiohttp.ClientTimeout(total=300)
    async with aiohttp.ClientSession(timeout=timeout) as client:
        await asyncio.gather(
            *(one_large_answer(client, body, args.answer_mb, tally) for _ in range(args.answers))
        )
    sampler.cancel()
    await asyncio.sleep(2)
    tally.rss_after_answers_mb = rss_mb(proxy_pid)


def start(command: list[str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log.open("wb"))


async def wait_ready(url: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    async with aiohttp.ClientSession() as client:
        while time.monotonic() < deadline:
            try:
                async with client.get(url, timeout=aiohttp.ClientTimeout(total=1)) as reply:
                    if reply.status == 200:
                        return
            except (aiohttp.ClientError, TimeoutError):
                pass
            await asyncio.sleep(0.2)
    raise SystemExit(f"{url} never became ready")


def write_config(scratch: Path) -> Path:
    config = {
        "protocol": "nixl",
        "listen": {"host": "127.0.0.1", "port": PROXY_PORT},
        "prefill": [{"name": "prefill-0", "url": f"http://127.0.0.1:{PREFILL_PORT}"}],
        "decode": [{"name": "decode-0", "url": f"http://127.0.0.1:{DECODE_PORT}"}],
    }  # every limit and timeout at its default: what is measured is what ships
    path = scratch / "router.yaml"
    path.write_text(json.dumps(config))  # JSON is YAML
    return path


def report(tally: Tally, args: argparse.Namespace, proxy_pid: int, seconds: float) -> bool:
    end_mb = rss_mb(proxy_pid)
    bad_streams = sum(n for kind, n in tally.streams.items() if kind != "ok")
    refused = sum(
        n for kind, n in tally.bodies.items() if ": 413 in " in kind or ": 503 in " in kind
    )
    print(f"soak: {args.rounds} x {args.streams} concurrent streams + {args.bodies} x "
          f"{args.body_mb} MB bodies, {seconds:.0f} s")  # fmt: skip
    print(f"proxy RSS: peak {tally.rss_peak_mb:.0f} MB, at the end {end_mb:.0f} MB")
    print(f"streams: {dict(tally.streams)}")
    print(f"huge bodies: {dict(tally.bodies)}")
    print(f"/health: {tally.health_failures} failed of {tally.health_checks}, "
          f"slowest {tally.health_slowest_s * 1000:.0f} ms")  # fmt: skip
    print(f"{args.answers} concurrent {args.answer_mb} MB answers: {dict(tally.answers)}; proxy "
          f"RSS {tally.rss_before_answers_mb:.0f} MB before, peak "
          f"{tally.rss_peak_answers_mb:.0f} MB, {tally.rss_after_answers_mb:.0f} MB after")  # fmt: skip
    answers_ok = (
        tally.answers["ok"] == args.answers
        and tally.rss_peak_answers_mb < RSS_TARGET_MB
        and tally.rss_after_answers_mb - tally.rss_before_answers_mb < RSS_LEFT_AFTER_ANSWERS_MB
    )
    ok = (
        tally.rss_peak_mb < RSS_TARGET_MB
        and bad_streams == 0
        and refused == args.bodies
        and tally.health_failures == 0
        and answers_ok
    )
    print(f"targets (RSS < {RSS_TARGET_MB} MB, 0 failed streams, every huge body 413/503, "
          f"0 failed health checks, every large answer whole, RSS < {RSS_TARGET_MB} MB during "
          f"and +< {RSS_LEFT_AFTER_ANSWERS_MB} MB after): {'OK' if ok else 'MISSED'}")  # fmt: skip
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--bodies", type=int, default=10)
    parser.add_argument("--body-mb", type=int, default=50)
    parser.add_argument("--answers", type=int, default=10)
    parser.add_argument("--answer-mb", type=int, default=60)
    parser.add_argument("--deadline-s", type=float, default=300)
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8 * args.streams)), hard))
    scratch = Path(tempfile.mkdtemp(prefix="soak-proxy-"))
    _fast_event_loop()
    backends = start(
        [sys.executable, str(HERE / "standin_backend.py"), str(PREFILL_PORT), str(DECODE_PORT),
         "--event-gap-ms", "200", "--answer-mb", str(args.answer_mb)],
        scratch / "standin.log",
    )  # fmt: skip
    proxy = start(
        [sys.executable, "-m", "generator.proxy", "--config", str(write_config(scratch)),
         "--log-level", "WARNING"],
        scratch / "proxy.log",
    )  # fmt: skip
    try:
        asyncio.run(wait_ready(f"{BASE}/ready"))
        started = time.monotonic()
        tally = asyncio.run(asyncio.wait_for(soak(args, proxy.pid), args.deadline_s))
        asyncio.run(asyncio.wait_for(large_answers(args, proxy.pid, tally), args.deadline_s))
        ok = report(tally, args, proxy.pid, time.monotonic() - started)
    finally:
        proxy.terminate()
        backends.terminate()
        proxy.wait(timeout=30)
        backends.wait(timeout=30)
    print(f"logs: {scratch}")
    return 0 if ok else 1


def _fast_event_loop() -> None:
    """uvloop for the load generator too, when installed: 1000 streams are a lot of Python."""
    try:
        import uvloop
    except ImportError:
        return
    uvloop.install()


if __name__ == "__main__":
    sys.exit(main())
