"""The smoke verdict's rows and result (shared by the smoke test and its KV speed check)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["SmokeResult", "VerdictRow"]


@dataclass(frozen=True)
class VerdictRow:
    check: str
    observed: str
    expected: str
    passed: bool | None  # None: not judged here (not applicable, a warning, or a figure)
    note: str = ""  # for passed=None: "WARN" (works, slower than it should) or "info"

    @property
    def mark(self) -> str:
        if self.passed is None and self.note:
            return self.note
        return {True: "PASS", False: "FAIL", None: "n/a"}[self.passed]


@dataclass(frozen=True)
class SmokeResult:
    rows: list[VerdictRow]
    completion_text: str
    chat_text: str
    prompt_tokens: int
    # The KV path's measurement per smoke request (P/D): MiB, ms, GiB/s, UCX transport.
    kv_transfers: tuple[dict[str, Any], ...] = ()

    @property
    def passed(self) -> bool:
        return all(row.passed is not False for row in self.rows)

    def as_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "prompt_tokens": self.prompt_tokens,
            "kv_transfers": list(self.kv_transfers),
            "rows": [asdict(r) | {"mark": r.mark} for r in self.rows],
        }
