"""The process runtime: one host's services (a ``ProcessProject``) as local processes.

Each service runs in its own process group (a session), from the workspace root, with its
rendered command and environment, the host paths behind its container paths, its cores pinned
with ``taskset`` and, under ``isolation: container``, inside the view its container would have
(doctor's ``unshare`` view: only its GPUs' device nodes, its PID namespace). A small ``sh``
parent records the exit status, so a process that died is seen as "exited (code N)" from any
shell. Everything about a running project lives in its state folder (``.cache/process/<project>/``:
``state.json`` with what proves each group the service's (``process_state``), one log per
service, its supervisor's PID record, exit status and restart count), so ``status``, ``logs``
and ``down`` work from another shell; ``down`` ends whole groups (SIGTERM, then SIGKILL after
the service's grace period, 5 s for one this stack started that never passed its health check:
nothing of it is in flight), leaves nothing running and removes every file that named a
process. Nothing in the state folder is written, replaced or removed through a link
(``generator/owned.py``), and what is read back is bounded: ``status`` reads a log's tail.

Health is the container's own check (``python3 -c ...`` probing the service's ports), run with
the service's Python at most every ``HEALTH_EVERY_S``.
"""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from generator.errors import StackError, XpydError
from generator.owned import (
    append_descriptor,
    owned_dir,
    read_bounded,
    read_from,
    read_tail,
    remove_file,
    remove_tree,
    write_text,
)
from generator.runtimes.base import ServiceState
from generator.runtimes.groups import (
    alive,
    cpu_seconds,
    create_time,
    group_of,
    listening,
)
from generator.runtimes.launchers import LOCAL, Launcher
from generator.runtimes.process_commands import Images, Pythons, ServiceCommands
from generator.runtimes.process_state import (
    MARKER_ENV,
    STATE_FILE,
    ServiceEntry,
    StackState,
    new_marker,
    plan_digest,
    read_state,
    write_state,
)
from generator.serializers.process import (
    Interpreter,
    ProcessProject,
    ProcessService,
    map_path,
)
from generator.serializers.process_file import load_process_project
from generator.services.observe import PROMETHEUS_DATA
from generator.spec import Isolation
from generator.supervise import IN_IMAGE as SUPERVISOR_IN_IMAGE
from generator.supervise import STOPPING_FILE, last_said
from generator.supervise import __file__ as SUPERVISOR  # standard library only: any Python

__all__ = [
    "HEALTH_EVERY_S",
    "Images",
    "ProcessOneOff",
    "ProcessStack",
    "Pythons",
    "rendered_process_stack",
]

HEALTH_EVERY_S = 5.0
_HEALTH_TIMEOUT_S = 10.0
_MAX_GRACE_S = 30.0
# A service this stack started that never passed its health check has no request to finish:
# vLLM, mid-start, lets a SIGTERM wait (measured on cpu: the whole 30 s grace of a Ctrl+C).
_UNSERVED_GRACE_S = 5.0
_DIGESTED_FILE_MAX_BYTES = 1 << 20  # configs are small; a larger file is read by size and time
_EXECUTE_TIMEOUT_S = 60.0
# The caller's Python environment must not leak into the services' own, nor a marker of its own.
_DROPPED_ENV = (
    "VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "__PYVENV_LAUNCHER__", MARKER_ENV
)  # fmt: skip
# What an image holds and a process finds elsewhere, for commands run beside a service (the
# supervisor's --signal mode, which `bench --fault` sends).
_RUNTIME_PATHS: dict[str, str | None] = {SUPERVISOR_IN_IMAGE: SUPERVISOR}
# Runs the service as its child and keeps its exit status (a process group's leader that ends
# is reaped by whoever started it, which may be gone: the file outlives both). The file is
# removed first and then made anew (noclobber), never written through a link put there.
_KEEP_STATUS = (
    '"$@"; status=$?; rm -f "$XPYD_EXIT_FILE"; (set -C; echo "$status" > "$XPYD_EXIT_FILE"); '
    'exit "$status"'
)
# A one-off run's leader: a shell that stays (the group's leader carries the marker).
_ONEOFF_LEADER = '"$@"; exit "$?"'
_LOG_TAIL_BYTES = 1 << 20  # what status and the waits read of a log
_LOGS_MAX_BYTES = 64 << 20  # what `logs` prints of one, from its end
_SMALL_FILE_BYTES = 4096  # exit status, restart count
# Every file of a service in its state folder that names or describes its process.
_SERVICE_FILES = (".pid", ".exit", ".restarts")


class ProcessStack:
    """One host's services as processes (meets ``ServiceRuntime``)."""

    def __init__(
        self,
        project: ProcessProject,
        root: Path,
        pythons: Pythons,
        *,
        isolation: Isolation = Isolation.PLAIN,
        launcher: Launcher = LOCAL,
        images: Images | None = None,
    ) -> None:
        self._plan = project
        self.root = root
        self.pythons = pythons
        self.isolation = isolation
        self.launcher = launcher
        self.state_dir = root / project.state
        self.commands = ServiceCommands(
            project, root, pythons, isolation, self.state_dir, launcher.pins_cores, images
        )
        self._health: dict[str, tuple[float, bool, int]] = {}  # when, healthy, at restarts
        self._unserved: set[str] = set()  # started here, health not yet passed since

    @property
    def project(self) -> str:
        return self._plan.name

    @property
    def logs_dir(self) -> Path:
        return self.state_dir / "logs"

    # --- state on disk ----------------------------------------------------------------

    def _state(self) -> StackState:
        found = read_state(self.state_dir, self.project)
        return found or StackState(plan=plan_digest(self._plan.text))

    def _save(self, state: StackState) -> None:
        owned_dir(self.root, self._plan.state)
        write_state(self.root, self.state_dir, state)

    def _file(self, name: str, suffix: str) -> Path:
        return self.state_dir / f"{name}{suffix}"

    # --- starting -----------------------------------------------------------------------

    def up(self, services: list[str]) -> None:
        """Starts what is not running, and again what runs by another definition than the
        plan's now (as compose recreates a changed service: a `--set` on the router, its
        config file's content)."""
        state = self._state().model_copy(update={"plan": plan_digest(self._plan.text)})
        for name in services:
            service = self._plan.service(name)
            entry = state.services.get(name)
            if entry is not None and alive(entry):
                if entry.definition == self.commands.definition(service):
                    continue
                self.launcher.stop(name, entry, _grace_s(self._plan, name))
                self._health.pop(name, None)
            state = state.with_service(name, self._start(service))
            self._save(state)
        self._save(state)

    def restart(self, services: list[str]) -> None:
        state = self._state()
        for name in services:
            if (entry := state.services.get(name)) is not None:
                self.launcher.stop(name, entry, _grace_s(self._plan, name))
            self._health.pop(name, None)
            state = state.with_service(name, self._start(self._plan.service(name)))
            self._save(state)

    def _start(self, service: ProcessService) -> ServiceEntry:
        owned_dir(self.root, self._plan.state / "logs")
        remove_file(self.root, self.state_dir / STOPPING_FILE)  # a down cut short left it
        for suffix in _SERVICE_FILES:  # a link planted there goes, unfollowed
            remove_file(self.root, self._file(service.name, suffix))
        marker = new_marker()
        env = self.commands.environment(service) | {
            "XPYD_EXIT_FILE": str(self._file(service.name, ".exit")),
            "XPYD_RESTARTS_FILE": str(self._file(service.name, ".restarts")),
            "XPYD_SERVICE": service.name,
            MARKER_ENV: marker,
        }
        argv = ["/bin/sh", "-c", _KEEP_STATUS, "xpyd-service"]
        argv += self.commands.argv(service, service.command)
        log = append_descriptor(self.root, self.logs_dir / f"{service.name}.log")
        try:
            pid = self.launcher.start(
                argv, env, self.root, log, image=self.commands.image_of(service)
            )
        finally:
            os.close(log)
        started = create_time(pid)  # our child: it stays (a zombie at worst) until reaped
        if started is None:
            raise StackError(f"{service.name} vanished as it started (pid {pid})")
        if service.health:
            self._unserved.add(service.name)
        return ServiceEntry(
            pid=pid, started=started, marker=marker, definition=self.commands.definition(service)
        )

    # --- watching -----------------------------------------------------------------------

    def ps(self, *, max_age_s: float = 0.0) -> list[ServiceState]:
        del max_age_s  # reading /proc is cheap; health checks have their own pace
        state = self._state()
        self._refuse_another_plan(state)
        return [self._service_state(name, entry) for name, entry in sorted(state.services.items())]

    def _refuse_another_plan(self, state: StackState) -> None:
        """Health checks are commands from the plan: only the plan `up` started from runs."""
        if state.services and state.plan != plan_digest(self._plan.text):
            raise XpydError(
                f"{self._plan.plan_file} changed since up started {self.project}'s services: "
                "status runs no health check of a plan that started nothing",
                hint="up the stack again (it replaces what changed), or down it",
            )

    def _service_state(self, name: str, entry: ServiceEntry) -> ServiceState:
        running = alive(entry)
        restarts = self._restarts_of(name)
        health = self._health_of(name, restarts) if running and not entry.oneoff else None
        last_exit = self._last_exit(name, running=running) if restarts or not running else None
        return ServiceState(
            name,
            f"pid {entry.pid}",
            "running" if running else "exited",
            health,
            None if running else self._exit_code(name),
            listening(entry) if running and self.launcher.local else (),
            restarts=restarts,
            last_exit=last_exit,
            started_at=self._command_started(name, entry) if running else None,
        )

    def _command_started(self, name: str, entry: ServiceEntry) -> float:
        """When its command last started: its supervisor's start, or the last restart's (the
        supervisor writes the count as it starts the command again; it outlives each run, as
        a container does not). The fault drill asks whether a peer started anew since."""
        with contextlib.suppress(OSError):
            written = os.stat(self._file(name, ".restarts"), follow_symlinks=False)
            if stat.S_ISREG(written.st_mode) and written.st_mtime > entry.started:
                return written.st_mtime
        return entry.started

    def _small_file(self, name: str, suffix: str) -> str:
        with contextlib.suppress(ValueError):
            return read_bounded(self._file(name, suffix), max_bytes=_SMALL_FILE_BYTES) or ""
        return ""  # damaged: says nothing

    def _exit_code(self, name: str) -> int | None:
        """The status its shell wrote (none: ended by a signal, or by down)."""
        text = self._small_file(name, ".exit").strip()
        return int(text) if text.isascii() and text.isdigit() and int(text) <= 255 else None

    def _restarts_of(self, name: str) -> int:
        count = self._small_file(name, ".restarts").splitlines()[:1]
        valid = count and count[0].isascii() and count[0].isdigit() and len(count[0]) < 6
        return int(count[0]) if valid else 0

    def _last_exit(self, name: str, *, running: bool) -> str | None:
        """Why its command last ended, as its supervisor said: written beside the restart
        count while it runs, or (the supervisor itself gone) its last line in the log."""
        if running and (why := self._small_file(name, ".restarts").splitlines()[1:2]):
            return why[0][:500]
        return last_said(self.logs(name, tail=200))

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
            self._unserved.discard(name)
            return "healthy"
        return "starting"  # the waits bound how long "starting" may last

    def _check_health(self, service: ProcessService) -> bool:
        argv = [*self.commands.executable(service, service.health[0]), *service.health[1:]]
        try:
            done = self.launcher.run(
                argv,
                self.commands.environment(service),
                self.root,
                timeout_s=_HEALTH_TIMEOUT_S,
                image=self.commands.image_of(service),
            )
        except subprocess.TimeoutExpired:
            return False
        return done.returncode == 0

    def _log_names(self) -> list[str]:
        """The services and one-off runs this project has logs of: the plan's and the
        state's (never a folder listing: the folder may hold anything)."""
        names = {service.name for service in self._plan.services}
        with contextlib.suppress(XpydError):
            names |= set(self._state().services)
        return sorted(name for name in names if (self.logs_dir / f"{name}.log").is_file())

    def logs(self, service: str | None = None, *, tail: int | None = None) -> str:
        names = [service] if service else self._log_names()
        parts = []
        for name in names:
            path = self.logs_dir / f"{name}.log"
            text, skipped = read_tail(path, max_bytes=_LOG_TAIL_BYTES if tail else _LOGS_MAX_BYTES)
            lines = text.splitlines()[-tail:] if tail else text.splitlines()
            if skipped and not tail:
                lines.insert(0, f"(its first {skipped} bytes are left out: see {path})")
            parts += lines if service else [f"{name} | {line}" for line in lines]
        return "\n".join(parts) + ("\n" if parts else "")

    def follow_logs(self, service: str | None, on_line: Callable[[str], None]) -> None:
        """Print new lines as they come (Ctrl+C ends it), like `docker compose logs -f`,
        from the last ``_LOG_TAIL_BYTES`` of each log on."""
        positions: dict[str, int] = {}
        while True:
            for name in [service] if service else self._log_names():
                path = self.logs_dir / f"{name}.log"
                start = positions.get(name)
                text, positions[name] = read_from(path, start, max_bytes=_LOG_TAIL_BYTES)
                for line in text.splitlines():
                    on_line(line if service else f"{name} | {line}")
            time.sleep(0.5)

    def cpu_percentages(self) -> dict[str, float]:
        if not self.launcher.local:
            return {}  # the services run elsewhere: nothing here to measure
        entries = self._state().services
        groups = {name: group_of(entry) for name, entry in entries.items() if alive(entry)}
        before = {name: cpu_seconds(members) for name, members in groups.items()}
        started = time.monotonic()
        time.sleep(1.0)
        elapsed = time.monotonic() - started
        return {
            name: 100.0 * (cpu_seconds(members) - before[name]) / elapsed
            for name, members in groups.items()
        }

    # --- running other commands -------------------------------------------------------

    def ask_python(
        self, interpreter: Interpreter, code: str, timeout_s: float
    ) -> subprocess.CompletedProcess[str]:
        """``code`` run by the Python of ``interpreter``'s services, where they run: through
        the launcher, in their image where they have one (the Pythons check of `up`)."""
        python = self.pythons.for_interpreter(interpreter)
        images = self.commands.images
        image = images.for_interpreter(interpreter) if images else None
        env = {k: v for k, v in os.environ.items() if k not in _DROPPED_ENV}
        return self.launcher.run(
            [str(python), "-c", code], env, self.root, timeout_s=timeout_s, image=image
        )

    def execute(self, service: str, command: list[str]) -> str:
        definition = self._plan.service(service)
        paths = definition.paths | _RUNTIME_PATHS
        mapped = [map_path(part, paths, what="the command") for part in command]
        argv = [*self.commands.executable(definition, mapped[0]), *mapped[1:]]
        done = self.launcher.run(
            argv,
            self.commands.environment(definition),
            self.root,
            timeout_s=_EXECUTE_TIMEOUT_S,
            image=self.commands.image_of(definition),
        )
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
        out, err = self.logs_dir / f"{name}.out", self.logs_dir / f"{name}.err"
        for path in (out, err):
            remove_file(self.root, path)
        marker = new_marker()
        argv = ["/bin/sh", "-c", _ONEOFF_LEADER, "xpyd-oneoff"]
        argv += self.commands.argv(definition, mapped)
        environment = self.commands.environment(definition) | env | {MARKER_ENV: marker}
        stdout = append_descriptor(self.root, out)
        stderr = append_descriptor(self.root, err)
        try:
            process = self.launcher.spawn(
                argv,
                environment,
                self.root,
                stdout=stdout,
                stderr=stderr,
                image=self.commands.image_of(definition),
            )
        finally:
            os.close(stdout)
            os.close(stderr)
        started = create_time(process.pid)
        assert started is not None  # our child, not yet waited for: it is there
        entry = ServiceEntry(pid=process.pid, started=started, marker=marker, oneoff=True)
        self._save(self._state().with_service(name, entry))
        return ProcessOneOff(self, name, process, out, err)

    def remove_oneoff(self, name: str) -> None:
        state = self._state()
        if (entry := state.services.get(name)) is not None:
            self.launcher.stop(name, entry, 5.0)
            self._save(state.without(name))

    # --- stopping -----------------------------------------------------------------------

    def down(self, *, volumes: bool = False) -> None:
        """Ends every process the state proves its own (the plan may have changed since:
        the state alone says what runs), then removes the files that named them."""
        state = read_state(self.state_dir, self.project)
        running = state.services if state else {}
        order = [s.name for s in self._plan.services if s.name in running]
        if running:  # a GPU peer stopped first is no crash to the services that map it
            write_text(self.root, self.state_dir / STOPPING_FILE, "down\n")
        for name in [*sorted(set(running) - set(order)), *reversed(order)]:
            grace_s = _grace_s(self._plan, name)
            if name in self._unserved:
                grace_s = min(grace_s, _UNSERVED_GRACE_S)
            self.launcher.stop(name, running[name], grace_s)
        self._health.clear()
        self._unserved.clear()
        remove_file(self.root, self.state_dir / STOPPING_FILE)
        names = {*running, *(s.name for s in self._plan.services)}
        for name in sorted(names):
            for suffix in _SERVICE_FILES:
                remove_file(self.root, self._file(name, suffix))
        remove_file(self.root, self.state_dir / STATE_FILE)
        # Prometheus's series end with the stack, as a container's anonymous volume does.
        remove_tree(self.root, self._plan.state / PROMETHEUS_DATA)
        if volumes:
            for folder in ("vllm-cache", "model-cache"):
                remove_tree(self.root, self._plan.state / folder)


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


def rendered_process_stack(
    plan_file: Path,
    root: Path,
    pythons: Pythons,
    isolation: Isolation,
    *,
    launcher: Launcher = LOCAL,
    images: Images | None = None,
) -> ProcessStack:
    """A rendered host's processes as `up` left them (from another shell): its plan file read
    back, and the Pythons, isolation and images its rendered plan names."""
    project = load_process_project(plan_file, root)
    return ProcessStack(
        project, root, pythons, isolation=isolation, launcher=launcher, images=images
    )


def _text(path: Path) -> str:
    return read_tail(path, max_bytes=_LOG_TAIL_BYTES)[0]


def _grace_s(plan: ProcessProject, name: str) -> float:
    with contextlib.suppress(StopIteration):
        return min(float(plan.service(name).stop_grace_s), _MAX_GRACE_S)
    return 5.0  # a one-off, or a service of an edited plan
