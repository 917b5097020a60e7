"""Issue 19 for real: `bench cpu-faults --fault kill:decode-0@T` on the 1P2D cpu stack (real
vLLM, LMCache servers, our proxy; three engines sharing 2 cores): a steady streamed load runs
through the decoder's crash; Docker brings it back (on-failure, through the supervisor), our
proxy takes it out of rotation and migrates the requests whose answer had not started, and
the verdict passes again afterwards."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.conftest import ROOT, cli

pytestmark = pytest.mark.stack
STACK = "cpu-faults"
RUN_ID = f"pytest-fault-{int(time.time())}"
FAULT_AT_S, DURATION_S, DEADLINE_S = 10, 40, 30


@pytest.fixture(scope="module")
def drill() -> Iterator[dict[str, Any]]:
    result = cli(
        "bench",
        STACK,
        "--fault",
        f"kill:decode-0@{FAULT_AT_S}",
        "--fault-duration-s",
        str(DURATION_S),
        "--fault-deadline-s",
        str(DEADLINE_S),
        "--run-id",
        RUN_ID,
        "--wait-scale",
        "3",  # three engines on two cores start slowly
    )
    try:
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
        yield json.loads((ROOT / "runs" / RUN_ID / "fault.json").read_text())
    finally:
        cli("down", STACK)


def test_our_proxy_drives_the_nixl_stack(drill: dict[str, Any]) -> None:
    """Before the fault: our proxy speaks NixlConnector's protocol to real engines (the
    drill's own `up`, verdict and all)."""
    record = json.loads((ROOT / "runs" / RUN_ID / "up" / "run.json").read_text())
    rows = {row["check"]: row for row in record["results"]["smoke"]["rows"]}
    assert all(row["passed"] is not False for row in rows.values()), rows
    stamped = rows["router stamps prefill/decode pair"]["observed"]
    assert stamped in {f"X-Xpyd-Prefill: prefill-0, X-Xpyd-Decode: decode-{i}" for i in (0, 1)}
    assert int(rows["prompt tokens from prefill (decode: external_kv_transfer)"]["observed"]) > 256
    assert rows["prompt tokens computed on decode (local_compute)"]["observed"] == "0"


def test_the_kill_happened_and_docker_brought_the_decoder_back(drill: dict[str, Any]) -> None:
    assert "sent SIGKILL" in drill["injected"]
    assert drill["summary"]["restarts"] >= 1
    assert "decode-0 was killed by SIGKILL" in drill["last_exit"]
    assert drill["summary"]["recovered_after_s"] is not None


def test_only_requests_whose_answer_had_started_failed(drill: dict[str, Any]) -> None:
    summary = drill["summary"]
    assert summary["succeeded"] > 0
    # The rest went through decode-1: migrated, or never sent to the dead decoder.
    assert summary["failed_before_answer_started"] == 0, drill["outcomes"]
    # From when the kill was delivered: under load its `docker exec` took 9.5 s once (CI).
    landed = drill["landed_at_s"]
    assert landed >= FAULT_AT_S
    after_fault = [o for o in drill["outcomes"] if o["start_s"] > landed + 5]
    assert after_fault
    assert all(o["ok"] for o in after_fault)


def test_no_request_waited_past_its_deadline(drill: dict[str, Any]) -> None:
    assert drill["summary"]["longest_request_s"] < DEADLINE_S
    assert not [o for o in drill["outcomes"] if o["error"] == "deadline"]


def test_the_proxy_ejected_the_decoder_within_its_bound(drill: dict[str, Any]) -> None:
    # cpu-faults: checks every 1 s, 1 s timeout, 2 failures in a row: at most ~4 s, plus one
    # look of the drill's own (every 1 s).
    ejected = drill["summary"]["ejected_after_s"]
    assert ejected is not None
    assert ejected < 8


def test_the_verdict_passes_again_after_the_fault(
    drill: dict[str, Any],
) -> None:
    # As the load ended decode-0 was still restarting: the verdict then left it out and
    # judged the stack as it served, through decode-1.
    # When it ran is the drill's figure, not a check; a decoder back while it ran voids it
    # (the router may send it a request the verdict, without it, cannot judge).
    if drill["verdict_during"] is not None and not drill["verdict_during_void"]:
        assert drill["verdict_during"] is True
    assert drill["verdict_after"] is True
    report = (ROOT / "runs" / RUN_ID / "fault.md").read_text()
    assert "| verdict after the fault | PASS" in report
    assert (ROOT / "runs" / RUN_ID / "fault.png").stat().st_size > 1000


def test_status_shows_the_restart_and_its_reason(drill: dict[str, Any]) -> None:
    status = cli("status", STACK)
    assert status.returncode == 0, status.stderr
    row = next(line for line in status.stdout.splitlines() if "decode-0" in line)
    assert "killed by SIGKILL" in row
