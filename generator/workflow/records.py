"""Run records: runs/<run-id>/run.json (task states, times, errors, the plan) and logs/."""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

from generator.errors import XpydError
from generator.owned import owned_dir, read_bounded, write_text
from generator.workflow.states import TaskState

__all__ = ["RUNS_DIR", "RunRecord", "TaskRecord", "claim_run_dir", "latest_run", "new_run_id"]

RUNS_DIR = PurePosixPath("runs")
_MAX_SAME_SECOND = 100
_MAX_RUNS_READ = 200  # status looks at the newest ones only
_RUN_JSON_MAX_BYTES = 16 << 20


def new_run_id(stack: str) -> str:
    return f"{datetime.now(UTC).strftime('%Y%m%d-%H%M%S')}-{stack}"


def claim_run_dir(root: Path, what: str, run_id: str | None) -> Path:
    """``runs/<run-id>/`` of a new run, made now, never through a link: the folder of the id
    the user gave (kept if it exists: they named it), or of a new id for ``what`` that no
    other run has (two runs in one second take -2, -3, ...)."""
    runs = owned_dir(root, RUNS_DIR)
    if run_id is not None:
        return owned_dir(root, RUNS_DIR / run_id)
    base = new_run_id(what)
    for attempt in range(1, _MAX_SAME_SECOND + 1):
        candidate = runs / (base if attempt == 1 else f"{base}-{attempt}")
        with contextlib.suppress(FileExistsError):
            os.mkdir(candidate)
            return candidate
    raise XpydError(f"{_MAX_SAME_SECOND} runs of {what} in one second", hint="try again")


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
        text = json.dumps(data, indent=2, default=str) + "\n"
        write_text(self.directory, self.directory / "run.json", text)


def _public(fields: dict[str, Any]) -> dict[str, Any]:
    """The fields run.json shows: no private ones, and ``bug`` only where there was one."""
    return {
        key: value
        for key, value in fields.items()
        if not key.startswith("_") and not (key == "bug" and value is None)
    }


def latest_run(runs_dir: Path, stack: str) -> dict[str, Any] | None:
    """The newest readable run.json of ``stack`` under ``runs_dir``, if any (each read
    bounded; a damaged or foreign one is passed over)."""
    candidates = sorted(
        runs_dir.glob("*/run.json"), key=lambda path: path.lstat().st_mtime, reverse=True
    )
    for path in candidates[:_MAX_RUNS_READ]:
        with contextlib.suppress(ValueError, RecursionError):
            data = json.loads(read_bounded(path, max_bytes=_RUN_JSON_MAX_BYTES) or "null")
            if isinstance(data, dict) and data.get("stack") == stack:
                return _shown(data)
    return None


def _shown(data: dict[str, Any]) -> dict[str, Any]:
    """The fields `status` shows, as short text (a run.json may have been edited)."""
    shown: dict[str, Any] = {
        key: None if data.get(key) is None else str(data[key])[:100]
        for key in ("run_id", "status", "started_at", "ended_at")
    }
    tasks = data.get("tasks")
    shown["tasks"] = {
        str(name)[:100]: {"state": str(task.get("state"))[:40]}
        for name, task in (tasks.items() if isinstance(tasks, dict) else ())
        if isinstance(task, dict)
    }
    return shown
