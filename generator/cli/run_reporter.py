"""What `up` shows while it runs: the workflow's events on stderr, the verdict table on stdout."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text

from generator.console import stderr
from generator.workflow.report import EventLevel

if TYPE_CHECKING:
    from generator.plan import Plan
    from generator.probes import SmokeResult

__all__ = ["ConsoleReporter"]

_STYLE = {
    EventLevel.INFO: "",
    EventLevel.DONE: "green",
    EventLevel.WARN: "yellow",
    EventLevel.FAILED: "red",
}


class ConsoleReporter:
    """Plain text styled by level: messages carry user input, never read as markup."""

    def event(self, level: EventLevel, message: str) -> None:
        prefix = "warning: " if level is EventLevel.WARN else ""
        stderr.print(Text(prefix + message, style=_STYLE[level]))

    def service_log(self, service: str, condition: str, tail: str) -> None:
        stderr.print(Text.assemble((service, "red"), f" is {condition}; last lines:"))
        stderr.print(Text(tail))

    def verdict(self, plan: Plan, result: SmokeResult) -> None:
        from generator.cli.tables import print_verdict

        print_verdict(plan, result)
