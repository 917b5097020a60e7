"""The cpu-lmcache-pd stack for real: LMCache's own P/D transfer on vLLM's CPU build, driven
by our proxy (disagg_spec, ZMQ notices, first token from the prefiller), with the CPU KV
connector in the engine images; and the connector's own check inside the image."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from generator.docker import ComposeStack
from tests.integration.conftest import ROOT, cli

pytestmark = pytest.mark.stack
STACK, PROJECT = "cpu-lmcache-pd", "xpyd-cpu-lmcache-pd"
RUN_ID = f"pytest-lmpd-{int(time.time())}"


@pytest.fixture(scope="module")
def stack_up() -> Iterator[dict[str, Any]]:
    result = cli("up", STACK, "--run-id", RUN_ID)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    yield json.loads((ROOT / "runs" / RUN_ID / "run.json").read_text())
    # An idle LMCache P/D engine spins a whole core: never leave it running for later tests.
    cli("down", STACK)


def test_verdict_proves_lmcache_moved_the_kv(stack_up: dict[str, Any]) -> None:
    smoke = stack_up["results"]["smoke"]
    assert smoke["passed"] is True
    rows = {row["check"]: row for row in smoke["rows"]}
    # All prompt tokens of both smoke requests came from the prefiller; the decoder computed
    # only the two appended first tokens.
    assert (
        int(rows["prompt tokens from prefill (decode: external_kv_transfer)"]["observed"])
        >= 2 * smoke["prompt_tokens"]
    )
    assert rows["prompt tokens computed on decode (local_compute)"]["observed"] == "2"
    assert rows["router stamps prefill/decode pair"]["passed"] is True
    # LMCache's P/D writes, timed by NIXL's own telemetry exporter on the prefiller.
    speed = rows["KV path speed (NIXL writes, per request)"]
    assert speed["mark"] == "info"
    assert "MiB in" in speed["observed"]
    assert speed["observed"].endswith("over tcp")


def test_engines_use_the_cpu_connector(stack_up: dict[str, Any]) -> None:
    for service in ("prefill-0", "decode-0"):
        logs = cli("logs", STACK, service)
        assert "LMCache on CPU: using xpyd_lmcache_cpu.VLLMPagedMemCPUConnector" in logs.stdout
        assert "degraded mode" not in logs.stdout


def test_proxy_metrics_count_the_kv_notices(stack_up: dict[str, Any]) -> None:
    import httpx

    text = httpx.get("http://127.0.0.1:8100/metrics", timeout=10).text
    assert 'xpyd_proxy_kv_wait_seconds_count{backend="prefill-0"}' in text
    assert 'xpyd_proxy_errors_total{backend="prefill-0",stage="kv_notice_timeout"}' not in text


def test_connector_check_inside_the_image(stack_up: dict[str, Any]) -> None:
    """The connector against vLLM's own CPU cache writer (17 lengths, partial chunks, prefix
    skips, -1 slots, the plugin's registration), run in the decoder's container setup."""
    stack = ComposeStack(ROOT / "compose" / STACK / "compose.yaml", PROJECT)
    output = stack.run_oneoff(
        "decode-0", ["python3", "/opt/xpyd/src/xpyd-lmcache-cpu/tests/check_connector.py"], []
    )
    assert "FAILURES: 0" in output, output[-3000:]
    assert output.count("PASS ") >= 20


LENGTHS = [1, 2, 17, 255, 256, 257, 300, 511, 513, 700, 1000, 1500]


def test_pd_outputs_equal_a_plain_run_over_prompt_lengths(stack_up: dict[str, Any]) -> None:
    """Greedy outputs through P/D equal the decoder computing the same prompt alone (no
    prefix cache on this stack), across chunk (256) and block (128) edges; and every prompt
    token came from the prefiller."""
    import httpx

    decoder = "http://127.0.0.1:7200"
    body = {"model": "tiny-llama", "max_tokens": 16, "temperature": 0, "ignore_eos": True}
    with httpx.Client(timeout=120) as client:
        for length in LENGTHS:
            prompt = [10 + (7 * i + length) % 2000 for i in range(length)]
            before = client.get(f"{decoder}/metrics").text
            pd = client.post("http://127.0.0.1:8100/v1/completions", json=body | {"prompt": prompt})
            assert pd.status_code == 200, pd.text
            after = client.get(f"{decoder}/metrics").text
            plain = client.post(f"{decoder}/v1/completions", json=body | {"prompt": prompt})
            assert plain.status_code == 200, plain.text
            assert pd.json()["choices"][0]["text"] == plain.json()["choices"][0]["text"], length
            moved = _counter(after, "external_kv_transfer") - _counter(
                before, "external_kv_transfer"
            )
            assert moved == length, f"{length} tokens: {moved} came from the prefiller"


def _counter(metrics: str, source: str) -> float:
    prefix = "vllm:prompt_tokens_by_source_total{"
    lines = [
        line
        for line in metrics.splitlines()
        if line.startswith(prefix) and f'source="{source}"' in line
    ]
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines)
