"""A Slurm step in a container, through pyxis (NVIDIA's SPANK plugin for enroot): the options
its ``srun`` gets (pyxis's option table, ``args.c``). Rendered and checked against that table
(tests/runtimes/test_pyxis.py holds a stand-in of its parser), not run: no enroot here.

The checkout is mounted at its own path, so the supervisor, the configs, the state files and
the logs are where the login node reads them; the step's working directory is the checkout.
pyxis sets every exported variable of the step in the container after the image's
entrypoint, the image's own value first where both set one: the variables the step sets
itself are listed in ``--container-env`` so that theirs win."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["PyxisContainer"]

# The image's tools, not the login node's, whatever the step's environment says.
_IMAGE_WINS = frozenset({"PATH"})


@dataclass(frozen=True)
class PyxisContainer:
    mounts: tuple[str, ...]  # SRC:DST[:FLAGS], the checkout's first
    workdir: Path

    @classmethod
    def for_checkout(cls, root: Path, extra: tuple[str, ...]) -> PyxisContainer:
        return cls((f"{root}:{root}", *extra), root)

    def options(
        self, image: str, env: Mapping[str, str], *, name: str | None = None, reuse: bool = False
    ) -> list[str]:
        """The step's pyxis options for ``image`` with ``env`` (what srun passes on). ``name``:
        the container's, kept for the job, so that it is imported once per node and service
        and a restart starts from it; ``reuse``: a check beside the running service, from its
        container's filesystem without joining it (pyxis's ``no_exec``)."""
        options = [f"--container-image={image}"]
        if name is not None:
            options.append(f"--container-name={name}{':no_exec' if reuse else ''}")
        options += [
            f"--container-mounts={','.join(self.mounts)}",
            f"--container-workdir={self.workdir}",
            "--no-container-mount-home",  # the checkout is all a step reads
        ]
        if names := own_variables(env):
            options.append(f"--container-env={','.join(names)}")
        return options


def own_variables(env: Mapping[str, str]) -> list[str]:
    """The variables the step sets or changes itself (the rest it inherits as they are)."""
    return sorted(
        name for name, value in env.items() if os.environ.get(name) != value
        and name not in _IMAGE_WINS
    )  # fmt: skip
