"""The process runtime: one host's services (a ``ProcessProject``) as local processes.

Each service runs in its own process group (a session), from the workspace root, with its
rendered command and environment, the host paths behind its container paths, its cores pinned
with ``taskset`` and, under ``isolation: container``, inside the view its container would have
(doctor's ``unshare`` view: only its GPUs' device nodes, its PID namespace). A small ``sh``
parent records the exit status, so a process that died is seen as "exited (code N)" from any
shell. Everything about a running project lives in its state folder (``.cache/process/<project>/``:
``state.json`` with each group's id and start time, one log per service), so ``status``,
``logs`` and ``down`` work from another shell; ``down`` ends whole groups (SIGTERM, then
SIGKILL after the service's grace period) and leaves nothing running.

Health is the container's own check (``python3 -c ...`` probing the service's ports), run with
the service's Python at most every ``HEALTH_EVERY_S``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from generator.errors import StackError, XpydError
from generator.runtimes.base import ServiceState
from generator.runtimes.groups import (
    alive,
    cpu_seconds,
    create_time,
    exit_code,
    group_of,
    listening,
    spawn,
    spawn_service,
    stop_group,
)
from generator.runtimes.isolation import ContainerView, PidNamespace, view_command
from generator.serializers.process import (
    SECRETS_DIR,
    ProcessProject,
    ProcessService,
    load_process_project,
    map_path,
)
from generator.services.model import Secret
from generator.spec import Isolation
from generator.supervise import IN_IMAGE as SUPERVISOR_IN_IMAGE
from generator.supervise import PID_FILE_ENV, last_said, watch_options
from generator.supervise import __file__ as SUPERVISOR  # standard library only: any Python

__all__ = ["HEALTH_EVERY_S", "ProcessOneOff", "ProcessStack", "Pythons", "rendered_process_stack"]

HEALTH_EVERY_S = 5.0
_HEALTH_TIMEOUT_S = 10.0
_MAX_GRACE_S = 30.0
_DIGESTED_FILE_MAX_BYTES = 1 << 20  # configs are small; a larger file is read by size and time
_EXECUTE_TIMEOUT_S = 60.0
# The caller's Python environment must not leak into the services' own.
_DROPPED_ENV = ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "__PYVENV_LAUNCHER__")
# What an image holds and a process finds elsewhere, for commands run beside a service (the
# supervisor's --signal mode, which `bench --fault` sends).
_RUNTIME_PATHS: dict[str, str | None] = {SUPERVISOR_IN_IMAGE: SUPERVISOR}
# Runs the service as its child and keeps its exit status (a process group's leader that ends
# is reaped by whoever started it, which may be gone: the file outlives both).
_KEEP_STATUS = '"$@"; status=$?; echo "$status" > "$XPYD_EXIT_FILE"; exit "$status"'


@dataclass(frozen=True)
class Pythons:
    """The interpreters the services run with: engines, LMCache servers and the benchmark
    (the stack's engine lock), and the router (images/locks/router.txt)."""

    engine: Path
    router: Path

    def of(self, service: ProcessService) -> Path:
        return self.router if service.interpreter == "router" else self.engine


class ProcessStack:
    """One host's services as processes (meets ``ServiceRuntime``)."""

    def __init__(
        self,
        project: ProcessProject,
        root: Path,
        pythons: Pythons,
        *,
        isolation: Isolation = Isolation.PLAIN,
    ) -> None:
        self._plan = project
        self.root = root
        self.pythons = pythons
        self.isolation = isolation
        self.state_dir = root / project.state
        self._health: dict[str, tuple[float, bool, int]] = {}  # when, healthy, at restarts

    @property
    def project(self) -> str:
        return self._plan.name

    @property
    def logs_dir(self) -> Path:
        return self.state_dir / "logs"

    # --- starting -----------------------------------------------------------------------

    def up(self, services: list[str]) -> None:
        """Starts what is not running, and again what runs by another definition than the
        plan's now (as compose recreates a changed service: a `--set` on the router, its
        config file's content)."""
        state = self._read_state()
        for name in services:
            service = self._plan.service(name)
            if name in state and alive(state[name]):
                definition = self._definition(service)
                if state[name].get("definition", definition) == definition:
                    continue  # (a state from before definitions were kept: left as it runs)
                stop_group(state[name], grace_s=min(_grace_s(self._plan, name), _MAX_GRACE_S))
                self._health.pop(name, None)
            state[name] = self._start(service)
            self._write_state(state)

    def restart(self, services: list[str]) -> None:
        state = self._read_state()
        for name in services:
            if name in state:
                stop_group(state[name], grace_s=min(_grace_s(self._plan, name), _MAX_GRACE_S))
            self._health.pop(name, None)
            state[name] = self._start(self._plan.service(name))
            self._write_state(state)

    def _start(self, service: ProcessService) -> dict[str, Any]:
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        exit_file = self.state_dir / f"{service.name}.exit"
        exit_file.unlink(missing_ok=True)
        restarts_file = self.state_dir / f"{service.name}.restarts"
        restarts_file.unlink(missing_ok=True)
        env = self._environment(service) | {
            "XPYD_EXIT_FILE": str(exit_file),
            "XPYD_RESTARTS_FILE": str(restarts_file),
        }
        argv = [
            "/bin/sh",
            "-c",
            _KEEP_STATUS,
            "xpyd-service",
            *self._argv(service, service.command),
        ]
        pid = spawn_service(argv, env, self.root, self.logs_dir / f"{service.name}.log")
        started = {"pid": pid, "started": create_time(pid), "exit_file": str(exit_file)}
        return started | {"definition": self._definition(service)}

    def _definition(self, service: ProcessService) -> str:
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

    def _argv(self, service: ProcessService, command: Sequence[str]) -> list[str]:
        argv = [*self._executable(service, command[0]), *command[1:]]
        if service.cpus:
            argv = ["taskset", "-c", ",".join(map(str, service.cpus)), *argv]
        if self.isolation is Isolation.CONTAINER and service.gpus:
            pid = PidNamespace.HOST if service.host_pid else PidNamespace.PRIVATE
            argv = view_command(ContainerView(gpus=service.gpus, pid=pid), argv)
        if service.max_restarts:
            # No runtime policy restarts a process: its supervisor does, and says so in its log.
            supervisor = [*self._executable(service, "python3"), SUPERVISOR]
            watch = watch_options(service.registered_at, service.restarts_with)
            policy = ["--restarts", str(service.max_restarts), *watch]
            argv = [*supervisor, *policy, service.name, "--", *argv]
        return argv

    def _executable(self, service: ProcessService, name: str) -> list[str]:
        """``python3`` is the service's Python; other tools (lmcache, vllm, vllm-router) are
        the ones installed beside it, as in the image's venv."""
        python = self.pythons.of(service)
        if name in ("python", "python3"):
            return [str(python)]
        beside = python.parent / name
        if beside.is_file():
            return [str(beside)]
        found = shutil.which(name)
        if found is None:
            raise StackError(
                f"{service.name} runs {name}, found neither beside {python} nor on PATH",
                hint="install the stack's lock into that Python (python -m generator env)",
            )
        return [found]

    def _environment(self, service: ProcessService) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in _DROPPED_ENV}
        env["PATH"] = f"{self.pythons.of(service).parent}{os.pathsep}{env.get('PATH', '')}"
        env |= service.env
        if service.interpreter == "router":
            env["PYTHONPATH"] = str(self.root)  # the router image's /opt/xpyd/generator
        env |= self._secret_env(service) | _passed_env(service)
        # Its supervisor keeps the command's PID here, where `bench --fault` reads it.
        env[PID_FILE_ENV] = str(self.state_dir / f"{service.name}.pid")
        if self.isolation is Isolation.PLAIN and service.gpus and "CUDA_VISIBLE_DEVICES" in env:
            env["CUDA_VISIBLE_DEVICES"] = _host_gpu_ids(env["CUDA_VISIBLE_DEVICES"], service.gpus)
        return env

    def _secret_env(self, service: ProcessService) -> dict[str, str]:
        """A secret from an environment variable is passed on from the caller's environment at
        start (compose reads it the same way); a file secret is its path (in the path table)."""
        secrets: dict[str, Secret] = {s.name: s for s in self._plan.secrets}
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

    # --- watching -----------------------------------------------------------------------

    def ps(self, *, max_age_s: float = 0.0) -> list[ServiceState]:
        del max_age_s  # reading /proc is cheap; health checks have their own pace
        states = []
        for name, entry in sorted(self._read_state().items()):
            running = alive(entry)
            code = None if running else exit_code(entry)
            restarts = self._restarts_of(name)
            health = self._health_of(name, restarts) if running else None
            status = "running" if running else "exited"
            ports = listening(entry) if running else ()
            started = entry.get("started") if running else None
            last_exit = self._last_exit(name, running=running) if restarts or not running else None
            states.append(
                ServiceState(
                    name,
                    f"pid {entry['pid']}",
                    status,
                    health,
                    code,
                    ports,
                    restarts=restarts,
                    last_exit=last_exit,
                    started_at=started,
                )
            )
        return states

    def _restarts_of(self, name: str) -> int:
        count = self._restarts_file(name)[:1]
        return int(count[0]) if count and count[0].isdigit() else 0

    def _last_exit(self, name: str, *, running: bool) -> str | None:
        """Why its command last ended, as its supervisor said: written beside the restart
        count while it runs, or (the supervisor itself gone) its last line in the log."""
        if running and (why := self._restarts_file(name)[1:2]):
            return why[0]
        return last_said(self.logs(name, tail=200))

    def _restarts_file(self, name: str) -> list[str]:
        return _text(self.state_dir / f"{name}.restarts").splitlines()

    def _health_of(self, name: str, restarts: int) -> str | None:
        """The last check's answer, at most ``HEALTH_EVERY_S`` old and never one about the
        command before its supervisor restarted it (Docker, too, starts a restarted
        container's health over)."""
        service = self._plan.service(name)
        if not service.health:
            return None
        checked = self._health.get(name)
        if (
            checked is None
            or time.monotonic() - checked[0] >= HEALTH_EVERY_S
            or checked[2] != restarts
        ):
            checked = (time.monotonic(), self._check_health(service), restarts)
            self._health[name] = checked
        if checked[1]:
            return "healthy"
        return "starting"  # the waits bound how long "starting" may last

    def _check_health(self, service: ProcessService) -> bool:
        argv = [*self._executable(service, service.health[0]), *service.health[1:]]
        try:
            done = subprocess.run(
                argv, env=self._environment(service), cwd=self.root, capture_output=True,
                timeout=_HEALTH_TIMEOUT_S, check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            return False
        return done.returncode == 0

    def logs(self, service: str | None = None, *, tail: int | None = None) -> str:
        names = [service] if service else sorted(self._log_names())
        parts = []
        for name in names:
            path = self.logs_dir / f"{name}.log"
            text = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
            lines = text.splitlines()[-tail:] if tail else text.splitlines()
            parts += lines if service else [f"{name} | {line}" for line in lines]
        return "\n".join(parts) + ("\n" if parts else "")

    def _log_names(self) -> list[str]:
        return [path.stem for path in self.logs_dir.glob("*.log")] if self.logs_dir.is_dir() else []

    def follow_logs(self, service: str | None, on_line: Callable[[str], None]) -> None:
        """Print new lines as they come (Ctrl+C ends it), like `docker compose logs -f`."""
        positions: dict[str, int] = {}
        while True:
            for name in [service] if service else sorted(self._log_names()):
                path = self.logs_dir / f"{name}.log"
                with contextlib.suppress(FileNotFoundError), path.open("rb") as log:
                    log.seek(positions.get(name, 0))
                    for line in log.read().decode(errors="replace").splitlines():
                        on_line(line if service else f"{name} | {line}")
                    positions[name] = log.tell()
            time.sleep(0.5)

    def cpu_percentages(self) -> dict[str, float]:
        groups = {
            name: group_of(entry) for name, entry in self._read_state().items() if alive(entry)
        }
        before = {name: cpu_seconds(members) for name, members in groups.items()}
        started = time.monotonic()
        time.sleep(1.0)
        elapsed = time.monotonic() - started
        return {
            name: 100.0 * (cpu_seconds(members) - before[name]) / elapsed
            for name, members in groups.items()
        }

    # --- running other commands -------------------------------------------------------

    def execute(self, service: str, command: list[str]) -> str:
        definition = self._plan.service(service)
        paths = definition.paths | _RUNTIME_PATHS
        mapped = [map_path(part, paths, what="the command") for part in command]
        argv = [*self._executable(definition, mapped[0]), *mapped[1:]]
        done = subprocess.run(
            argv, env=self._environment(definition), cwd=self.root, capture_output=True,
            text=True, timeout=_EXECUTE_TIMEOUT_S, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise StackError(
                f"a command for {service} failed (code {done.returncode}): {done.stderr[-500:]}"
            )
        return done.stdout

    def start_oneoff(
        self,
        service: str,
        command: list[str],
        *,
        name: str,
        env: dict[str, str],
        volumes: Sequence[tuple[Path, str]] = (),
    ) -> ProcessOneOff:
        definition = self._plan.service(service)
        # Its volumes (the benchmark's results folder) over the plan's paths, longest first.
        extra: dict[str, str | None] = {target: str(host) for host, target in volumes}
        merged = definition.paths | extra
        paths = dict(sorted(merged.items(), key=lambda item: -len(item[0])))
        mapped = [map_path(part, paths, what="the command") for part in command]
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        out = self.logs_dir / f"{name}.out"
        err = self.logs_dir / f"{name}.err"
        with out.open("wb") as stdout, err.open("wb") as stderr:
            process = spawn(
                self._argv(definition, mapped), self._environment(definition) | env, self.root,
                stdout=stdout, stderr=stderr,
            )  # fmt: skip
        state = self._read_state()
        state[name] = {"pid": process.pid, "started": create_time(process.pid), "oneoff": True}
        self._write_state(state)
        return ProcessOneOff(self, name, process, out, err)

    def remove_oneoff(self, name: str) -> None:
        state = self._read_state()
        entry = state.pop(name, None)
        if entry is not None:
            stop_group(entry, grace_s=5.0)
            self._write_state(state)

    # --- stopping -----------------------------------------------------------------------

    def down(self, *, volumes: bool = False) -> None:
        state = self._read_state()
        order = [s.name for s in self._plan.services if s.name in state]
        for name in [*sorted(set(state) - set(order)), *reversed(order)]:
            grace = min(_grace_s(self._plan, name), _MAX_GRACE_S)
            stop_group(state[name], grace_s=grace)
        (self.state_dir / "state.json").unlink(missing_ok=True)
        self._health.clear()
        if volumes:
            for folder in ("vllm-cache", "model-cache"):
                shutil.rmtree(self.state_dir / folder, ignore_errors=True)

    # --- state on disk ----------------------------------------------------------------

    def _read_state(self) -> dict[str, dict[str, Any]]:
        return dict(_read_state_file(self.state_dir / "state.json").get("services", {}))

    def _write_state(self, services: Mapping[str, dict[str, Any]]) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        path = self.state_dir / "state.json"
        document = {
            "pythons": {"engine": str(self.pythons.engine), "router": str(self.pythons.router)},
            "isolation": self.isolation.value,
            "services": dict(services),
        }
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps(document, indent=2), encoding="utf-8")
        temporary.replace(path)  # another shell never reads half a file


def rendered_process_stack(plan_file: Path, root: Path, fallback: Pythons) -> ProcessStack:
    """A rendered host's processes as `up` left them (from another shell): its plan file, and
    the Pythons and isolation its state recorded (``fallback`` where nothing runs)."""
    project = load_process_project(plan_file, root)
    state = _read_state_file(root / project.state / "state.json")
    pythons = fallback
    if "pythons" in state:
        pythons = Pythons(Path(state["pythons"]["engine"]), Path(state["pythons"]["router"]))
    isolation = Isolation(state.get("isolation", Isolation.PLAIN.value))
    return ProcessStack(project, root, pythons, isolation=isolation)


def _read_state_file(path: Path) -> dict[str, Any]:
    try:
        loaded: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise XpydError(
            f"{path} is not readable ({exc})",
            hint="stop its processes by hand (see its logs/), then remove the file",
        ) from exc
    return loaded


@dataclass
class ProcessOneOff:
    """A one-off process started by ``ProcessStack.start_oneoff``."""

    stack: ProcessStack
    name: str
    process: subprocess.Popen[bytes]
    stdout: Path
    stderr: Path

    def wait(self, timeout_s: float) -> int | None:
        try:
            return self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def output(self) -> tuple[str, str]:
        return _text(self.stdout), _text(self.stderr)

    def remove(self) -> None:
        self.stack.remove_oneoff(self.name)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=5)


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""


def _grace_s(plan: ProcessProject, name: str) -> float:
    with contextlib.suppress(StopIteration):
        return float(plan.service(name).stop_grace_s)
    return 5.0  # a one-off


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
