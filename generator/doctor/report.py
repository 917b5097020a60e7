"""What doctor found: one row per check (check, expected, found, verdict, fix), as a table or
JSON. A failed *required* check makes the report fail; warnings never do."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

__all__ = ["CheckRow", "DoctorReport", "Verdict"]


class Verdict(StrEnum):
    PASS = "PASS"  # as expected
    WARN = "WARN"  # works, but slower or riskier than it should be
    FAIL = "FAIL"  # the stack would not start, or would silently crawl
    SKIP = "SKIP"  # does not apply to this host or stack


@dataclass(frozen=True)
class CheckRow:
    check: str
    expected: str
    found: str
    verdict: Verdict
    fix: str = ""
    required: bool = True  # False: a FAIL here is reported but does not fail the report

    @property
    def blocking(self) -> bool:
        return self.verdict is Verdict.FAIL and self.required


@dataclass
class DoctorReport:
    stack: str
    host: str
    rows: list[CheckRow] = field(default_factory=list)
    kv_paths: list[dict[str, Any]] = field(default_factory=list)  # raw probe results

    @property
    def passed(self) -> bool:
        return not any(row.blocking for row in self.rows)

    def add(self, rows: list[CheckRow]) -> None:
        self.rows.extend(rows)

    def as_dict(self) -> dict[str, Any]:
        return {
            "stack": self.stack,
            "host": self.host,
            "passed": self.passed,
            "checks": [asdict(row) | {"verdict": row.verdict.value} for row in self.rows],
            "kv_paths": self.kv_paths,
        }
