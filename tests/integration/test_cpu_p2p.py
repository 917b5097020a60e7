"""The cpu-p2p stack for real: cpu-1p1d with lmcache.p2p on. The coordinator comes up first,
both `lmcache server`s register and see each other, and a prefix computed on one instance is
loaded by the other from its peer's LMCache (the verdict's rows, then the other direction and
a control here); last, Ctrl+C during a `bench` point on it. One `up` for the module."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from generator.plan import EnginePlan
from generator.planner import make_plan
from generator.probes.http import MetricSamples, ProbeClient, parse_samples, read_here
from generator.probes.p2p import P2PServer, PeerReuse, reuse_row
from generator.probes.requests import sized_prompt
from generator.stack import load_spec
from tests.integration.conftest import ROOT, cli, interrupt_cli, project_states

pytestmark = pytest.mark.stack
STACK = "cpu-p2p"
RUN_ID = f"pytest-p2p-{int(time.time())}"
COORDINATOR = "http://127.0.0.1:19300"  # ports.lmcache_coordinator of stacks/cpu-p2p.yaml
Counters = tuple[MetricSamples, MetricSamples]  # the engine's, its LMCache server's


@pytest.fixture(scope="module")
def stack_up() -> Iterator[dict[str, Any]]:
    result = cli("up", STACK, "--run-id", RUN_ID)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    yield json.loads((ROOT / "runs" / RUN_ID / "run.json").read_text())
    cli("down", STACK)


def test_verdict_proves_reuse_across_instances(stack_up: dict[str, Any]) -> None:
    smoke = stack_up["results"]["smoke"]
    assert smoke["passed"] is True
    rows = {row["check"]: row for row in smoke["rows"]}
    peers = rows["LMCache P2P peers (/status)"]
    assert peers["passed"] is True
    assert peers["observed"].count("registered, 1") == 2
    reuse = rows["prefix from a peer's LMCache (decode-0 <- lmcache-prefill-0)"]
    assert reuse["passed"] is True
    hits = int(reuse["observed"].split("vLLM: ", 1)[1].split(" ", 1)[0])
    loads = int(reuse["observed"].split("L2, ", 1)[1].split(" ", 1)[0])
    assert hits >= 256  # at least one whole LMCache chunk came from the peer
    assert loads > 0


def test_the_coordinator_lists_both_servers_with_their_channels(stack_up: dict[str, Any]) -> None:
    instances = httpx.get(f"{COORDINATOR}/instances", timeout=10).json()["instances"]
    advertised = {i["instance_id"]: i["p2p_advertised_url"] for i in instances}
    assert advertised == {
        "prefill-0": "lmcache-prefill-0:18290",
        "decode-0": "lmcache-decode-0:18291",
    }
    assert httpx.get(f"{COORDINATOR}/healthz", timeout=10).status_code == 200


def counters(client: ProbeClient, engine: EnginePlan, server: P2PServer) -> Counters:
    engine_page = client.scrape(engine.name, f"http://127.0.0.1:{engine.http_port}/metrics")
    server_page = read_here(server.service, f"http://127.0.0.1:{server.http_port}/metrics")
    return engine_page, parse_samples(server_page)


def complete_on(client: ProbeClient, engine: EnginePlan, prompt: str) -> None:
    url = f"http://127.0.0.1:{engine.http_port}/v1/completions"
    client.post_json(engine.name, url, {"model": "tiny-llama", "prompt": prompt, "max_tokens": 1})


def test_reuse_works_the_other_way_and_not_without_a_prior_prefill(
    stack_up: dict[str, Any],
) -> None:
    plan = make_plan(load_spec(ROOT / "stacks" / f"{STACK}.yaml"))
    prefill, decode = plan.prefill[0], plan.decode[0]
    on_decode = P2PServer(decode, "lmcache-decode-0", 18091)
    on_prefill = P2PServer(prefill, "lmcache-prefill-0", 18090)
    with ProbeClient(STACK, timeout_s=180) as client:
        # Control: a fresh prompt's first request finds it nowhere, peers included.
        prompt = sized_prompt(client, plan, f"{RUN_ID}-reverse", 3 * 256)
        before = counters(client, decode, on_decode)
        complete_on(client, decode, prompt)
        first = PeerReuse.between(before, counters(client, decode, on_decode))
        # The other way round: the prefiller loads what the decoder computed.
        row = reuse_row(plan, client, on_decode, on_prefill, prompt=prompt, read_inside=read_here)
    assert (first.hit_tokens, first.p2p_loads) == (0, 0), first.describe()
    assert row.passed is True, row.observed


def test_ctrl_c_during_a_bench_point_leaves_nothing_running(stack_up: dict[str, Any]) -> None:
    """Last: it removes the stack. `bench` adopts the running stack (its `up` changes
    nothing), and Ctrl+C during a point removes the point's one-off container and the arm
    (here, on the module's stack, it costs no `up` of its own)."""
    env = {**os.environ, "CI": "1", "NO_COLOR": "1"}
    # The point's one-off container starts right after "benchmark at" and runs ~20 s.
    code, stderr = interrupt_cli(
        "bench", STACK, "--idle-window-s", "0", "--num-prompts", "200", "--request-rate", "10",
        "--run-id", f"{RUN_ID}-interrupted", after_line="benchmark at", delay_s=6, env=env,
    )  # fmt: skip
    assert code == 130, stderr
    assert "interrupted, removing it" in stderr
    assert not project_states(ROOT, STACK, f"xpyd-{STACK}")
    leftovers = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"name=xpyd-{STACK}-bench"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert leftovers.stdout.strip() == ""
