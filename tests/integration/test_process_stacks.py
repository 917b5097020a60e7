"""The process runtime for real: cpu-1p1d and cpu-lmcache-pd up as local processes (real vLLM
CPU, LMCache servers, NIXL, vllm-router and our proxy, no Docker involved), verdict PASS;
status, logs and down from other shells; a killed engine restarted by its supervisor (a fault
drill) and serving again; a service that dies failing `up` fast with its log;
Ctrl+C; and nothing left running after any of them.

The stacks are rendered into a checkout copy (an `up --runtime process` renders the stack for
host networking, which would change the committed compose files). The copy has no Pythons:
its first `up` makes them (what `python -m generator env` does), later ones find them. They
run on ports of their own (APART_PORTS), beside the compose stacks of the other live group.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from generator.stack import load_spec
from generator.topologies import TOPOLOGIES
from tests.integration.conftest import (
    BROKEN_LMCACHE,
    BROKEN_LMCACHE_FLAG,
    PROCESS_COPY,
    ROOT,
    cli,
    interrupt_cli,
    lmcache_server_failed_the_wait,
    planned_ports,
    set_flags,
    workspace_copy,
)

pytestmark = pytest.mark.stack
RUN = f"proc-{int(time.time())}"
# cpu-1p1d runs observed and traced: Prometheus as one more process, from PATH (Debian's
# package in CI), and our OTLP receiver, which the engines and LMCache servers send spans to.
OBSERVING = ["observe.enabled=true", "observe.traces=true"]
# Every host port moved off the stacks' defaults: these stacks run on this machine's network
# while the other live group's compose stacks hold the defaults (tests/conftest.py,
# live_group); tests/test_live_groups.py checks that no planned port is shared.
APART_PORTS = {
    "router.port": 22000,
    "ports.prefill_http": 22100,
    "ports.decode_http": 22200,
    "ports.decode_pd_init": 22300,
    "ports.decode_pd_alloc": 22400,
    "ports.proxy_notify": 22500,
    "ports.nixl_telemetry": 22600,
    "ports.nixl_side_channel": 22700,
    "ports.lmcache_zmq": 22800,
    "ports.lmcache_http": 23000,
    "ports.lmcache_metrics": 23100,
    "ports.lmcache_coordinator": 23200,
    "ports.lmcache_p2p": 23300,
    "ports.router_metrics": 23400,
    "ports.prometheus": 23500,
    "ports.grafana": 23600,
    "ports.otel_collector": 23700,
    "ports.otlp_receiver_http": 23800,
}


OBSERVED = set_flags(OBSERVING)


@pytest.fixture(scope="module")
def copy(scratch_root: Path) -> Path:
    return workspace_copy(scratch_root / PROCESS_COPY)


def apart(stack: str) -> list[str]:
    """APART_PORTS as the stack's assignments: less the bases only another topology reads
    (the spec refuses a base its topology never uses)."""
    kind = load_spec(ROOT / "stacks" / f"{stack}.yaml").topology
    others = [unit for unit in TOPOLOGIES.values() if unit.kind is not kind]
    foreign = {f"ports.{name}" for unit in others for name in unit.port_fields}
    return [f"{key}={port}" for key, port in APART_PORTS.items() if key not in foreign]


def on_processes(stack: str) -> list[str]:
    """The process runtime with its default Pythons (the copy's .cache/env/, both cpu stacks
    share them), on the ports of its own: the first `up` makes them, the lmcache-pd one adds
    its CPU connector."""
    return ["--runtime", "process", *set_flags(apart(stack))]


def process_ports(root: Path, stack: str, *assignments: str) -> set[int]:
    """Every host port the stack's plan takes under the process runtime, on the ports above."""
    return planned_ports(root, stack, ["runtime=process", *apart(stack), *assignments])


def processes_of(copy: Path, project: str) -> list[psutil.Process]:
    """Every process whose working directory is the copy and that runs from its state folder's
    project: what the stack started (their cwd is the workspace root)."""
    found = []
    for process in psutil.process_iter(["cwd", "environ"]):
        try:
            if process.info["cwd"] == str(copy) and (process.info["environ"] or {}).get(
                "XPYD_EXIT_FILE", ""
            ).startswith(str(copy / ".cache/process" / project)):
                found.append(process)
        except (psutil.Error, TypeError):
            continue
    return found


def port_free(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


@pytest.fixture(scope="module")
def nixl_mp_up(copy: Path) -> Iterator[dict[str, object]]:
    if shutil.which("prometheus") is None:
        pytest.skip("no prometheus on PATH: apt-get install prometheus (.ci/setup --tests does)")
    run_id = f"{RUN}-1p1d"
    result = cli(
        "up", "cpu-1p1d", *on_processes("cpu-1p1d"), *OBSERVED, "--run-id", run_id, root=copy
    )
    yield {"result": result, "run_id": run_id}
    cli("down", "cpu-1p1d", root=copy)


def test_cpu_1p1d_passes_its_verdict_as_processes(
    copy: Path, nixl_mp_up: dict[str, object]
) -> None:
    result = nixl_mp_up["result"]
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-4000:]  # type: ignore[attr-defined]
    record = json.loads((copy / "runs" / str(nixl_mp_up["run_id"]) / "run.json").read_text())
    tasks = record["tasks"]
    assert tasks["prepare-env"]["state"] == "success"
    assert "made engine-cpu and router" in tasks["prepare-env"]["summary"]  # none were there
    assert "build-engines" not in tasks  # nothing is built or shipped
    verdict = {row["check"]: row for row in record["results"]["smoke"]["rows"]}
    kv = verdict["prompt tokens from prefill (decode: external_kv_transfer)"]
    assert kv["passed"] is True
    assert int(kv["observed"]) > 0
    assert verdict["prompt tokens computed on decode (local_compute)"]["observed"] == "0"
    assert (copy / "compose/cpu-1p1d/processes.yaml").is_file()
    logs = copy / "runs" / str(nixl_mp_up["run_id"]) / "logs"
    assert {"prefill-0.log", "decode-0.log", "router.log"} <= {p.name for p in logs.iterdir()}
    assert "Application startup complete" in (logs / "decode-0.log").read_text()


def test_status_and_logs_from_another_shell(copy: Path, nixl_mp_up: dict[str, object]) -> None:
    status = cli("status", "cpu-1p1d", root=copy)
    assert status.returncode == 0, status.stderr
    for service in ("lmcache-prefill-0", "prefill-0", "decode-0", "router"):
        assert service in status.stdout
    assert "running" in status.stdout
    logs = cli("logs", "cpu-1p1d", "decode-0", "--tail", "5", root=copy)
    assert logs.returncode == 0
    assert len(logs.stdout.splitlines()) == 5


def test_observe_reads_the_process_stacks_prometheus_and_spans(
    copy: Path, nixl_mp_up: dict[str, object]
) -> None:
    """Every part scraped, every rule loaded from the rules file beside the config (a rule
    file Prometheus could not find would load no rule and say nothing). Traced, the LMCache
    servers push their metrics to the receiver, where Prometheus reads them under each
    server's engine (the LMCache panels answer with data), and spans came from every engine
    and LMCache server (LMCache's MP docs' --enable-tracing --otlp-endpoint)."""
    report = _observed_once_lmcache_pushed(copy)
    assert report["targets"] == {
        "vllm prefill-0": "up", "vllm decode-0": "up", "vllm-router router": "up",
        "lmcache otlp-receiver": "up",
    }  # fmt: skip
    assert report["rules"]["XpydDecoderRecomputesPrompts"] == "ok"
    assert set(report["rules"].values()) == {"ok"}
    lmcache = [q for q in report["queries"] if q["source"].startswith("panel LMCache servers")]
    assert lmcache
    assert {q["answer"] for q in lmcache} == {"data"}
    # Each series keeps its server's engine label (the receiver's one target serves both).
    assert _lmcache_engines_in_prometheus() == {"prefill-0", "decode-0"}
    senders = ("prefill-0", "decode-0", "lmcache-prefill-0", "lmcache-decode-0")
    assert set(report["spans"]) == set(senders)
    assert all(report["spans"][sender] > 0 for sender in senders), report["spans"]
    assert (copy / ".cache/process/xpyd-cpu-1p1d/prometheus-data").is_dir()


def _observed_once_lmcache_pushed(copy: Path) -> dict[str, Any]:
    """`observe`'s report once the LMCache servers' pushes reached Prometheus: they push every
    10 s, and Prometheus scrapes the receiver every 5 s, so up to ~15 s after `up`."""
    observed = [*set_flags(["runtime=process", *apart("cpu-1p1d")]), *OBSERVED, "--json"]
    deadline = time.monotonic() + 90
    while True:
        result = cli("observe", "cpu-1p1d", *observed, root=copy)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
        report: dict[str, Any] = json.loads(result.stdout)
        lmcache = [q for q in report["queries"] if q["source"].startswith("panel LMCache")]
        # A panel answers with data once one server pushed; both must have (a loaded CI
        # machine once ended the wait with only decode-0's push in).
        pushed = all(q["answer"] == "data" for q in lmcache)
        if (pushed and len(_lmcache_engines_in_prometheus()) == 2) or time.monotonic() > deadline:
            return report
        time.sleep(5)


def _lmcache_engines_in_prometheus() -> set[str]:
    """The engines whose LMCache server's pushed metrics Prometheus holds."""
    prometheus = APART_PORTS["ports.prometheus"]
    query = f"http://127.0.0.1:{prometheus}/api/v1/query?query=lmcache_mp_l1_memory_usage_bytes"
    with urllib.request.urlopen(query, timeout=10) as answer:
        series = json.load(answer)["data"]["result"]
    return {s["metric"]["engine"] for s in series}


def test_a_killed_engine_is_restarted_by_its_supervisor_and_serves_again(
    copy: Path, nixl_mp_up: dict[str, object]
) -> None:
    """`bench --fault` on processes: no runtime policy here, the supervisor is the policy."""
    run_id = f"{RUN}-kill"
    fault = ["--fault", "kill:decode-0@5", "--fault-duration-s", "20"]
    result = cli(
        "bench",
        "cpu-1p1d",
        *on_processes("cpu-1p1d"),
        *OBSERVED,
        *fault,
        "--run-id",
        run_id,
        root=copy,
    )
    report = copy / "runs" / run_id / "fault.md"
    said = report.read_text() if report.exists() else result.stdout[-3000:]
    assert result.returncode == 0, said + result.stderr[-3000:]
    record = json.loads((copy / "runs" / run_id / "fault.json").read_text())
    assert "sent SIGKILL to decode-0" in record["injected"]
    assert record["last_exit"] == "decode-0 was killed by SIGKILL"
    summary = record["summary"]
    assert summary["restarts"] == 1, said
    assert summary["recovered_after_s"] is not None, said
    assert summary["longest_request_s"] < record["load"]["deadline_s"], said
    assert record["verdict_after"] is True, said
    rows = {row["check"]: row for row in record["verdict_after_rows"]}
    assert int(rows["prompt tokens from prefill (decode: external_kv_transfer)"]["observed"]) > 0


def test_down_leaves_nothing_running(copy: Path, nixl_mp_up: dict[str, object]) -> None:
    assert processes_of(copy, "xpyd-cpu-1p1d")  # the engines, their workers, servers, router
    down = cli("down", "cpu-1p1d", root=copy)
    assert down.returncode == 0, down.stderr
    assert processes_of(copy, "xpyd-cpu-1p1d") == []
    taken = process_ports(copy, "cpu-1p1d", *OBSERVING)
    assert len(taken) >= 8  # engines, LMCache servers, router, Prometheus, OTLP receiver
    assert [port for port in sorted(taken) if not port_free(port)] == []
    # Prometheus's series end with the stack, as a container's anonymous volume does.
    assert not (copy / ".cache/process/xpyd-cpu-1p1d/prometheus-data").exists()
    status = cli("status", "cpu-1p1d", root=copy)
    assert "running" not in status.stdout


def test_cpu_lmcache_pd_passes_its_verdict_as_processes(copy: Path) -> None:
    run_id = f"{RUN}-lmcache-pd"
    try:
        result = cli(
            "up", "cpu-lmcache-pd", *on_processes("cpu-lmcache-pd"), "--run-id", run_id, root=copy
        )
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-4000:]
        record = json.loads((copy / "runs" / run_id / "run.json").read_text())
        verdict = {row["check"]: row for row in record["results"]["smoke"]["rows"]}
        assert all(row["passed"] is not False for row in verdict.values()), verdict
    finally:
        cli("down", "cpu-lmcache-pd", root=copy)
    assert processes_of(copy, "xpyd-cpu-lmcache-pd") == []


def test_a_service_that_dies_fails_up_fast_with_its_log(copy: Path) -> None:
    """An LMCache server that refuses its flags dies in seconds (an engine only after vLLM's
    imports, a minute on 2 busy cores): the wait ends at its first restart, with its log."""
    started = time.monotonic()
    broken = ["--set", BROKEN_LMCACHE]
    result = cli(
        "up",
        "cpu-1p1d",
        *on_processes("cpu-1p1d"),
        *broken,
        "--teardown-on-failure",
        "--run-id",
        f"{RUN}-dies",
        root=copy,
    )
    elapsed = time.monotonic() - started
    assert result.returncode == 1
    # Its first restart ends the wait: not the 300 s health deadline, nor the 5 restarts.
    assert lmcache_server_failed_the_wait(result.stderr), result.stderr[-3000:]
    print(f"up failed after {elapsed:.0f} s", file=sys.stderr)
    assert processes_of(copy, "xpyd-cpu-1p1d") == []  # torn down on failure, engines too


def test_bench_down_removes_an_arm_that_never_came_up(copy: Path) -> None:
    """bench --down (and every baseline) removes what it started even when the arm failed
    before a verdict: a kept stack would go on holding the GPUs (or cores) it shares."""
    # An LMCache server that refuses its flags: it dies in seconds (an engine only after
    # vLLM's imports, a minute here), and what bench removes is the same.
    broken = ["--set", BROKEN_LMCACHE, "--down"]
    flags = [*on_processes("cpu-1p1d"), *broken, "--num-prompts", "1", "--run-id", f"{RUN}-b"]
    result = cli("bench", "cpu-1p1d", *flags, root=copy)
    assert result.returncode == 1, result.stdout[-2000:]
    assert "exited with 2) while we waited for it" in result.stderr  # its first restart
    assert BROKEN_LMCACHE_FLAG in result.stderr  # LMCache's own complaint, from its log
    assert "did not come up, removing it" in result.stdout + result.stderr
    assert processes_of(copy, "xpyd-cpu-1p1d") == []  # the other LMCache server too


def test_ctrl_c_stops_every_process(copy: Path) -> None:
    env = {**os.environ, "XPYD_ROOT": str(copy), "NO_COLOR": "1", "CI": "1"}
    flags = [*on_processes("cpu-1p1d"), "--run-id", f"{RUN}-int"]
    code, output = interrupt_cli(
        "up", "cpu-1p1d", *flags, after_line="wait-prefill-0: started", env=env, cwd=copy
    )
    assert code == 130, output[-3000:]
    assert "interrupted" in output
    assert processes_of(copy, "xpyd-cpu-1p1d") == []
