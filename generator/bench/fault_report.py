"""A fault drill's report: fault.md (the figures and the per-second table), fault.json (every
request and every look at the service) and fault.png (successes and errors per second, the
fault and the recovery marked)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from generator.bench.drill import DrillResult
from generator.docker.netcut import TABLE
from generator.owned import remove_file, write_text

__all__ = ["per_second", "write_fault_report"]


def per_second(result: DrillResult) -> list[tuple[int, int, int]]:
    """(second, requests that ended well in it, requests that failed in it)."""
    end = max((o.end_s for o in result.outcomes), default=0.0)
    rows = [[second, 0, 0] for second in range(math.ceil(end) + 1)]
    for outcome in result.outcomes:
        rows[int(outcome.end_s)][1 if outcome.ok else 2] += 1
    return [(second, ok, failed) for second, ok, failed in rows]


def looks_per_second(result: DrillResult) -> dict[int, str]:
    """The service as last looked at in each second ("whole", or why not)."""
    return {int(sample.at_s): sample.look() for sample in result.samples}


def write_fault_report(result: DrillResult, folder: Path, *, hardware: str) -> Path:
    write_text(folder, folder / "fault.json", json.dumps(result.as_dict(), indent=2) + "\n")
    remove_file(folder, folder / "fault.png")  # a link there goes: the plot is written anew
    _plot(result, folder / "fault.png")
    return write_text(folder, folder / "fault.md", markdown(result, hardware=hardware))


def _seconds(value: float | int | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def markdown(result: DrillResult, *, hardware: str) -> str:
    s = result.summary()
    load = result.load
    verdict = {True: "PASS", False: "FAIL", None: "not run (the service never came back)"}
    lines = [
        f"# Fault drill: {result.stack}, {result.fault} ({result.router})",
        "",
        f"Hardware: {hardware}. Load: {load.concurrency} clients, each one streamed completion "
        f"after another ({load.prompt_words}-word prompts, {load.max_tokens} tokens), "
        f"{load.duration_s:g} s, deadline {load.deadline_s:g} s per request.",
        *_settings(result),
        f"Injected: {result.injected.strip() or '-'}"
        + (
            f" (the step took {result.injected_in_s:.1f} s; the figures count from its end)"
            if result.injected_in_s
            else ""
        ),
        _ending(result),
        "",
        "| figure | value |",
        "|---|---|",
        f"| requests | {s['requests']} ({s['succeeded']} succeeded) |",
        f"| failed after their answer started | {s['failed_after_answer_started']} |",
        f"| failed before their answer started | {s['failed_before_answer_started']} |",
        f"| longest request | {_seconds(s['longest_request_s'])} "
        f"(deadline {load.deadline_s:g} s) |",
        f"| out of the router's rotation after | {_seconds(s['ejected_after_s'])} |",
        f"| last failed request ended after | {_seconds(s['last_failure_after_s'])} |",
        f"| first request sent after the fault served after | {_served(s)} |",
        f"| service whole again after | {_back(s)} |",
        f"| restarts | {s['restarts']} |",
        f"| verdict as the load ended | {_during(result)} |",
        f"| verdict after the fault | {verdict[result.verdict_after]}"
        f" ({_seconds(s['verdict_after_s'])} after the fault) |",
        "",
        "Per second of the load (by when each request ended; the fault at "
        f"{result.fault_at_s:g} s):",
        "",
        "| second | succeeded | failed | the service, last look |",
        "|---|---|---|---|",
    ]
    looks = looks_per_second(result)
    lines += [
        f"| {second} | {ok} | {failed} | {looks.get(second, '-')} |"
        for second, ok, failed in per_second(result)
    ]
    return "\n".join(lines) + "\n"


def _back(summary: dict[str, float | int | None]) -> str:
    if summary["never_out"]:
        return "never out (whole at every look)"
    back = _seconds(summary["recovered_after_s"])
    again = summary["out_again_after_s"]
    return back if again is None else f"{back}, out again after {_seconds(again)}"


def _served(summary: dict[str, float | int | None]) -> str:
    served = summary["served_again_after_s"]
    return "none served" if served is None else _seconds(served)


def _settings(result: DrillResult) -> list[str]:
    """The engines' settings that change how long a start takes (CUDA graphs are captured at
    each start) and how KV moves; none for a drill recorded before they were."""
    if not result.engine_settings:
        return []
    named = ", ".join(f"{name} {value}" for name, value in result.engine_settings.items())
    return [f"Engines: {named}."]


def _during(result: DrillResult) -> str:
    if result.verdict_during is None:
        return f"not run (the service {'never left' if result.never_out() else 'was whole again'})"
    passed = "PASS" if result.verdict_during else "FAIL"
    if result.verdict_during_void:
        passed = "void: the service came back while it ran, and its view left it out"
    return f"{passed} ({_seconds(result.verdict_during_s)} after the fault, the service not back)"


def _plot(result: DrillResult, path: Path) -> None:
    import matplotlib as mpl

    mpl.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    rows = per_second(result)
    seconds = [row[0] for row in rows]
    figure, axes = plt.subplots(figsize=(9, 4))
    axes.bar(seconds, [row[1] for row in rows], color="tab:green", label="succeeded")
    axes.bar(
        seconds,
        [row[2] for row in rows],
        bottom=[row[1] for row in rows],
        color="tab:red",
        label="failed",
    )
    axes.axvline(result.fault_at_s, color="black", linestyle="--", label=f"fault {result.fault}")
    back = result.back_at()
    if back is not None:
        axes.axvline(back, color="tab:blue", linestyle=":", label="service whole again")
    axes.yaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlabel("seconds since the load started")
    axes.set_ylabel("requests ended")
    axes.set_title(f"{result.stack}: {result.fault} ({result.router})")
    axes.legend(loc="upper right", fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def _ending(result: DrillResult) -> str:
    if result.link_restored is None:
        return f"The service's last exit: {result.last_exit or '-'}"
    if result.link_restored:
        return "The link was restored on every host."
    return f"The link cut could NOT be removed everywhere (nft table {TABLE}): see the run's log."
