"""The observe section: off by default, refusals that name the field and the fix, ports
planned like every other port and after all of them."""

from __future__ import annotations

from typing import Any

import pytest

from generator.errors import SpecError
from generator.plan.observe import (
    GRAFANA_SERVICE,
    OTEL_SERVICE,
    PROMETHEUS_SERVICE,
    RECEIVER_SERVICE,
)
from generator.planner import make_plan
from generator.spec import ObserveSpec
from generator.stack import parse_spec
from tests.conftest import spec_dict

CPU: dict[str, Any] = {"profile": "cpu", "hosts": [{"name": "h", "cpus": [0, 1]}]}


def refusal(data: dict[str, Any], *overrides: str) -> str:
    with pytest.raises(SpecError) as caught:
        parse_spec(data, source="t.yaml", overrides=overrides)
    return str(caught.value)


def test_observe_is_off_by_default_and_plans_nothing() -> None:
    spec = parse_spec(spec_dict(), source="t.yaml")
    assert spec.observe == ObserveSpec()
    assert not spec.observe.enabled
    plan = make_plan(spec)
    assert plan.observe is None
    assert "observe" not in plan.model_dump(mode="json")
    assert not {PROMETHEUS_SERVICE, GRAFANA_SERVICE} & set(plan.hosts[0].services)


def test_grafana_is_refused_on_cpu_with_the_reason_and_the_fix() -> None:
    text = refusal(spec_dict(**CPU), "observe.enabled=true", "observe.grafana=true")
    assert "observe.grafana: Grafana cannot be installed on the cpu profile" in text
    assert "container registry" in text
    assert "fix: set observe.grafana: false" in text


def test_settings_without_observe_enabled_are_refused() -> None:
    text = refusal(spec_dict(), "observe.traces=true")
    assert "observe.traces: is read only when observe.enabled is true" in text


@pytest.mark.parametrize("runtime", ["process", "slurm"])
def test_processes_are_observed_without_grafana(runtime: str) -> None:
    """Grafana comes as an image: off by default where no container runs, even on GPU hosts,
    and refused when asked for."""
    spec = parse_spec(spec_dict(runtime=runtime), source="t", overrides=("observe.enabled=true",))
    observe = make_plan(spec).observe
    assert observe is not None
    assert observe.services == (PROMETHEUS_SERVICE,)
    text = refusal(spec_dict(runtime=runtime), "observe.enabled=true", "observe.grafana=true")
    assert (
        f"observe.grafana: the {runtime} runtime runs Prometheus (from PATH) and no Grafana" in text
    )
    assert "fix: set observe.grafana: false" in text


@pytest.mark.parametrize(
    ("assignment", "expected"),
    [
        ("observe.scrape_interval_s=0", "observe.scrape_interval_s"),
        ("observe.kv_floor_gib_s=-1", "observe.kv_floor_gib_s"),
        ("observe.publish=3", "observe.publish"),
        ("observe.grafna=true", "observe.grafna"),
    ],
)
def test_bad_values_name_their_field(assignment: str, expected: str) -> None:
    assert expected in refusal(spec_dict(), "observe.enabled=true", assignment)


def test_gpu_defaults_grafana_on_and_cpu_off_and_ports_come_last() -> None:
    gpu = make_plan(parse_spec(spec_dict(), source="t", overrides=("observe.enabled=true",)))
    assert gpu.observe is not None
    assert gpu.observe.grafana_port is not None
    assert gpu.observe.otel_port is None
    cpu = make_plan(parse_spec(spec_dict(**CPU), source="t", overrides=("observe.enabled=true",)))
    assert cpu.observe is not None
    assert cpu.observe.grafana_port is None
    plain = make_plan(parse_spec(spec_dict(**CPU), source="t"))
    # Observe's ports are claimed after the others: every other port stays where it was.
    assert set(plain.ports) <= set(cpu.ports)
    extra = [use for use in cpu.ports if use not in plain.ports]
    assert [(use.owner, use.port) for use in extra] == [(PROMETHEUS_SERVICE, 9490)]
    assert cpu.hosts[0].services == (*plain.hosts[0].services, PROMETHEUS_SERVICE)


def test_traces_and_ports_follow_the_bases_and_skip_taken_ports() -> None:
    overrides = (
        "observe.enabled=true",
        "observe.traces=true",
        "ports.grafana=7100",  # the first prefiller's http port: the next free one is taken
        "ports.otel_collector=4500",
    )
    plan = make_plan(parse_spec(spec_dict(), source="t", overrides=overrides))
    assert plan.observe is not None
    assert plan.observe.grafana_port not in {e.http_port for e in plan.engines}
    assert plan.observe.otel_port == 4500
    assert plan.observe.services == (PROMETHEUS_SERVICE, GRAFANA_SERVICE, OTEL_SERVICE)
    owners = {use.port: use.owner for use in plan.ports}
    assert owners[plan.observe.prometheus_port] == PROMETHEUS_SERVICE


@pytest.mark.parametrize(
    ("data", "receiver"),
    [
        (spec_dict(), OTEL_SERVICE),  # GPU hosts under compose: the Collector's image
        (spec_dict(**CPU), RECEIVER_SERVICE),  # no registry on cpu: ours, from the engine image
        (spec_dict(runtime="process"), RECEIVER_SERVICE),  # no image at all: ours, a process
    ],
)
def test_traces_go_to_the_collector_where_its_image_comes_else_to_ours(
    data: dict[str, Any], receiver: str
) -> None:
    overrides = ("observe.enabled=true", "observe.traces=true", "observe.grafana=false")
    observe = make_plan(parse_spec(data, source="t", overrides=overrides)).observe
    assert observe is not None
    assert observe.services == (PROMETHEUS_SERVICE, receiver)
    assert observe.otel_port == 4417
    # Ours also serves /spans and the metrics traced LMCache servers push, on a port of its own.
    assert (observe.receiver_http_port == 4418) is (receiver == RECEIVER_SERVICE)
