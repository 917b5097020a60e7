"""Benchmark: router overhead of our P/D proxy and vllm-router, in the same run.

Both routers run pinned to core 0; STAND-IN backends (standin_backend.py: they answer
instantly, so the router is what is measured) and the load generator (wrk) share core 1.
Request: a 200-word prompt, 16 tokens, NIXL protocol (prefill then decode).

Targets for our proxy on one core (issue 4): added p50 at 1 stream <= 0.8 ms, >= 1500 req/s at
32 streams (JSON and SSE), CPU <= 0.6 ms per request, no errors.

Run: python tests/benchmarks/bench_proxy.py [--seconds 10] [--policy prefix_aware]
(needs wrk; vllm-router from .cache/bare-router, made by bench_up.py, or
VLLM_ROUTER=/path/to/vllm-router). --policy: the proxy's policy on both sides (a router.yaml
instead of the seed flags; default round_robin).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
PREFILL_PORT, DECODE_PORT, PROXY_PORT, ROUTER_PORT = 18801, 18802, 18811, 18812
WORDS = ("prefill decode cache tensor router token stream latency batch kernel " * 20).split()


@dataclass
class WrkResult:
    requests_per_s: float
    p50_ms: float
    requests: int
    errors: int


def lua(stream: bool, path: Path) -> Path:
    body = json.dumps({"model": "m", "prompt": " ".join(WORDS), "max_tokens": 16, "stream": stream})
    path.write_text(
        f'wrk.method = "POST"\nwrk.body = {json.dumps(body)}\nwrk.headers["Content-Type"] = "application/json"\n'
    )
    return path


def wrk(url: str, connections: int, seconds: int, script: Path) -> WrkResult:
    command = [
        "taskset",
        "-c",
        "1",
        "wrk",
        "-t1",
        f"-c{connections}",
        f"-d{seconds}s",
        "--latency",
        "-s",
        str(script),
        url,
    ]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    p50 = re.search(r"50%\s+([\d.]+)(us|ms|s)", out)
    assert p50 is not None, out
    scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}[p50.group(2)]
    total = re.search(r"(\d+) requests in", out)
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    socket_errors = re.search(
        r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out
    )
    rate = re.search(r"Requests/sec:\s+([\d.]+)", out)
    assert total, out
    assert rate, out
    bad = int(errors.group(1)) if errors else 0
    bad += sum(int(x) for x in socket_errors.groups()) if socket_errors else 0
    return WrkResult(float(rate.group(1)), float(p50.group(1)) * scale, int(total.group(1)), bad)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_ready(url: str, timeout_s: float = 30) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"{url} never became ready")


def measure(
    base: str, pid: int, *, seconds: int, scripts: dict[str, Path], direct_p50_ms: float
) -> dict[str, float]:
    wrk(f"{base}/v1/completions", 8, 2, scripts["json"])  # warm up connections and caches
    single = wrk(f"{base}/v1/completions", 1, seconds, scripts["json"])
    before = cpu_seconds(pid)
    many = wrk(f"{base}/v1/completions", 32, seconds, scripts["json"])
    cpu_ms = (cpu_seconds(pid) - before) * 1000 / max(many.requests, 1)
    sse = wrk(f"{base}/v1/completions", 32, seconds, scripts["sse"])
    return {
        "added_p50_ms": single.p50_ms - 2 * direct_p50_ms,  # the proxy makes two backend calls
        "rps_json": many.requests_per_s,
        "rps_sse": sse.requests_per_s,
        "cpu_ms_per_request": cpu_ms,
        "errors": single.errors + many.errors + sse.errors,
    }


def proxy_settings(policy: str | None, scratch: Path) -> list[str]:
    if policy is None:
        return [
            "--protocol", "nixl", "--prefiller-host", "127.0.0.1", "--prefiller-port", str(PREFILL_PORT),
            "--decoder-host", "127.0.0.1", "--decoder-port", str(DECODE_PORT), "--port", str(PROXY_PORT),
        ]  # fmt: skip
    config = {
        "protocol": "nixl",
        "listen": {"host": "127.0.0.1", "port": PROXY_PORT},
        "policy": {"prefill": policy, "decode": policy},
        "prefill": [{"name": "p0", "url": f"http://127.0.0.1:{PREFILL_PORT}"}],
        "decode": [{"name": "d0", "url": f"http://127.0.0.1:{DECODE_PORT}"}],
    }
    path = scratch / "router.yaml"
    path.write_text(json.dumps(config))  # JSON is YAML
    return ["--config", str(path)]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--policy", help="the proxy's policy, both sides (policies.POLICIES)")
    args = parser.parse_args()
    router_binary = os.environ.get("VLLM_ROUTER", str(ROOT / ".cache/bare-router/bin/vllm-router"))
    processes: list[subprocess.Popen[bytes]] = []
    scratch = Path(tempfile.mkdtemp(prefix="bench-proxy-"))
    scripts = {"json": lua(False, scratch / "json.lua"), "sse": lua(True, scratch / "sse.lua")}

    def start(command: list[str]) -> subprocess.Popen[bytes]:
        process = subprocess.Popen(
            command,
            stdout=subprocess.DEVNULL,
            stderr=(scratch / f"{len(processes)}.log").open("wb"),
        )
        processes.append(process)
        return process

    try:
        start(
            [
                "taskset",
                "-c",
                "1",
                sys.executable,
                str(HERE / "standin_backend.py"),
                str(PREFILL_PORT),
                str(DECODE_PORT),
            ]
        )
        wait_ready(f"http://127.0.0.1:{DECODE_PORT}/health")
        direct = wrk(
            f"http://127.0.0.1:{DECODE_PORT}/v1/completions", 1, args.seconds, scripts["json"]
        )
        proxy = start([
            "taskset", "-c", "0", sys.executable, "-m", "generator.proxy",
            *proxy_settings(args.policy, scratch), "--log-level", "WARNING",
        ])  # fmt: skip
        wait_ready(f"http://127.0.0.1:{PROXY_PORT}/ready")
        base = f"http://127.0.0.1:{PROXY_PORT}"
        results = {
            "xpyd proxy": measure(
                base, proxy.pid, seconds=args.seconds, scripts=scripts, direct_p50_ms=direct.p50_ms
            )
        }
        proxy.terminate()
        if Path(router_binary).exists():
            router = start([
                "taskset", "-c", "0", router_binary, "--host", "127.0.0.1", "--port", str(ROUTER_PORT),
                "--prometheus-port", "18899", "--vllm-pd-disaggregation", "--policy", "round_robin",
                "--prefill", f"http://127.0.0.1:{PREFILL_PORT}", "--decode", f"http://127.0.0.1:{DECODE_PORT}",
                "--log-level", "warning",
            ])  # fmt: skip
            wait_ready(f"http://127.0.0.1:{ROUTER_PORT}/health")
            results["vllm-router"] = measure(
                f"http://127.0.0.1:{ROUTER_PORT}",
                router.pid,
                seconds=args.seconds,
                scripts=scripts,
                direct_p50_ms=direct.p50_ms,
            )
    finally:
        for process in processes:
            process.terminate()
    print(f"stand-in backend direct p50 (1 stream): {direct.p50_ms:.3f} ms")
    print(
        f"{'router':14s} {'added p50 @1':>13s} {'req/s @32 JSON':>15s} {'req/s @32 SSE':>14s} {'CPU ms/req':>11s} {'errors':>7s}"
    )
    for name, r in results.items():
        print(
            f"{name:14s} {r['added_p50_ms']:10.3f} ms {r['rps_json']:15.0f} {r['rps_sse']:14.0f} {r['cpu_ms_per_request']:11.3f} {r['errors']:7.0f}"
        )
    ours = results["xpyd proxy"]
    ok = (
        ours["added_p50_ms"] <= 0.8
        and min(ours["rps_json"], ours["rps_sse"]) >= 1500
        and ours["cpu_ms_per_request"] <= 0.6
        and ours["errors"] == 0
    )
    print(
        "targets (proxy: <= 0.8 ms, >= 1500 req/s JSON and SSE, <= 0.6 ms CPU/req, 0 errors):",
        "OK" if ok else "MISSED",
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
