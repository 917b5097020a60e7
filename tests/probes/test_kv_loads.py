"""The verdict's check that the decoders loaded what vLLM counted as arrived, over LMCache's
own lines (copied from a cpu-lmcache-pd decoder and an H200 one, LMCache 0.5.6): on an H100
with CUDA graphs the decoder skipped its loads while vLLM's external_kv_transfer counter grew
as if the KV had arrived (docs/gpu-h200/xpyd-lmcache-1gpu/stall-one-then-four-h100.md)."""

from __future__ import annotations

import json
from pathlib import Path

from generator.paths import Workspace
from generator.planner import make_plan
from generator.probes import run_smoke
from generator.probes.kv_loads import kv_load_row
from generator.stack import load_spec
from generator.topologies import topology_of
from generator.topologies.base import LoadLog
from tests.probes.recorded import ReplayTransport

RECORDED = Path(__file__).parent / "recorded" / "cpu-lmcache-pd.json"
COMPLETION = "cmpl-1d68a2b8dd4f4e93a97376de81c75aab"
CHAT = "chatcmpl-17f360d96fd745e0ae6c54a61fe4ef0f"
LINES = {
    "completion": "[2026-12-07 00:09:32,528] LMCache INFO: [req_id=cmpl-1d68a2b8dd4f4e93a97376de81c"
    "75aab-0-b37666d3] Retrieved 1040 out of 1040 required tokens (from 1040 total tokens). "
    "size: 0.0006 gb, cost 3.6695 ms, throughput: 0.1663 GB/s; (cache_engine.py:985:lmcache.v1"
    ".cache_engine)",
    # A chat's id on the decoder is cmpl-, the answer's chatcmpl-: the same request id.
    "chat": "[2026-12-07 00:09:32,897] LMCache INFO: [req_id=cmpl-17f360d96fd745e0ae6c54a61fe4ef"
    "0f-0-9e36a662] Retrieved 1061 out of 1061 required tokens (from 1061 total tokens). size: "
    "0.0006 gb, cost 3.5690 ms, throughput: 0.1710 GB/s; (cache_engine.py:985:lmcache.v1"
    ".cache_engine)",
    # The prefiller's line for the same request: a store, not a load.
    "stored": "[2026-12-07 00:09:32,507] LMCache INFO: [req_id=cmpl-1d68a2b8dd4f4e93a97376de81c7"
    "5aab-0-bd5730fd] Stored 1040 out of total 1040 tokens. size: 0.0006 GB, cost 2.7812 ms",
}
ANSWERS = (("completion", COMPLETION), ("chat", CHAT))


def _lmcache_log(workspace: Workspace) -> LoadLog:
    plan = make_plan(load_spec(workspace.stack_file("cpu-lmcache-pd")))
    found = topology_of(plan).verdict_sources(plan)
    assert found is not None
    assert found.load_log is not None
    return found.load_log


def test_both_requests_loaded_in_full_pass(workspace: Workspace) -> None:
    text = "\n".join([LINES["stored"], "noise", LINES["completion"], LINES["chat"]])
    row = kv_load_row(_lmcache_log(workspace), text, ANSWERS)
    assert (row.passed, row.observed) == (
        True,
        "completion: 1040 of 1040 tokens; chat: 1061 of 1061 tokens",
    )


def test_a_request_whose_load_was_skipped_fails_though_another_loaded(
    workspace: Workspace,
) -> None:
    """The stall: the decoder's start_load_kv returned at once, no line for the request (a
    store on the prefiller's side does not count)."""
    text = "\n".join([LINES["stored"], LINES["chat"]])
    row = kv_load_row(_lmcache_log(workspace), text, ANSWERS)
    assert (row.passed, row.observed) == (
        False,
        "completion: no load logged; chat: 1061 of 1061 tokens",
    )


def test_a_partial_load_fails(workspace: Workspace) -> None:
    """The H100's one load came 30 s late and short: 768 of 806 tokens."""
    partial = LINES["completion"].replace("Retrieved 1040 out of 1040", "Retrieved 768 out of 806")
    row = kv_load_row(_lmcache_log(workspace), "\n".join([partial, LINES["chat"]]), ANSWERS)
    assert row.passed is False
    assert row.observed.startswith("completion: 768 of 806 tokens")


def test_every_tp_rank_must_have_loaded_its_share(workspace: Workspace) -> None:
    short = LINES["completion"].replace("Retrieved 1040 out", "Retrieved 0 out")
    text = "\n".join([LINES["completion"], short, LINES["chat"]])
    row = kv_load_row(_lmcache_log(workspace), text, ANSWERS)
    assert row.passed is False
    assert row.observed.startswith("completion: 0 of 1040 tokens")


def test_logs_out_of_reach_are_not_judged(workspace: Workspace) -> None:
    row = kv_load_row(_lmcache_log(workspace), None, ANSWERS)
    assert (row.passed, row.mark) == (None, "info")


def test_nixl_mp_has_no_load_log(workspace: Workspace) -> None:
    plan = make_plan(load_spec(workspace.stack_file("cpu-1p1d")))
    found = topology_of(plan).verdict_sources(plan)
    assert found is not None
    assert found.load_log is None


def test_the_recorded_live_smoke_fails_without_the_completions_load(workspace: Workspace) -> None:
    """The real verdict over a live cpu-lmcache-pd's recorded answers, with the decoder's line
    for the completion taken out of its log: it fails on that row alone."""
    recorded = json.loads(RECORDED.read_text(encoding="utf-8"))
    plan = make_plan(load_spec(workspace.stack_file(recorded["stack"])))
    completion_id = _recorded_completion_id(recorded)
    core = completion_id.split("-", 1)[1]
    kept = [line for line in recorded["logs"] if not (core in line and "Retrieved" in line)]
    assert len(kept) == len(recorded["logs"]) - 1
    result = run_smoke(
        plan,
        nonce=recorded["nonce"],
        read_inside=lambda service, url: "",
        transport=ReplayTransport(plan, recorded["exchanges"]),
        logs=lambda services: "\n".join(kept),
    )
    failed = {row.check: row.observed for row in result.rows if row.passed is False}
    assert list(failed) == ["KV loaded on decode (LMCache's log)"]
    assert failed["KV loaded on decode (LMCache's log)"].startswith("completion: no load logged")
    assert not result.passed


def _recorded_completion_id(recorded: dict[str, object]) -> str:
    exchanges = recorded["exchanges"]
    assert isinstance(exchanges, list)
    for exchange in exchanges:
        if exchange["key"] == "router POST /v1/completions":
            body = json.loads(exchange["body"])
            return str(body["id"])
    raise AssertionError("no completion in the recording")
