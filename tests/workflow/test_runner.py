"""The task graph and its runner, with plain in-process task functions (no Docker)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from generator.errors import StackError, XpydError
from generator.paths import Workspace
from generator.plan import EnginePlan
from generator.planner import make_plan
from generator.render import render_stack
from generator.stack import load_spec
from generator.workflow.context import RunContext, RunOptions
from generator.workflow.dag import build_graph, default_selection, start_waves
from generator.workflow.graph import Graph
from generator.workflow.records import RunRecord, latest_run
from generator.workflow.report import EventLevel, RecordingReporter
from generator.workflow.runner import TaskFailure, run_graph
from generator.workflow.runtimes import host_stacks
from generator.workflow.task import SkipTask, Task, TaskState


def context(workspace: Workspace, tmp_path: Path, **options: bool) -> RunContext:
    plan = make_plan(load_spec(workspace.stack_file("cpu-1p1d")))
    record = RunRecord("run-1", plan.stack, tmp_path / "run-1", {}, {})
    run_options = RunOptions(**options)  # type: ignore[arg-type]  # only the boolean flags
    rendered = render_stack(plan, workspace)
    hosts = host_stacks(plan, rendered, workspace)
    return RunContext(plan, workspace, rendered, run_options, record, RecordingReporter(), hosts)


def states(ctx: RunContext) -> dict[str, str]:
    return {name: task.state.value for name, task in ctx.record.tasks.items()}


def test_independent_tasks_run_concurrently(workspace: Workspace, tmp_path: Path) -> None:
    barrier = threading.Barrier(2, timeout=5)
    a = Task("a", lambda _: str(barrier.wait()))
    b = Task("b", lambda _: str(barrier.wait()))  # both must be running at once to pass
    c = Task("c", lambda _: "joined")
    [a, b] >> c
    ctx = context(workspace, tmp_path)
    run_graph(Graph([a, b, c]), ctx, selected={"a", "b", "c"})
    assert states(ctx) == {"a": "success", "b": "success", "c": "success"}


def test_failure_stops_dependents_and_teardown_still_runs(
    workspace: Workspace, tmp_path: Path
) -> None:
    ran: list[str] = []

    def boom(_: RunContext) -> str:
        raise StackError("engine exited", hint="read its log")

    def record_run(name: str) -> Callable[[RunContext], str]:
        def function(_: RunContext) -> str:
            ran.append(name)
            return name

        return function

    a, fail = Task("a", lambda _: "ok"), Task("fail", boom)
    after = Task("after", record_run("after"))
    down = Task("down", record_run("down"), teardown=True)
    a >> fail >> after >> down
    ctx = context(workspace, tmp_path)
    with pytest.raises(TaskFailure) as caught:
        run_graph(Graph([a, fail, after, down]), ctx, selected={"a", "fail", "after", "down"})
    assert caught.value.task == "fail"
    assert str(caught.value) == "task fail failed: engine exited\n  fix: read its log"
    assert states(ctx) == {
        "a": "success",
        "fail": "failed",
        "after": "upstream_failed",
        "down": "success",
    }
    assert ran == ["down"]
    record = json.loads((tmp_path / "run-1/run.json").read_text())
    assert record["status"] == "failed"
    assert record["tasks"]["fail"]["error"] == "task fail failed: engine exited"
    assert record["tasks"]["fail"]["duration_s"] >= 0


def test_teardown_behind_an_unselected_task_runs_last(workspace: Workspace, tmp_path: Path) -> None:
    """`up --down` without --bench: down's upstream (bench) is not selected and counts as done
    at once; down still waits for everything else (it once removed the stack first)."""
    ran: list[str] = []

    def slow(_: RunContext) -> str:
        time.sleep(0.3)
        ran.append("smoke")
        return "ok"

    def down_function(_: RunContext) -> str:
        ran.append("down")
        return "removed"

    start, smoke = Task("start", lambda _: "ok"), Task("smoke", slow)
    bench, down = Task("bench", lambda _: "ok"), Task("down", down_function, teardown=True)
    start >> smoke >> bench >> down
    ctx = context(workspace, tmp_path)
    run_graph(Graph([start, smoke, bench, down]), ctx, selected={"start", "smoke", "down"})
    assert ran == ["smoke", "down"]
    assert states(ctx) == {
        "start": "success",
        "smoke": "success",
        "bench": "skipped",
        "down": "success",
    }


def test_retries_then_success(workspace: Workspace, tmp_path: Path) -> None:
    attempts: list[int] = []

    def flaky(_: RunContext) -> str:
        attempts.append(1)
        if len(attempts) < 3:
            raise RuntimeError("not yet")
        return "third time"

    task = Task("flaky", flaky, retries=2, retry_delay_s=0.01)
    ctx = context(workspace, tmp_path)
    run_graph(Graph([task]), ctx, selected={"flaky"})
    assert ctx.record.tasks["flaky"].attempts == 1  # one RUNNING transition, three calls inside
    assert len(attempts) == 3
    assert ctx.record.tasks["flaky"].summary == "third time"


def test_skip_task_and_unselected_tasks(workspace: Workspace, tmp_path: Path) -> None:
    def skip(_: RunContext) -> str:
        raise SkipTask("nothing to do")

    a, b, c = Task("a", lambda _: "ok"), Task("b", skip), Task("c", lambda _: "ok")
    a >> b >> c
    ctx = context(workspace, tmp_path)
    run_graph(Graph([a, b, c]), ctx, selected={"b", "c"})
    assert states(ctx) == {"a": "skipped", "b": "skipped", "c": "success"}
    assert ctx.record.tasks["b"].summary == "nothing to do"


def test_interrupt_cancels_and_calls_cleanup(workspace: Workspace, tmp_path: Path) -> None:
    cleaned: list[bool] = []

    def interrupt(_: RunContext) -> str:
        raise KeyboardInterrupt  # surfaces in the main thread's wait, as Ctrl+C would

    first, after = Task("first", interrupt), Task("after", lambda _: "ok")
    first >> after
    ctx = context(workspace, tmp_path)
    with pytest.raises(KeyboardInterrupt):
        run_graph(
            Graph([first, after]),
            ctx,
            selected={"first", "after"},
            on_interrupt=lambda: cleaned.append(True),
        )
    assert cleaned == [True]
    assert ctx.record.status == "interrupted"
    assert states(ctx) == {"first": "cancelled", "after": "cancelled"}


def test_graph_rejects_cycles_and_unknown_names() -> None:
    a, b = Task("a", lambda _: None), Task("b", lambda _: None)
    a >> b >> a
    with pytest.raises(XpydError, match="cycle"):
        Graph([a, b])
    with pytest.raises(XpydError, match="no task named 'nope'"):
        Graph([Task("x", lambda _: None)]).task("nope")


def test_stack_graph_shape(workspace: Workspace, tmp_path: Path) -> None:
    ctx = context(workspace, tmp_path)
    graph = build_graph(ctx.plan)
    levels = graph.levels()
    assert levels[0] == ["render"]
    assert {"build-engines", "build-router"} <= set(
        next(level for level in levels if "build-engines" in level)
    )
    assert set(next(level for level in levels if "wait-prefill-0" in level)) == {
        "wait-prefill-0",
        "wait-decode-0",
    }
    assert [u.name for u in graph.task("start-router").upstream] == [
        "wait-prefill-0",
        "wait-decode-0",
        "build-router",
    ]
    assert graph.order[-3:] == ["smoke", "bench", "down"]


def test_engines_sharing_a_gpu_start_one_after_another(workspace: Workspace) -> None:
    """vLLM sizes its KV cache from the GPU memory used while it profiles: started together,
    the second of two engines on one GPU counts the first's memory as its own."""
    measuring = workspace.stack_file("xpyd-lmcache-1gpu")  # xpyd-1gpu gives each its KV size
    shared = build_graph(make_plan(load_spec(measuring)))
    assert [u.name for u in shared.task("start-engines-2").upstream] == ["wait-prefill-0"]
    assert [u.name for u in shared.task("wait-decode-0").upstream] == ["start-engines-2"]
    assert {"wait-prefill-0", "wait-decode-0"} <= {
        u.name for u in shared.task("start-router").upstream
    }
    own = build_graph(make_plan(load_spec(workspace.stack_file("xpyd"))))  # a GPU each
    assert not any(name.startswith("start-engines-") for name in own.order)


def test_start_waves_follow_each_gpu(workspace: Workspace) -> None:
    template = make_plan(load_spec(workspace.stack_file("xpyd-1gpu"))).engines[0]

    def engine(name: str, *gpus: int) -> EnginePlan:
        return template.model_copy(update={"name": name, "gpus": gpus})

    plan = make_plan(load_spec(workspace.stack_file("xpyd-lmcache-1gpu")))
    a, b, c, d = engine("a", 0, 1), engine("b", 1), engine("c", 2), engine("d", 0)
    assert [[e.name for e in wave] for wave in start_waves(plan, [a, b, c, d])] == [
        ["a", "c"],
        ["b", "d"],
    ]
    assert start_waves(plan, []) == []


def test_engines_given_their_kv_cache_size_start_together_on_one_gpu(
    workspace: Workspace,
) -> None:
    """vLLM measures no memory for a KV cache whose size it is given: nothing to mis-size."""
    sized = ['model.extra_args=["--kv-cache-memory-bytes", "20G"]']
    plan = make_plan(load_spec(workspace.stack_file("xpyd-1gpu"), sized))
    assert [[e.name for e in wave] for wave in start_waves(plan, plan.engines)] == [
        ["prefill-0", "decode-0"]
    ]
    assert not any(name.startswith("start-engines-") for name in build_graph(plan).order)
    # One engine still measuring (its group's args only for decode): one after another again.
    one = ["model.extra_args=[]", 'decode.extra_args=["--kv-cache-memory-bytes=20G"]']
    half = make_plan(load_spec(workspace.stack_file("xpyd-1gpu"), one))
    assert len(start_waves(half, half.engines)) == 2


def test_selection_options_and_resume(workspace: Workspace, tmp_path: Path) -> None:
    graph = build_graph(context(workspace, tmp_path).plan)
    plain = default_selection(graph, context(workspace, tmp_path), None)
    assert "bench" not in plain
    assert "down" not in plain
    full = default_selection(graph, context(workspace, tmp_path, bench=True, down=True), None)
    assert {"bench", "down"} <= full
    resumed = default_selection(graph, context(workspace, tmp_path), "smoke")
    assert resumed == {"smoke"}
    with pytest.raises(XpydError, match="no task named 'smok'"):
        default_selection(graph, context(workspace, tmp_path), "smok")


def test_latest_run_finds_the_newest_of_a_stack(tmp_path: Path) -> None:
    for run_id, stack in (("r1", "a"), ("r2", "b"), ("r3", "a")):
        record = RunRecord(run_id, stack, tmp_path / run_id, {}, {})
        record.set_state("t", TaskState.SUCCESS)
        record.finish("success")
        time.sleep(0.01)
    found = latest_run(tmp_path, "a")
    assert found is not None
    assert found["run_id"] == "r3"
    assert latest_run(tmp_path, "zzz") is None


def test_a_task_past_its_limit_fails_and_the_run_goes_on(
    workspace: Workspace, tmp_path: Path
) -> None:
    stopped = threading.Event()

    def hang(ctx: RunContext) -> str:
        while True:  # a wait that checks for cancellation, as the real waits do
            try:
                ctx.raise_if_cancelled()
            except XpydError:
                stopped.set()
                raise
            time.sleep(0.02)

    slow = Task("slow", hang, timeout_s=0.3)
    after, down = Task("after", lambda _: "ran"), Task("down", lambda _: "ok", teardown=True)
    slow >> after >> down
    ctx = context(workspace, tmp_path)
    started = time.monotonic()
    with pytest.raises(TaskFailure, match="still running after its limit of 0 s") as caught:
        run_graph(Graph([slow, after, down]), ctx, selected={"slow", "after", "down"})
    assert time.monotonic() - started < 3
    assert caught.value.task == "slow"
    assert states(ctx) == {"slow": "failed", "after": "upstream_failed", "down": "success"}
    assert stopped.wait(2), "the given-up task was not told to stop"


def test_events_reach_the_reporter_with_their_level(workspace: Workspace, tmp_path: Path) -> None:
    def warn(ctx: RunContext) -> str:
        ctx.progress("disk [almost] full", EventLevel.WARN)
        return "ok"

    ctx = context(workspace, tmp_path)
    run_graph(Graph([Task("w", warn)]), ctx, selected={"w"})
    reporter = ctx.reporter
    assert isinstance(reporter, RecordingReporter)
    levels = [(level, message.strip().split(" ", 1)[1]) for level, message in reporter.events]
    assert levels == [
        (EventLevel.INFO, "w: started"),
        (EventLevel.WARN, "disk [almost] full"),
        (EventLevel.DONE, "w: done (ok)"),
    ]
