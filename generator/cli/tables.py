"""Human-readable plan tables (rich), printed to stdout."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from generator.plan import Plan

if TYPE_CHECKING:
    from generator.docker import ServiceState
    from generator.doctor import DoctorReport
    from generator.probes import SmokeResult
    from generator.probes.prometheus import ObserveReport
    from generator.workflow.graph import Graph

__all__ = [
    "print_dag",
    "print_doctor",
    "print_observe",
    "print_plan",
    "print_status",
    "print_verdict",
]


def _console() -> Console:
    """Rich's 80-column default wraps these tables badly in CI logs and pipes."""
    console = Console(highlight=False)
    return console if console.is_terminal else Console(highlight=False, width=140)


def _plain(*cells: str) -> list[Text]:
    """Table cells as text: a str cell would be read as rich markup."""
    return [Text(cell) for cell in cells]


def print_plan(plan: Plan) -> None:
    console = _console()
    summary = (
        f": {plan.topology.kind.value}, {plan.profile.value} profile, "
        f"{plan.runtime.value} runtime, "
        f"{len(plan.prefill)}P{len(plan.decode)}D, {plan.network} network, "
        f"RDMA {'on' if plan.rdma else 'off'}, router {plan.router.kind.value} "
        f"at {plan.router.advertise_host}:{plan.router.port}"
    )
    console.print(Text.assemble((plan.stack, "bold"), summary))
    console.print(_engines(plan))
    console.print(_ports(plan))
    for line in plan.warnings:
        console.print(Text.assemble(("warning:", "yellow"), " ", line))


def _engines(plan: Plan) -> Table:
    devices = "GPUs" if plan.profile.value == "gpu" else "cores"
    table = Table(title="engines", title_justify="left")
    columns = ["engine", "host", devices, "TP", "http", "KV ports"]
    if plan.profile.value == "gpu":
        columns.insert(3, "container sees (CUDA_VISIBLE_DEVICES)")
    for column in columns:
        table.add_column(column)
    for leader in plan.engines:
        for engine in plan.nodes_of(leader):  # an engine over several hosts: each node
            ids = ",".join(map(str, engine.gpus or engine.cpus))
            sees = [] if not engine.gpus else [_gpu_view(engine.visible_gpus, engine.cuda_devices)]
            kv = engine.kv.describe()
            tp = str(engine.tp) if engine.nodes == 1 else f"{engine.tp} (node {engine.node_rank})"
            http = "-" if engine.is_follower else str(engine.http_port)  # headless
            table.add_row(*_plain(engine.name, engine.host, ids, *sees, tp, http, kv))
    return table


def _gpu_view(visible: tuple[int, ...], selected: tuple[int, ...]) -> str:
    return f"{','.join(map(str, visible))} ({','.join(map(str, selected))})"


def _ports(plan: Plan) -> Table:
    table = Table(title="ports (unique per host)", title_justify="left")
    for column in ("host", "port", "service", "purpose"):
        table.add_column(column)
    for host, first, last, owner, purpose in _port_runs(plan):
        span = str(first) if first == last else f"{first}-{last}"
        table.add_row(*_plain(host, span, owner, purpose))
    return table


def _port_runs(plan: Plan) -> list[tuple[str, int, int, str, str]]:
    """Consecutive ports of one owner and purpose (per-TP-rank blocks) as one row."""
    runs: list[tuple[str, int, int, str, str]] = []
    for use in plan.ports:
        purpose = use.purpose.split(" (tp rank")[0]
        if runs:
            host, first, last, owner, previous = runs[-1]
            if (host, owner, previous, last + 1) == (use.host, use.owner, purpose, use.port):
                runs[-1] = (host, first, use.port, owner, purpose)
                continue
        runs.append((use.host, use.port, use.port, use.owner, purpose))
    return runs


def print_verdict(plan: Plan, result: SmokeResult) -> None:
    table = Table(title=Text(f"{plan.stack}: smoke verdict"), title_justify="left")
    for column in ("check", "observed", "expected", "result"):
        table.add_column(column)
    colors = {"PASS": "green", "FAIL": "red", "n/a": "dim", "WARN": "yellow", "info": "cyan"}
    for row in result.rows:
        mark = f"[{colors[row.mark]}]{row.mark}[/]"
        table.add_row(escape(row.check), escape(row.observed), escape(row.expected), mark)
    console = _console()
    console.print(table)
    verdict = "[green]PASS[/green]" if result.passed else "[red]FAIL[/red]"
    console.print(f"verdict: {verdict}  (completion: {escape(repr(result.completion_text[:60]))})")


def print_status(project: str, states: list[ServiceState], last_run: dict[str, Any] | None) -> None:
    console = _console()
    table = Table(title=Text(project), title_justify="left")
    for column in ("service", "state", "health", "restarts", "last exit", "ports"):
        table.add_column(column)
    for state in states:
        table.add_row(
            *_plain(
                state.service,
                state.status,
                state.health or "-",
                str(state.restarts),
                state.last_exit or "-",
                ", ".join(state.ports) or "-",
            )
        )
    console.print(table if states else Text(f"{project}: no containers"))
    if last_run is not None:
        tasks = last_run.get("tasks", {})
        failed = [
            name
            for name, task in tasks.items()
            if task.get("state") in ("failed", "upstream_failed")
        ]
        console.print(
            Text(
                f"last run {last_run['run_id']}: {last_run['status']} ({last_run['started_at']} "
                f".. {last_run.get('ended_at') or 'running'})"
                + (f", failed: {', '.join(failed)}" if failed else "")
            )
        )


def print_dag(graph: Graph) -> None:
    console = _console()
    for depth, names in enumerate(graph.levels()):
        for name in names:
            task = graph.by_name[name]
            after = ", ".join(u.name for u in task.upstream) or "-"
            marker = " (teardown)" if task.teardown else ""
            console.print(
                Text.assemble(
                    f"{depth:2d}  ",
                    (name, "bold"),
                    f"{marker}  after: {after}  ",
                    (task.description, "dim"),
                )
            )


def print_doctor(report: DoctorReport) -> None:
    table = Table(title=Text(f"doctor: {report.stack} on host {report.host}"), title_justify="left")
    for column in ("check", "expected", "found", "verdict", "fix"):
        table.add_column(column)
    colors = {"PASS": "green", "WARN": "yellow", "FAIL": "red", "SKIP": "dim"}
    for row in report.rows:
        mark = row.verdict.value + (
            "" if row.required or row.verdict.value != "FAIL" else " (advisory)"
        )
        table.add_row(
            escape(row.check),
            escape(row.expected),
            escape(row.found),
            f"[{colors[row.verdict.value]}]{mark}[/]",
            escape(row.fix),
        )
    console = _console()
    console.print(table)
    verdict = "[green]ready[/green]" if report.passed else "[red]NOT ready[/red]"
    console.print(f"{escape(report.stack)} on {escape(report.host)}: {verdict}")


def print_observe(report: ObserveReport) -> None:
    console = _console()
    parts = Table(title="scrape targets and rules (Prometheus's health)")
    for column in ("what", "name", "health"):
        parts.add_column(column)
    for name, health in sorted(report.targets.items()):
        parts.add_row(*_plain("target", name, health))
    for name, health in sorted(report.rules.items()):
        error = report.rule_errors.get(name)
        parts.add_row(*_plain("rule", name, f"{health}: {error}" if error else health))
    console.print(parts)
    queries = Table(title="dashboard panels and recorded series, asked as Grafana asks")
    for column in ("source", "answer", "series"):
        queries.add_column(column)
    for query in report.queries:
        answer = f"{query.answer.value}: {query.detail}" if query.detail else query.answer.value
        queries.add_row(*_plain(query.source, answer, str(query.series)))
    console.print(queries)
    if report.spans:
        said = ", ".join(f"{name} {count}" for name, count in report.spans.items())
        console.print(f"spans received (OTLP receiver): {said}")
    console.print(f"alerts firing: {', '.join(report.firing) or 'none'}")
    console.print(f"alerts pending: {', '.join(report.pending) or 'none'}")
