"""observe.traces where the OpenTelemetry Collector's image cannot come (the cpu profile, the
process runtime): our OTLP receiver runs from the engine image (or the engine Python), the
engines and the LMCache servers send to it (LMCache's MP docs' `--enable-tracing
--otlp-endpoint`), and Prometheus reads the LMCache metrics the servers then push from the
receiver's page, each series keeping its own engine label. GPU hosts under compose keep the
Collector, and their LMCache servers untraced (its config has no metrics pipeline)."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

import yaml

from generator.observe.files import PROMETHEUS_FILE
from generator.paths import Workspace
from generator.planner import make_plan
from generator.render import render_stack
from generator.stack import load_spec
from tests.observe.helpers import OBSERVED

TRACED = (*OBSERVED, "observe.traces=true")
_RECEIVER = "/opt/xpyd/otlp_receiver.py"


def _rendered(workspace: Workspace, stack: str, *overrides: str) -> dict[PurePosixPath, str]:
    spec = load_spec(workspace.stack_file(stack), overrides)
    return render_stack(make_plan(spec), workspace).files


def _yaml(files: dict[PurePosixPath, str], path: str) -> Any:
    return yaml.safe_load(files[PurePosixPath(path)])


def _after(command: list[str], flag: str) -> str | None:
    return command[command.index(flag) + 1] if flag in command else None


def test_a_cpu_stack_traces_to_our_receiver_from_the_engine_image(workspace: Workspace) -> None:
    files = _rendered(workspace, "cpu-1p1d", *TRACED)
    services = _yaml(files, "compose/cpu-1p1d/compose.yaml")["services"]
    receiver = services["otlp-receiver"]
    assert receiver["image"] == services["prefill-0"]["image"]
    assert receiver["command"] == [
        "python3", _RECEIVER, "--grpc", "0.0.0.0:4417", "--http", "0.0.0.0:4418",
    ]  # fmt: skip
    assert receiver["ports"] == ["127.0.0.1:4418:4418"]  # only its HTTP, for `observe`
    for engine in ("prefill-0", "decode-0"):
        command = services[engine]["command"]
        assert _after(command, "--otlp-traces-endpoint") == "grpc://otlp-receiver:4417"
        assert services[engine]["environment"]["OTEL_SERVICE_NAME"] == engine
        server = services[f"lmcache-{engine}"]
        assert "--enable-tracing" in server["command"]
        assert _after(server["command"], "--otlp-endpoint") == "http://otlp-receiver:4417"
        assert server["environment"]["OTEL_SERVICE_NAME"] == f"lmcache-{engine}"
    dockerfiles = [text for path, text in files.items() if path.suffix == ".Dockerfile"]
    assert any(f'"{_RECEIVER}"' in text and "otlp_receiver.py" in text for text in dockerfiles)


def test_prometheus_reads_traced_lmcache_servers_from_the_receiver(workspace: Workspace) -> None:
    files = _rendered(workspace, "cpu-1p1d", *TRACED)
    jobs = {
        job["job_name"]: job
        for job in _yaml(files, f"compose/cpu-1p1d/{PROMETHEUS_FILE}")["scrape_configs"]
    }
    lmcache = jobs["lmcache"]
    assert lmcache["honor_labels"] is True  # each series keeps its server's engine label
    assert [c["targets"] for c in lmcache["static_configs"]] == [["otlp-receiver:4418"]]
    assert all("honor_labels" not in job for name, job in jobs.items() if name != "lmcache")


def test_a_process_stack_runs_the_receiver_from_the_checkout(workspace: Workspace) -> None:
    files = _rendered(workspace, "cpu-1p1d", "runtime=process", *TRACED)
    receiver = _yaml(files, "compose/cpu-1p1d/processes.yaml")["services"]["otlp-receiver"]
    assert receiver["command"][:2] == ["python3", "generator/observe/otlp_receiver.py"]
    assert receiver["command"][2:] == ["--grpc", "127.0.0.1:4417", "--http", "127.0.0.1:4418"]
    assert (workspace.root / receiver["command"][1]).is_file()


def test_gpu_hosts_under_compose_keep_the_collector_and_lmcache_untraced(
    workspace: Workspace,
) -> None:
    files = _rendered(workspace, "xpyd-mp", *TRACED)
    services = _yaml(files, "compose/xpyd-mp/compose.yaml")["services"]
    assert "otel-collector" in services
    assert "otlp-receiver" not in services
    servers = [s for name, s in services.items() if name.startswith("lmcache-")]
    assert servers
    assert all("--enable-tracing" not in server["command"] for server in servers)
    jobs = _yaml(files, f"compose/xpyd-mp/{PROMETHEUS_FILE}")["scrape_configs"]
    lmcache = next(job for job in jobs if job["job_name"] == "lmcache")
    assert len(lmcache["static_configs"]) == len(servers)  # each server's own page
