"""What `up` keeps of a stack's Slurm job (``.cache/slurm/<stack>.json``): its id, whether `up`
submitted it (`down` then cancels it) or runs inside one the user made, and the node each host
of the stack was bound to. Read back typed and bounded, like every state file."""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from generator.errors import XpydError
from generator.owned import read_bounded, remove_file, write_text

__all__ = ["SLURM_DIR", "BoundHost", "SlurmJob", "read_job", "remove_job", "write_job"]

SLURM_DIR = PurePosixPath(".cache/slurm")
_MAX_BYTES = 1 << 20
_Name = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,254}$")]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class BoundHost(_Strict):
    host: _Name  # the spec's host
    node: _Name  # the Slurm node it runs on
    address: _Name  # the node's address (NodeAddr)


class SlurmJob(_Strict):
    job_id: int = Field(ge=1, le=1 << 40)
    submitted: bool  # up submitted it: down cancels it
    hosts: tuple[BoundHost, ...] = Field(max_length=4096)
    # Slurm's restart count of the job when up bound the stack: more later, it was requeued.
    restarts: int = Field(default=0, ge=0, le=1_000_000)

    def node_of(self, host: str) -> BoundHost:
        for bound in self.hosts:
            if bound.host == host:
                return bound
        raise XpydError(
            f"host {host} has no node in Slurm job {self.job_id}",
            hint="up the stack again (it binds every host that runs something to a node)",
        )


def _path(root: Path, stack: str) -> Path:
    return root / SLURM_DIR / f"{stack}.json"


def read_job(root: Path, stack: str) -> SlurmJob | None:
    path = _path(root, stack)
    try:
        text = read_bounded(path, max_bytes=_MAX_BYTES)
        return None if text is None else SlurmJob.model_validate_json(text)
    except ValueError as exc:
        raise XpydError(
            f"the Slurm job record of {stack} is unreadable: {str(exc).splitlines()[0]}",
            hint=f"remove {path} after checking the job (squeue --me; scancel it if it is ours)",
        ) from exc


def write_job(root: Path, stack: str, job: SlurmJob) -> None:
    write_text(root, _path(root, stack), job.model_dump_json(indent=2) + "\n")


def remove_job(root: Path, stack: str) -> None:
    remove_file(root, _path(root, stack))
