"""A task's states: below the tasks, the run context and the run record, which all read them."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["DONE_STATES", "FAILED_STATES", "TaskState"]


class TaskState(StrEnum):
    PENDING = "pending"  # waiting for its upstream tasks
    RUNNING = "running"  # its function is executing
    SUCCESS = "success"  # returned normally
    FAILED = "failed"  # raised, after its retries
    UPSTREAM_FAILED = "upstream_failed"  # never ran: something it needs failed
    SKIPPED = "skipped"  # not asked for (an optional task) or before --from
    CANCELLED = "cancelled"  # interrupted (Ctrl+C) before or while running


DONE_STATES = frozenset({TaskState.SUCCESS, TaskState.SKIPPED})
FAILED_STATES = frozenset({TaskState.FAILED, TaskState.UPSTREAM_FAILED, TaskState.CANCELLED})
