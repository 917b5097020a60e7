"""The verdict a Kubernetes Job runs (generator/probes/in_cluster.py): what the export gives it
(the plan and the port -> name book, from its ConfigMap) reads back as the same plan and
names every engine and the router; bad or oversized files are refused naming the field; a
request for a loopback port goes to that port's owner by name; a stack that never answers
ends in exit status 2 naming the service. The verdict itself against a real stack:
tests/integration/test_cpu_stack.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from generator.errors import StackError
from generator.probes.http import NetworkNames
from generator.probes.in_cluster import EXIT_NOT_READY, load_addresses, load_plan, main
from generator.probes.readiness import engine_checks
from tests.render.test_kubernetes import cluster_objects, exported
from tests.render.test_shipped_stacks import SHIPPED

Obj = dict[str, Any]


def _verdict_files(stack: str, folder: Path) -> tuple[Path, Path]:
    _, rendered = exported(stack)
    (config,) = [
        o for o in cluster_objects(rendered)
        if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "verdict-plan"
    ]  # fmt: skip
    plan, addresses = folder / "plan.json", folder / "addresses.json"
    plan.write_text(config["data"]["plan.json"], encoding="utf-8")
    addresses.write_text(config["data"]["addresses.json"], encoding="utf-8")
    return plan, addresses


@pytest.mark.parametrize("stack", ["cpu-1p1d", "xpyd-mp-2host", "cpu-lmcache-pd"])
def test_the_exported_plan_and_names_read_back(stack: str, tmp_path: Path) -> None:
    plan_file, addresses_file = _verdict_files(stack, tmp_path)
    plan, _ = exported(stack)
    assert load_plan(plan_file) == plan
    names = load_addresses(addresses_file)
    for engine in plan.engines:
        assert names.get(engine.http_port) in (None, engine.name)  # never another's
    assert names[plan.router.port] == plan.router.service


def test_the_job_mounts_what_it_reads_and_runs_in_the_routers_image() -> None:
    _, rendered = exported("cpu-1p1d")
    objects = cluster_objects(rendered)
    (job,) = [o for o in objects if o["kind"] == "Job"]
    (router,) = [
        o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "router"
    ]
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == router["spec"]["template"]["spec"]["containers"][0]["image"]
    assert container["command"][:3] == ["python3", "-m", "generator.probes.in_cluster"]
    mount = container["volumeMounts"][0]["mountPath"]
    assert f"{mount}/plan.json" in container["command"]
    assert f"{mount}/addresses.json" in container["command"]
    assert pod["restartPolicy"] == "Never"
    assert job["spec"]["backoffLimit"] == 0


def test_a_bad_plan_is_refused_naming_the_field(tmp_path: Path) -> None:
    plan_file, _ = _verdict_files("cpu-1p1d", tmp_path)
    data = json.loads(plan_file.read_text())
    data["router"]["port"] = "not a port"
    plan_file.write_text(json.dumps(data))
    with pytest.raises(
        StackError, match=r"--plan .*: router\.[a-z-]+\.port: Input should be a valid integer"
    ):
        load_plan(plan_file)
    plan_file.write_text(" " * ((1 << 20) + 1))
    with pytest.raises(StackError, match="over 1048576 bytes"):
        load_plan(plan_file)
    with pytest.raises(StackError, match="No such file"):
        load_plan(tmp_path / "missing.json")


@pytest.mark.parametrize(
    ("book", "says"),
    [
        ({"0": "router"}, r"0\.\[key\]: Input should be greater"),
        ({"80": "Not_A_Name"}, "80: String"),
    ],
)
def test_a_bad_address_book_is_refused_naming_the_entry(
    tmp_path: Path, book: dict[str, str], says: str
) -> None:
    path = tmp_path / "addresses.json"
    path.write_text(json.dumps(book))
    with pytest.raises(StackError, match=says):
        load_addresses(path)


def test_a_loopback_port_goes_to_its_owner_by_name() -> None:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, text="ok")

    transport = NetworkNames({8100: "prefill-0"}, inner=httpx.MockTransport(answer))
    with httpx.Client(transport=transport) as client:
        client.get("http://127.0.0.1:8100/metrics")
        client.get("http://127.0.0.1:9999/health")  # nobody's: left as it is
        client.get("http://router:8100/health")  # already a name
    assert [str(r.url) for r in seen] == [
        "http://prefill-0:8100/metrics",
        "http://127.0.0.1:9999/health",
        "http://router:8100/health",
    ]
    assert seen[0].headers["host"] == "prefill-0:8100"


def test_a_stack_that_never_answers_ends_not_ready(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan_file, addresses_file = _verdict_files("cpu-1p1d", tmp_path)

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    status = main(
        ["--plan", str(plan_file), "--addresses", str(addresses_file), "--ready-within-s", "1"],
        transport=httpx.MockTransport(refuse),
    )
    assert status == EXIT_NOT_READY
    assert "was not ready after" in capsys.readouterr().out


@pytest.mark.parametrize("stack", SHIPPED)
def test_the_verdict_reaches_engines_by_name_and_the_router_through_the_book(
    stack: str, tmp_path: Path
) -> None:
    """Engine pods may share a port number (vllm-router's pod discovery: one port in every
    pod), which a port -> name book cannot tell apart: the probes dial each engine by its
    Service's name. The router's port is in the book; a port of an engine's that the book names
    is that engine's (a port two hosts share, a multi-host stack's side channels, is left out)."""
    plan, _ = exported(stack)
    names = load_addresses(_verdict_files(stack, tmp_path)[1])
    assert names[plan.router.port] == plan.router.service
    for engine in plan.engines:
        assert {urlsplit(check.url).hostname for check in engine_checks(plan, engine)} == {
            engine.name
        }
        telemetry = getattr(engine.kv, "nixl_telemetry_port", None)
        for port in (engine.http_port, telemetry):
            assert port is None or names.get(port) in (None, engine.name)
    if plan.router.discovers_pods():
        assert plan.engines[0].http_port not in names  # every engine's: nobody's in the book
