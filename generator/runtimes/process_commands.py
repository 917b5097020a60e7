"""What the process runtime runs for a service, apart from how it is launched
(generator/runtimes/launchers.py): its argv (the service's Python or the tool beside it, its
cores pinned, its container's view where asked, its supervisor where it is restarted), its
environment (the caller's without its Python settings, the plan's, its secrets, its PID
record) and the digest of its definition."""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from generator.errors import StackError
from generator.runtimes.isolation import ContainerView, PidNamespace, view_command
from generator.runtimes.process_state import MARKER_ENV
from generator.serializers.process import (
    SECRETS_DIR,
    Interpreter,
    ProcessProject,
    ProcessService,
)
from generator.services.model import Secret
from generator.spec import Isolation
from generator.supervise import (
    LOCK_DIR_ENV,
    PID_FILE_ENV,
    alone_options,
    page_options,
    watch_options,
)
from generator.supervise import __file__ as SUPERVISOR  # standard library only: any Python

__all__ = ["Images", "Pythons", "ServiceCommands"]

_DIGESTED_FILE_MAX_BYTES = 1 << 20  # configs are small; a larger file is read by size and time
# The caller's Python environment must not leak into the services' own, nor a marker of its own.
_DROPPED_ENV = (
    "VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "__PYVENV_LAUNCHER__", MARKER_ENV
)  # fmt: skip

# Tools a service runs that no lock installs: where a host gets them.
_NOT_FROM_THE_LOCK = {
    "prometheus": "install Prometheus on PATH (Debian: apt-get install prometheus; or the "
    "prometheus binary of a release from prometheus.io), or set observe.enabled: false",
}


@dataclass(frozen=True)
class Pythons:
    """The interpreters the services run with: engines, LMCache servers and the benchmark
    (the stack's engine lock), and the router (images/locks/router.txt)."""

    engine: Path
    router: Path

    def of(self, service: ProcessService) -> Path:
        return self.for_interpreter(service.interpreter)

    def for_interpreter(self, interpreter: Interpreter) -> Path:
        return self.router if interpreter == "router" else self.engine


@dataclass(frozen=True)
class Images:
    """Each interpreter's container image, where the services run in containers (pyxis under
    Slurm): their Pythons are then the images' own, a name on the image's PATH or a path in
    it, and so are the tools beside them."""

    engine: str
    router: str

    def of(self, service: ProcessService) -> str:
        return self.for_interpreter(service.interpreter)

    def for_interpreter(self, interpreter: Interpreter) -> str:
        return self.router if interpreter == "router" else self.engine


@dataclass(frozen=True)
class ServiceCommands:
    """The commands and environments of one host's services."""

    plan: ProcessProject
    root: Path
    pythons: Pythons
    isolation: Isolation
    state_dir: Path
    pins_cores: bool = True  # taskset from the plan's core ids (False: the launcher binds)
    images: Images | None = None  # None: the services run from Pythons on this filesystem

    def image_of(self, service: ProcessService) -> str | None:
        return self.images.of(service) if self.images else None

    def definition(self, service: ProcessService) -> str:
        """A digest of what the service runs: its plan entry and the files it is given (its
        configs; secrets left out, their values are not ours to keep, even hashed)."""
        digest = hashlib.sha256(repr(service).encode())
        for target, source in sorted(service.paths.items()):
            path = self.root / source if source is not None else None
            if path is None or target.startswith(SECRETS_DIR) or not path.is_file():
                continue
            found = path.stat()  # a large bound file (a model) by its size and time
            small = found.st_size <= _DIGESTED_FILE_MAX_BYTES
            digest.update(
                path.read_bytes() if small else f"{found.st_size} {found.st_mtime_ns}".encode()
            )
        return digest.hexdigest()[:16]

    def argv(self, service: ProcessService, command: Sequence[str]) -> list[str]:
        argv = [*self.executable(service, command[0]), *command[1:]]
        if service.cpus and self.pins_cores:
            argv = ["taskset", "-c", ",".join(map(str, service.cpus)), *argv]
        if self.isolation is Isolation.CONTAINER and service.gpus:
            pid = PidNamespace.HOST if service.host_pid else PidNamespace.PRIVATE
            argv = view_command(ContainerView(gpus=service.gpus, pid=pid), argv)
        if service.max_restarts or service.page_port is not None:
            # No runtime policy restarts a process: its supervisor does, and says so in its log
            # (a node of an engine over several hosts has one in any case: it serves its page).
            supervisor = [*self.executable(service, "python3"), SUPERVISOR]
            watch = watch_options(service.registered_at, service.restarts_with, service.ends_with)
            alone = alone_options(service.starts_alone_on, service.started_when)
            page = page_options(service.page_port)
            policy = ["--restarts", str(service.max_restarts), *watch, *alone, *page]
            argv = [*supervisor, *policy, service.name, "--", *argv]
        return argv

    def executable(self, service: ProcessService, name: str) -> list[str]:
        """``python3`` is the service's Python; other tools (lmcache, vllm, vllm-router) are
        the ones installed beside it, as in the image's venv."""
        python = self.pythons.of(service)
        if name in ("python", "python3"):
            return [str(python)]
        if self.images is not None:
            return [name]  # on the image's PATH, which is not ours to look at
        beside = python.parent / name
        if beside.is_file():
            return [str(beside)]
        found = shutil.which(name)
        if found is None:
            raise StackError(
                f"{service.name} runs {name}, found neither beside {python} nor on PATH",
                hint=_NOT_FROM_THE_LOCK.get(
                    name, "install the stack's lock into that Python (python -m generator env)"
                ),
            )
        return [found]

    def environment(self, service: ProcessService) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in _DROPPED_ENV}
        if self.images is None:  # an image's PATH leads to its own Python
            env["PATH"] = f"{self.pythons.of(service).parent}{os.pathsep}{env.get('PATH', '')}"
        env |= service.env
        env["XPYD_SERVICE"] = service.name  # its checks' steps are named after it too
        if service.interpreter == "router":
            env["PYTHONPATH"] = str(self.root)  # the router image's /opt/xpyd/generator
        env |= self.secret_env(service) | _passed_env(service)
        # Its supervisor keeps the command's PID record here, where `bench --fault` reads it.
        env[PID_FILE_ENV] = str(self.state_dir / f"{service.name}.pid")
        if service.starts_alone_on:  # over the plan's folder for it: every stack's, as compose's
            env[LOCK_DIR_ENV] = str(self.state_dir.parent)
        if self.isolation is Isolation.PLAIN and service.gpus and "CUDA_VISIBLE_DEVICES" in env:
            env["CUDA_VISIBLE_DEVICES"] = _host_gpu_ids(env["CUDA_VISIBLE_DEVICES"], service.gpus)
        return env

    def secret_env(self, service: ProcessService) -> dict[str, str]:
        """A secret from an environment variable is passed on from the caller's environment at
        start (compose reads it the same way); a file secret is its path (in the path table)."""
        secrets: dict[str, Secret] = {s.name: s for s in self.plan.secrets}
        env = {}
        for name in service.secrets:
            secret = secrets[name]
            if secret.source != "env":
                continue
            if secret.value not in os.environ:
                raise StackError(
                    f"{service.name} needs the secret {name} from ${secret.value}, "
                    "which is not set",
                    hint=f"export {secret.value}=... in the shell that runs up",
                )
            env["HF_TOKEN"] = os.environ[secret.value]
        return env


def _host_gpu_ids(positions: str, visible: tuple[int, ...]) -> str:
    """CUDA_VISIBLE_DEVICES counts among the GPUs a container sees; a plain process sees
    them all, so the positions become host ids (PCI bus order, CUDA_DEVICE_ORDER)."""
    return ",".join(str(visible[int(position)]) for position in positions.split(",") if position)


def _passed_env(service: ProcessService) -> dict[str, str]:
    """``<role>.secret_env``: from the caller's environment, as compose's ``${NAME:?}``."""
    missing = [name for name in service.passed_env if name not in os.environ]
    if missing:
        raise StackError(
            f"{service.name} takes {', '.join(missing)} from the environment, which is not set",
            hint=f"export {'=... '.join(missing)}=... in the shell that runs up",
        )
    return {name: os.environ[name] for name in service.passed_env}
