"""Run records: runs/<run-id>/run.json (task states, times, errors, the plan) and logs/."""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from generator.workflow.states import TaskState

__all__ = ["RunRecord", "TaskRecord", "latest_run", "new_run_id"]


def new_run_id(stack: str) -> str:
    return f"{datetime.now(UTC).strftime('%Y%m%d-%H%M%S')}-{stack}"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


@dataclass
class TaskRecord:
    state: TaskState = TaskState.PENDING
    started_at: str | None = None
    ended_at: str | None = None
    duration_s: float | None = None
    attempts: int = 0
    summary: str | None = None
    error: str | None = None
    # A bug (an exception outside the XpydError tree): the traceback's last lines, for a report.
    bug: str | None = None
    _t0: float = field(default=0.0, repr=False)


@dataclass
class RunRecord:
    """Thread-safe; every change is flushed to run.json (written atomically)."""

    run_id: str
    stack: str
    directory: Path
    plan: dict[str, Any]
    options: dict[str, Any]
    tasks: dict[str, TaskRecord] = field(default_factory=dict)
    status: str = "running"
    started_at: str = field(default_factory=_now)
    ended_at: str | None = None
    results: dict[str, Any] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def logs_dir(self) -> Path:
        return self.directory / "logs"

    def set_state(
        self,
        name: str,
        state: TaskState,
        *,
        summary: str | None = None,
        error: str | None = None,
        bug: str | None = None,
    ) -> None:
        with self._lock:
            record = self.tasks.setdefault(name, TaskRecord())
            if state is TaskState.RUNNING:
                record.started_at, record._t0 = _now(), time.monotonic()
                record.attempts += 1
            elif record.started_at is not None and state is not TaskState.PENDING:
                record.ended_at = _now()
                record.duration_s = round(time.monotonic() - record._t0, 3)
            record.state = state
            record.summary = summary if summary is not None else record.summary
            record.error = error if error is not None else record.error
            record.bug = bug if bug is not None else record.bug
            self._flush()

    def add_result(self, key: str, value: Any) -> None:
        with self._lock:
            self.results[key] = value
            self._flush()

    def finish(self, status: str) -> None:
        with self._lock:
            self.status, self.ended_at = status, _now()
            self._flush()

    def _flush(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        data = {
            "run_id": self.run_id,
            "stack": self.stack,
            "status": self.status,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "options": self.options,
            "tasks": {name: _public(asdict(task)) for name, task in self.tasks.items()},
            "results": self.results,
            "plan": self.plan,
        }
        temporary = self.directory / ".run.json.tmp"
        temporary.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
        os.replace(temporary, self.directory / "run.json")


def _public(fields: dict[str, Any]) -> dict[str, Any]:
    """The fields run.json shows: no private ones, and ``bug`` only where there was one."""
    return {
        key: value
        for key, value in fields.items()
        if not key.startswith("_") and not (key == "bug" and value is None)
    }


def latest_run(runs_dir: Path, stack: str) -> dict[str, Any] | None:
    """The newest run.json of ``stack`` under ``runs_dir``, if any."""
    candidates = sorted(
        runs_dir.glob("*/run.json"), key=lambda path: path.stat().st_mtime, reverse=True
    )
    for path in candidates:
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        if data.get("stack") == stack:
            return data
    return None
