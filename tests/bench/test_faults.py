"""`bench --fault`: the fault's grammar and the services it may hit, and what a drill's
figures say about a run (outcomes and looks written by hand, labelled so; the drill itself runs
for real in tests/integration/test_faults.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from generator.bench.drill import (
    DrillResult,
    Sample,
    combined_sample,
    fault_wall_time,
    followers_back_of,
)
from generator.bench.engine_settings import engine_settings
from generator.bench.fault_load import LoadSettings, Outcome
from generator.bench.fault_report import per_second, write_fault_report
from generator.bench.faults import Fault, FaultAction, FaultError, parse_fault
from generator.plan import Plan
from generator.planner import make_plan
from generator.routers import router_of
from generator.runtimes.base import ServiceState
from generator.runtimes.kinds import runtime_kind
from generator.stack import load_spec
from tests.conftest import ROOT


@pytest.fixture(scope="module")
def plan() -> Plan:
    return make_plan(load_spec(ROOT / "stacks" / "cpu-faults.yaml"))


@pytest.mark.parametrize(
    ("text", "fault"),
    [
        ("kill:decode-0@10", Fault(FaultAction.KILL, "decode-0", 10.0)),
        ("term:lmcache-decode-1@2.5", Fault(FaultAction.TERM, "lmcache-decode-1", 2.5)),
        ("stop:prefill-0@10+15", Fault(FaultAction.STOP, "prefill-0", 10.0, 15.0)),
        ("hang:decode-1@10+40", Fault(FaultAction.HANG, "decode-1", 10.0, 40.0)),
        ("kill:router@0", Fault(FaultAction.KILL, "router", 0.0)),
    ],
)
def test_faults_parse(plan: Plan, text: str, fault: Fault) -> None:
    assert parse_fault(text, plan) == fault
    assert parse_fault(fault.label, plan) == fault  # the label reads back


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("kill decode-0", "is not ACTION:TARGET@T[+D]"),
        ("crash:decode-0@1", "'crash' is not an action"),
        ("kill:decode-7@1", "has no service 'decode-7'"),
        ("kill:decode-0@1+5", "only stop, hang and cut last"),
        ("stop:decode-0@1", "stop needs how long"),
        ("hang:decode-0@1", "hang needs how long"),
        ("hang:lmcache-decode-0@1+5", "lmcache-decode-0 is no engine: hang stops the engine core"),
        ("hang:router@1+5", "router is no engine"),
        ("cut:host-a@1+5", "runs on one host: a link cut needs two"),
        ("kill:decode-0@99999", "too late"),
        ("stop:decode-0@5+0", "stop for 0 s is over before the drill can see it"),
        ("hang:decode-0@5+0.5", "hang for 0.5 s is over before the drill can see it"),
        ("stop:router@5+1.999", "stop for 1.999 s is over before"),
    ],
)
def test_bad_faults_say_what_is_wrong(plan: Plan, text: str, says: str) -> None:
    with pytest.raises(FaultError, match="--fault") as caught:
        parse_fault(text, plan)
    assert says in caught.value.message
    assert caught.value.hint


def test_a_stack_that_restarts_nothing_takes_no_signal_fault(plan: Plan) -> None:
    still = plan.model_copy(
        update={"recovery": plan.recovery.model_copy(update={"max_restarts": 0})}
    )
    for text in ("kill:decode-0@10", "stop:decode-0@10+5"):
        with pytest.raises(FaultError) as caught:
            parse_fault(text, still)
        assert "restarts nothing (recovery.max_restarts: 0)" in caught.value.message
        assert caught.value.hint == "--set recovery.max_restarts=5 (the default)"


@pytest.fixture(scope="module")
def two_hosts() -> Plan:
    return make_plan(load_spec(ROOT / "stacks" / "cpu-2host.yaml"))


def test_a_link_cut_names_a_host_and_watches_every_engine(two_hosts: Plan) -> None:
    # cpu-2host: prefill-0 on host-a; decode-0 and the router on host-b. prefill-0 is cut off
    # the router, decode-0 off its KV source: the drill waits for both.
    for host in ("host-a", "host-b"):
        fault = parse_fault(f"cut:{host}@5+10", two_hosts)
        assert fault == Fault(FaultAction.CUT, host, 5.0, 10.0)
        assert fault.watched(two_hosts) == ["prefill-0", "decode-0"]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("cut:host-c@1+5", "has no host 'host-c'"),
        ("cut:host-a@1", "cut needs how long"),
        ("cut:prefill-0@1+5", "has no host 'prefill-0'"),
    ],
)
def test_bad_cuts_say_what_is_wrong(two_hosts: Plan, text: str, says: str) -> None:
    with pytest.raises(FaultError) as caught:
        parse_fault(text, two_hosts)
    assert says in caught.value.message


def test_a_cut_between_hosts_of_one_network_stack_is_refused(two_hosts: Plan) -> None:
    hosts = [
        host.model_copy(update={"address": f"127.0.0.{index + 2}"})
        for index, host in enumerate(two_hosts.hosts)
    ]
    rehearsal = two_hosts.model_copy(update={"hosts": tuple(hosts)})
    with pytest.raises(FaultError) as caught:
        parse_fault("cut:host-a@1+5", rehearsal)
    assert "loopback address" in caught.value.message


def test_a_cut_waits_for_the_nodes_addresses_under_slurm() -> None:
    """cpu-slurm's hosts get their nodes' addresses once the job runs: the spec's loopback
    defaults are no reason to refuse before, and the drill checks again with the nodes'."""
    slurm = make_plan(load_spec(ROOT / "stacks" / "cpu-slurm.yaml"))
    assert runtime_kind(slurm.runtime).addresses_at_placement
    fault = parse_fault("cut:host-a@8+10", slurm, addresses_known=False)
    assert (fault.action, fault.target) == (FaultAction.CUT, "host-a")
    with pytest.raises(FaultError, match="loopback address"):
        parse_fault("cut:host-a@8+10", slurm)


def _result(outcomes: list[Outcome], samples: list[Sample]) -> DrillResult:
    load = LoadSettings(url="http://127.0.0.1:1/v1/completions", model="m", deadline_s=30)
    result = DrillResult("cpu-faults", "proxy", "kill:decode-0@10", 10.0, load)
    result.outcomes, result.samples = outcomes, samples
    return result


def _look(
    at_s: float, status: str = "running", *, restarts: int = 0, rotation: bool = True
) -> Sample:
    return Sample(at_s, status, "healthy" if status == "running" else None, restarts, rotation)


# By hand: two fine requests, one cut mid-answer by the kill, one refused while it was out,
# then fine again; the service out of rotation at 11 s and back at 40 s after one restart.
OUTCOMES = [
    Outcome(0.0, 2.0, ok=True, started=True, tokens=32),
    Outcome(8.0, 10.5, ok=False, started=True, error="cut", tokens=5),
    Outcome(10.2, 10.8, ok=False, started=False, error="http_502"),
    Outcome(12.0, 14.0, ok=True, started=True, tokens=32),
]
SAMPLES = [
    _look(9.0),
    _look(11.0, "restarting", restarts=1, rotation=False),
    _look(30.0, restarts=1, rotation=False),
    _look(40.0, restarts=1),
]


def test_a_drills_figures() -> None:
    summary = _result(OUTCOMES, SAMPLES).summary()
    assert summary["failed_after_answer_started"] == 1
    assert summary["failed_before_answer_started"] == 1
    assert summary["ejected_after_s"] == pytest.approx(1.0)
    assert summary["recovered_after_s"] == pytest.approx(30.0)
    assert summary["last_failure_after_s"] == pytest.approx(0.8)
    assert summary["longest_request_s"] == pytest.approx(2.5)
    assert summary["restarts"] == 1


def test_the_figures_count_from_when_the_signal_step_ended() -> None:
    """Under load (CI, cpu) a `docker exec` took 9.5 s to deliver a kill planned at 10 s:
    counted from the plan, the router's prompt ejection read as 10.6 s."""
    late = [_look(9.0), _look(19.0), _look(20.6, "restarting", restarts=1, rotation=False)]
    result = _result(OUTCOMES, [*late, _look(60.0, restarts=1)])
    assert result.summary()["ejected_after_s"] == pytest.approx(10.6)  # from the plan
    result.landed_at_s = 19.5
    summary = result.summary()
    assert summary["ejected_after_s"] == pytest.approx(1.1)
    assert summary["recovered_after_s"] == pytest.approx(40.5)
    assert summary["served_again_after_s"] is None  # no request was sent after 19.5 s
    assert result.as_dict()["landed_at_s"] == 19.5


def test_a_restart_between_two_looks_still_counts_as_out() -> None:
    # The service died and came back between looks: only its restart count says so.
    samples = [_look(9.0), _look(40.0, restarts=1)]
    assert _result(OUTCOMES, samples).back_at() == pytest.approx(40.0)


def test_restarts_count_from_the_fault() -> None:
    # A service restarted once before this drill: only the drill's own restart counts.
    samples = [
        _look(9.0, restarts=1),
        _look(11.0, "restarting", restarts=2),
        _look(40.0, restarts=2),
    ]
    assert _result(OUTCOMES, samples).summary()["restarts"] == 1


def test_a_service_never_out_is_not_recovered_but_never_left() -> None:
    result = _result(OUTCOMES, [_look(9.0), _look(10.5), _look(40.0)])
    assert result.back_at() is None
    assert result.never_out()
    assert result.summary()["never_out"] is True
    assert not _result(OUTCOMES, SAMPLES).never_out()  # it left at 11 s


def test_a_cut_the_router_never_noticed_is_never_out_only_once_it_is_over(
    tmp_path: Path,
) -> None:
    """A 10 s cut at 10 s: whole at every look through 20 s says nothing until a look
    after its end (the router may notice late); a restart at any look means it left."""
    result = _result(OUTCOMES, [_look(9.0), _look(15.0), _look(20.5)])
    result.fault_for_s = 10.0
    assert not result.never_out()
    result.samples.append(_look(22.0))
    assert result.never_out()
    text = write_fault_report(result, tmp_path, hardware="by hand").read_text()
    assert "| service whole again after | never out (whole at every look) |" in text
    assert "| verdict as the load ended | not run (the service never left) |" in text
    result.samples.append(_look(23.0, restarts=1))
    assert not result.never_out()


def test_a_look_the_router_did_not_answer_says_nothing_of_rotation(tmp_path: Path) -> None:
    """Mid-cut, the router's metrics page timed out once: that look is neither back nor out,
    so the service is whole again only at the first answered look after the cut."""
    silent = replace(_look(13.0, rotation=False), in_rotation=None, router_silent=True)
    samples = [_look(9.0), _look(12.0, rotation=False), silent, _look(27.0)]
    result = _result(OUTCOMES, samples)
    result.fault_for_s = 15.0
    assert silent.look() == "router did not answer"
    assert result.back_at() == pytest.approx(27.0)
    assert result.summary()["ejected_after_s"] == pytest.approx(2.0)
    unnoticed = _result(OUTCOMES, [_look(9.0), silent, _look(27.0)])
    unnoticed.fault_for_s = 15.0
    assert unnoticed.never_out()  # the silent look did not take it out either
    text = write_fault_report(result, tmp_path, hardware="by hand").read_text()
    assert "| 13 | 0 | 0 | router did not answer |" in text


def test_a_killed_lmcache_server_is_whole_only_once_its_engine_registered_again() -> None:
    """The server comes back first; its engine's supervisor then restarts the engine (it lost
    its registration): the stack is whole only when that engine is healthy and newer."""
    server = ServiceState("lmcache-decode-0", "c", "running", "healthy", None, (), started_at=50.0)
    old = ServiceState("decode-0", "e", "running", "healthy", None, (), started_at=10.0)

    def back(engine: ServiceState | None) -> bool | None:
        states = {"lmcache-decode-0": server} | ({"decode-0": engine} if engine else {})
        return followers_back_of(states, server.service, ["decode-0"] if engine else [])

    assert back(old) is False  # still the engine that lost its registration
    assert back(replace(old, started_at=70.0, health="starting")) is False
    assert back(replace(old, started_at=70.0)) is True
    assert back(None) is None  # no engine registered with it: nothing to wait for
    samples = [
        _look(9.0),
        _look(20.0, restarts=1),  # the server back, its engine not yet restarted
        replace(_look(40.0, restarts=1), followers_back=True),
    ]
    samples[1] = replace(samples[1], followers_back=False)
    assert _result(OUTCOMES, samples).back_at() == pytest.approx(40.0)


def test_a_slow_look_still_sees_the_restart_after_the_fault() -> None:
    """The H100's killed prefiller (2026-12-06): restarted 0.2 s after the fault, its decoder
    still starting. A look whose health checks took 2 s read the clock after them, put the
    fault 2 s late, after the restart, and said "whole" (nothing to redo); the fault's time
    comes from a look's two clocks read together."""
    fault_wall, fault_at_s = 1_000.0, 15.0
    prefill = ServiceState("prefill-0", "p", "running", "healthy", None, (), started_at=1000.2)
    decode = ServiceState("decode-0", "d", "running", "starting", None, (), started_at=1060.0)
    states = {"prefill-0": prefill, "decode-0": decode}
    at_s = 90.0  # the look began at 1075.0 (unix), its checks ended at 1077.0
    faulted_at = fault_wall_time(fault_wall + at_s - fault_at_s, at_s, fault_at_s)
    assert faulted_at == pytest.approx(fault_wall)
    assert followers_back_of(states, "prefill-0", ["decode-0"], faulted_at=faulted_at) is False
    late = fault_wall + 2.0  # what the clock read after the checks gave
    assert followers_back_of(states, "prefill-0", ["decode-0"], faulted_at=late) is None
    assert fault_wall_time(fault_wall, 14.0, fault_at_s) is None  # before the fault


def test_per_second_counts_by_end(tmp_path: Path) -> None:
    result = _result(OUTCOMES, SAMPLES)
    rows = per_second(result)
    assert rows[2] == (2, 1, 0)
    assert rows[10] == (10, 0, 2)
    assert rows[14] == (14, 1, 0)
    report = write_fault_report(result, tmp_path, hardware="by hand")
    text = report.read_text()
    assert "| failed after their answer started | 1 |" in text
    assert "| 10 | 0 | 2 | - |" in text  # no look in that second
    assert "| 11 | 0 | 0 | restarting |" in text  # the last look in it, and why it is out
    assert "| 9 | 0 | 0 | whole |" in text
    assert (tmp_path / "fault.png").stat().st_size > 1000
    assert '"failed_before_answer_started": 1' in (tmp_path / "fault.json").read_text()


def _state(service: str, status: str = "running", *, restarts: int = 0) -> ServiceState:
    health = "healthy" if status == "running" else None
    return ServiceState(service, service, status, health, None, (), restarts=restarts)


def test_a_cut_is_looked_at_through_all_its_engines_at_once() -> None:
    services = ["prefill-0", "prefill-1"]
    followers: dict[str, list[str]] = {name: [] for name in services}
    both = {"prefill-0": _state("prefill-0"), "prefill-1": _state("prefill-1", restarts=1)}
    whole = combined_sample(3.0, both, services, True, followers)
    assert (whole.status, whole.health, whole.restarts) == ("running", "healthy", 1)
    assert whole.followers_back is None  # nothing registered with them
    one_down = both | {"prefill-1": _state("prefill-1", "restarting", restarts=2)}
    assert combined_sample(4.0, one_down, services, False, followers).status == "restarting"
    half = {"prefill-0": both["prefill-0"]}
    assert combined_sample(5.0, half, services, None, followers).status == "missing"


def test_each_router_names_the_series_of_an_engine_in_rotation(two_hosts: Plan) -> None:
    vllm_router = router_of(two_hosts)
    prefill = next(e for e in two_hosts.engines if e.name == "prefill-0")
    metric, labels = vllm_router.rotation_series(two_hosts, "prefill-0")
    # The names of a live router's page (recorded: tests/probes/recorded/cpu-p2p/router.txt).
    page = (ROOT / "tests" / "probes" / "recorded" / "cpu-p2p" / "router.txt").read_text()
    assert f"# TYPE {metric} gauge" in page
    assert labels == {"worker": prefill.url}
    assert prefill.url.startswith(f"http://{prefill.address}:")
    proxy_plan = make_plan(load_spec(ROOT / "stacks" / "cpu-faults.yaml"))
    assert router_of(proxy_plan).rotation_series(proxy_plan, "decode-1") == (
        "xpyd_proxy_backend_healthy",
        {"backend": "decode-1"},
    )


def test_followers_are_judged_only_after_the_fault() -> None:
    """Engines that share a GPU start one after another, so a follower may be older than the
    service it follows: before the fault that is no reason to call the stack not whole."""
    engine = ServiceState("decode-0", "e", "running", "healthy", None, (), started_at=20.0)
    server = ServiceState("lmcache-decode-0", "s", "running", "healthy", None, (), started_at=10.0)
    states = {"decode-0": engine, "lmcache-decode-0": server}
    followers = {"decode-0": ["lmcache-decode-0"]}
    before = combined_sample(5.0, states, ["decode-0"], True, followers)
    assert before.followers_back is None
    assert before.look() == "whole"
    # After it, once the service started again, its followers must have started after it.
    after = combined_sample(25.0, states, ["decode-0"], True, followers, faulted_at=15.0)
    assert after.look() == "its followers not back"
    # A service that kept its process (a stop fault, a cut) asks nothing of its followers.
    kept = combined_sample(25.0, states, ["decode-0"], True, followers, faulted_at=21.0)
    assert kept.look() == "whole"


def test_a_gpu_engine_and_its_server_that_end_with_each_other_are_back_in_either_order() -> None:
    """The decoder killed at 100 s started again at once, its server (ending with it) at 110 s;
    the decoder then lost its registration with the old server and started again at 120 s.
    The server is no older than the fault: whole. A follower that does not follow back keeps
    the stricter rule (started after the service's last start)."""
    engine = ServiceState("decode-0", "e", "running", "healthy", None, (), started_at=120.0)
    server = ServiceState("lmcache-decode-0", "s", "running", "healthy", None, (), started_at=110.0)
    states = {"decode-0": engine, "lmcache-decode-0": server}
    both = frozenset({"lmcache-decode-0"})
    followers = ["lmcache-decode-0"]
    assert followers_back_of(states, "decode-0", followers, faulted_at=100.0, mutual=both)
    assert not followers_back_of(states, "decode-0", followers, faulted_at=100.0)
    stale = replace(server, started_at=90.0)  # the server from before the fault
    states_stale = {"decode-0": engine, "lmcache-decode-0": stale}
    assert not followers_back_of(states_stale, "decode-0", followers, faulted_at=100.0, mutual=both)


def test_whole_again_that_did_not_last_and_nothing_served_are_said(tmp_path: Path) -> None:
    """As on the H100: the restarted pair was whole at 38 s, its first requests ended the
    decoder (out again), and no request sent after the kill was ever served."""
    outcomes = [
        Outcome(0.0, 2.0, ok=True, started=True, tokens=32),
        *(Outcome(s, s + 0.1, ok=False, started=False, error="http_500") for s in (12.0, 50.0)),
    ]
    samples = [
        _look(9.0),
        _look(11.0, "restarting", restarts=1, rotation=False),
        _look(48.0, restarts=1),
        _look(57.0, "restarting", restarts=2, rotation=False),
    ]
    result = _result(outcomes, samples)
    summary = result.summary()
    assert summary["recovered_after_s"] == pytest.approx(38.0)
    assert summary["out_again_after_s"] == pytest.approx(47.0)
    assert summary["served_again_after_s"] is None
    text = write_fault_report(result, tmp_path, hardware="by hand").read_text()
    assert "| service whole again after | 38.0 s, out again after 47.0 s |" in text
    assert "| first request sent after the fault served after | none served |" in text


def test_served_again_is_the_first_request_sent_after_the_fault_that_ended_well() -> None:
    summary = _result(OUTCOMES, SAMPLES).summary()
    assert summary["served_again_after_s"] == pytest.approx(4.0)  # sent at 12 s, ended at 14 s
    assert summary["out_again_after_s"] is None  # whole from 40 s on


def test_the_report_names_the_engine_settings_that_change_a_restart(
    plan: Plan, tmp_path: Path
) -> None:
    """Eager or CUDA graphs (captured at each start), block size, the engines' memory, how KV
    moves: read from the plan the drill ran; a drill recorded before them says nothing."""
    result = _result(OUTCOMES, SAMPLES)
    assert "Engines:" not in write_fault_report(result, tmp_path, hardware="by hand").read_text()
    result.engine_settings = engine_settings(plan)
    text = write_fault_report(result, tmp_path, hardware="by hand").read_text()
    (line,) = [ln for ln in text.splitlines() if ln.startswith("Engines: ")]
    assert "execution eager (--enforce-eager)" in line
    assert "KV transfer pull (the decoder reads)" in line
    assert result.as_dict()["engine_settings"] == result.engine_settings


def test_a_verdict_the_service_came_back_during_is_said_void(tmp_path: Path) -> None:
    """CI, 2026-12-06: decode-0 was whole again while the verdict that left it out ran; the
    proxy sent it the verdict's completion, and the pair check failed on a serving engine."""
    result = _result(OUTCOMES, SAMPLES)
    result.verdict_during, result.verdict_during_s = False, 16.6
    text = write_fault_report(result, tmp_path, hardware="by hand").read_text()
    assert "| verdict as the load ended | FAIL (16.6 s after the fault" in text
    result.verdict_during_void = True
    text = write_fault_report(result, tmp_path, hardware="by hand").read_text()
    assert "| verdict as the load ended | void: the service came back while it ran" in text
