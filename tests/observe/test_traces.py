"""OTLP traces: the engines send their spans to the collector on the first host, at an
address they reach from their own hosts; off, no engine command changes."""

from __future__ import annotations

import pytest

from generator.observe.traces import collector_config
from generator.paths import Workspace
from generator.plan.traces import traces_endpoint
from generator.services.commands import engine_command
from generator.services.model import ImageRef
from generator.services.parts import engine_service
from tests.observe.helpers import observed_plan

_IMAGE = ImageRef("xpyd/decode:test", "never", None)


def _flag(command: list[str]) -> str | None:
    flag = "--otlp-traces-endpoint"
    return command[command.index(flag) + 1] if flag in command else None


@pytest.mark.parametrize(
    ("stack", "endpoint", "bind"),
    [
        ("xpyd", "grpc://127.0.0.1:4417", "127.0.0.1"),
        ("xpyd-mp-2host", "grpc://10.0.0.11:4417", "0.0.0.0"),
    ],
)
def test_every_engine_sends_its_traces_where_the_collector_listens(
    workspace: Workspace, stack: str, endpoint: str, bind: str
) -> None:
    plan = observed_plan(workspace, stack, "observe.traces=true")
    assert traces_endpoint(plan) == endpoint
    for engine in plan.engines:
        assert _flag(engine_command(plan, engine)) == endpoint
        service = engine_service(plan, engine, _IMAGE, None, ())
        assert service.env["OTEL_EXPORTER_OTLP_TRACES_INSECURE"] == "true"
    config = collector_config(plan, 4417)
    assert config["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"] == f"{bind}:4417"
    assert config["service"]["pipelines"]["traces"]["receivers"] == ["otlp"]


def test_without_traces_no_engine_gets_the_flag(workspace: Workspace) -> None:
    plan = observed_plan(workspace, "xpyd")
    assert traces_endpoint(plan) is None
    assert all(_flag(engine_command(plan, engine)) is None for engine in plan.engines)
