"""What the process runtime keeps of a running project in its state folder
(``.cache/process/<project>/state.json``), read back as a typed, bounded file.

Each service's entry proves which process is the one `up` started, by more than its number:
its PID, its start time as the kernel gives it, and a *marker*, a random token `up` put into
its environment (``XPYD_OWNER``) and nowhere else. A process is the service's only while all
three agree (``generator/runtimes/groups.py``), so a state file edited, damaged or left from
another boot can make the runtime act on nothing but its own processes. ``plan`` is the digest
of the process plan the services were started from: ``status`` runs no health check of a plan
edited since.

A state file that is not what this module writes (not JSON, nested, huge, a PID that cannot
be one, an unknown field) is one clear error, never a traceback and never an action.
"""

from __future__ import annotations

import hashlib
import secrets
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from generator.errors import XpydError
from generator.owned import read_bounded, write_text

__all__ = [
    "MARKER_ENV",
    "STATE_FILE",
    "ServiceEntry",
    "StackState",
    "new_marker",
    "plan_digest",
    "read_state",
    "write_state",
]

STATE_FILE = "state.json"
MARKER_ENV = "XPYD_OWNER"
_STATE_MAX_BYTES = 1 << 20
_PID_MAX = 1 << 22  # Linux's PID_MAX_LIMIT
_MAX_SERVICES = 4096
ServiceName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class ServiceEntry(_Strict):
    pid: int = Field(ge=2, le=_PID_MAX)  # never 0, 1 or a group's negative id
    started: float = Field(gt=0)  # the process's start, unix seconds (psutil's create_time)
    marker: str = Field(pattern=r"^[0-9a-f]{32}$")
    definition: str | None = Field(None, pattern=r"^[0-9a-f]{16}$")  # what it runs (up)
    oneoff: bool = False


class StackState(_Strict):
    version: Literal[2] = 2
    plan: str = Field(pattern=r"^[0-9a-f]{64}$")
    services: dict[ServiceName, ServiceEntry] = Field(
        default_factory=dict, max_length=_MAX_SERVICES
    )

    def with_service(self, name: str, entry: ServiceEntry) -> StackState:
        return self.model_copy(update={"services": {**self.services, name: entry}})

    def without(self, name: str) -> StackState:
        services = {key: entry for key, entry in self.services.items() if key != name}
        return self.model_copy(update={"services": services})


def new_marker() -> str:
    return secrets.token_hex(16)


def plan_digest(plan_text: str) -> str:
    return hashlib.sha256(plan_text.encode("utf-8")).hexdigest()


def read_state(folder: Path, project: str) -> StackState | None:
    """The project's state (None: nothing was started, or down removed it)."""
    path = folder / STATE_FILE
    try:
        text = read_bounded(path, max_bytes=_STATE_MAX_BYTES)
        if text is None:
            return None
        return StackState.model_validate_json(text)
    except (ValueError, RecursionError) as exc:  # ValidationError is a ValueError
        raise XpydError(
            f"state of {project} is unreadable: {_problem(exc)}",
            hint=f"remove {folder} after checking that nothing of {project} runs "
            f"(its logs are in {folder / 'logs'})",
        ) from exc


def _problem(exc: Exception) -> str:
    if isinstance(exc, RecursionError):
        return "it nests too deep"
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the document"
        return f"{where}: {first['msg']} ({len(exc.errors())} problem(s); not one it writes)"
    return str(exc)


def write_state(root: Path, folder: Path, state: StackState) -> None:
    """Written whole (another shell never reads half a file), never through a link."""
    write_text(root, folder / STATE_FILE, state.model_dump_json(indent=2) + "\n")
