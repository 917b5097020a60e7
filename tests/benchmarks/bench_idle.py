"""Benchmark: CPU that an idle stack burns, per container (or service), in % of one core.

A stack with no requests in flight should be quiet: a laptop or a CI runner with 2 cores
shares them with everything else. This samples each container's cgroup CPU counter (cgroup
v1 ``cpuacct.usage`` or v2 ``cpu.stat``, read on the host: exact, unlike `docker stats`'
one-second snapshot) over a window after the stack has settled, and the busiest threads
(``/proc/<tid>/stat``) so a regression names its thread.

Under the process runtime (``--project``: a GPU host without Docker) a service is every
process carrying the marker `up` gave it (``XPYD_OWNER`` in its environment, read from the
project's state file): the supervisor, vLLM's API server and its engine core. Only read,
never signalled.

Run: python tests/benchmarks/bench_idle.py [STACK] [--up] [--window-s 45] [--settle-s 30]
     python tests/benchmarks/bench_idle.py --project xpyd-xpyd-1gpu [--window-s 45] ...
  STACK defaults to cpu-1p1d; its containers must be running, or pass --up to bring the
  stack up first (`python -m generator up`) and down afterwards. --project: a running
  process-runtime project (its folder under .cache/process/). Needs root (reads /proc).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

ROOT = Path(__file__).resolve().parents[2]
CGROUP = Path("/sys/fs/cgroup")
NS_PER_S = 1e9
TICKS_PER_S = os.sysconf("SC_CLK_TCK")


class Group(Protocol):
    """What is sampled: a name, its CPU time so far and its threads now."""

    @property
    def name(self) -> str: ...

    def usage_ns(self) -> int: ...

    def thread_ids(self) -> list[int]: ...


@dataclass(frozen=True)
class Container:
    name: str
    cgroup_dir: Path  # where its CPU counter and its thread list live
    unified: bool  # cgroup v2

    def usage_ns(self) -> int:
        if not self.unified:
            return int((self.cgroup_dir / "cpuacct.usage").read_text())
        for line in (self.cgroup_dir / "cpu.stat").read_text().splitlines():
            key, value = line.split()
            if key == "usage_usec":
                return int(value) * 1000
        raise RuntimeError(f"no usage_usec in {self.cgroup_dir}/cpu.stat")

    def thread_ids(self) -> list[int]:
        if self.unified:  # v2 lists processes only; their threads are under /proc
            pids = (self.cgroup_dir / "cgroup.procs").read_text().split()
            return [int(t.name) for p in pids for t in Path(f"/proc/{p}/task").glob("*")]
        return [int(tid) for tid in (self.cgroup_dir / "tasks").read_text().split()]


@dataclass(frozen=True)
class ProcessService:
    """A process-runtime service: the processes whose environment carries its marker."""

    name: str
    marker: bytes  # b"XPYD_OWNER=<token>"

    def pids(self) -> list[int]:
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                environ = (entry / "environ").read_bytes()
            except OSError:  # gone, or a kernel thread
                continue
            if self.marker in environ.split(b"\0"):
                found.append(int(entry.name))
        return found

    def usage_ns(self) -> int:
        ticks = 0
        for pid in self.pids():
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
            except OSError:
                continue
            ticks += cpu_ticks(stat)  # a process's: every thread's, ended ones too
        return int(ticks * NS_PER_S / TICKS_PER_S)

    def thread_ids(self) -> list[int]:
        return [int(t.name) for p in self.pids() for t in Path(f"/proc/{p}/task").glob("*")]


def project_services(project: str) -> list[ProcessService]:
    sys.path.insert(0, str(ROOT))
    from generator.runtimes.process_state import MARKER_ENV, read_state

    folder = ROOT / ".cache" / "process" / project
    state = read_state(folder, project)
    if state is None:
        sys.exit(f"no state of project {project} in {folder}: is it up?")
    return [
        ProcessService(name, f"{MARKER_ENV}={entry.marker}".encode())
        for name, entry in sorted(state.services.items())
        if not entry.oneoff
    ]


def docker_lines(*args: str) -> list[str]:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, check=True)
    return done.stdout.split()


def stack_containers(stack: str) -> list[Container]:
    names = docker_lines(
        "ps", "--filter", f"label=org.xpyd.stack={stack}", "--format", "{{.Names}}"
    )
    return [container_of(name) for name in sorted(names)]


def container_of(name: str) -> Container:
    pid = docker_lines("inspect", "--format", "{{.State.Pid}}", name)[0]
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpuacct" in controllers.split(","):
            return Container(name, cgroup_v1_dir(path), unified=False)
        if controllers == "":
            return Container(name, CGROUP / path.lstrip("/"), unified=True)
    raise RuntimeError(f"{name}: no CPU accounting cgroup in /proc/{pid}/cgroup")


def cgroup_v1_dir(path: str) -> Path:
    for mount in ("cpuacct", "cpu,cpuacct", "cpuacct,cpu"):
        if (CGROUP / mount).is_dir():
            return CGROUP / mount / path.lstrip("/")
    raise RuntimeError(f"no cpuacct hierarchy under {CGROUP}")


def cpu_ticks(stat: str) -> int:
    """utime + stime of a /proc stat line (the fields after the command, which may hold
    spaces and parentheses, so counted from its last ')')."""
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[11]) + int(fields[12])


def thread_ticks(tids: list[int]) -> dict[tuple[int, str], int]:
    """utime + stime of each thread, keyed by (tid, 'process/thread' names)."""
    ticks = {}
    for tid in tids:
        try:
            tgid = Path(f"/proc/{tid}/status").read_text().split("Tgid:")[1].split()[0]
            # /proc/<tid>/stat would be the whole process's; the task entry is the thread's
            stat = Path(f"/proc/{tgid}/task/{tid}/stat").read_text()
            process = Path(f"/proc/{tgid}/comm").read_text().strip()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue  # a thread that ended between listing and reading
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        ticks[(tid, f"{process}/{comm}")] = cpu_ticks(stat)
    return ticks


def sample(containers: Sequence[Group], window_s: float, top: int) -> None:
    start_ns = {c.name: c.usage_ns() for c in containers}
    start_ticks = {c.name: thread_ticks(c.thread_ids()) for c in containers}
    began = time.monotonic()
    time.sleep(window_s)
    elapsed_s = time.monotonic() - began
    total = 0.0
    print(f"{'container':<34} {'% of a core':>12}   busiest threads (% of a core)")
    for c in containers:
        percent = 100 * (c.usage_ns() - start_ns[c.name]) / NS_PER_S / elapsed_s
        total += percent
        end_ticks = thread_ticks(c.thread_ids())
        busy = sorted(
            ((end_ticks[k] - start_ticks[c.name].get(k, 0), k[1]) for k in end_ticks), reverse=True
        )
        threads = ", ".join(
            f"{name} {100 * t / TICKS_PER_S / elapsed_s:.1f}" for t, name in busy[:top] if t > 0
        )
        print(f"{c.name:<34} {percent:>12.1f}   {threads or '-'}")
    print(
        f"{'total':<34} {total:>12.1f}   over {elapsed_s:.0f} s, {os.cpu_count()} cores on this host"
    )


@contextmanager
def stack_up(stack: str, bring_up: bool) -> Iterator[None]:
    generator = [sys.executable, "-m", "generator"]
    if bring_up:
        subprocess.run([*generator, "up", stack], cwd=ROOT, check=True)
    try:
        yield
    finally:
        if bring_up:
            subprocess.run([*generator, "down", stack], cwd=ROOT, check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("stack", nargs="?", default="cpu-1p1d")
    parser.add_argument("--up", action="store_true", help="bring the stack up first, down after")
    parser.add_argument("--window-s", type=float, default=45.0, help="sampling window")
    parser.add_argument("--settle-s", type=float, default=30.0, help="idle time before sampling")
    parser.add_argument("--top", type=int, default=3, help="busiest threads shown per container")
    parser.add_argument("--project", help="a running process-runtime project instead of STACK")
    args = parser.parse_args()
    if args.project:
        services = project_services(args.project)
        print(
            f"{args.project}: {len(services)} services; settling {args.settle_s:.0f} s", flush=True
        )
        time.sleep(args.settle_s)
        sample(services, args.window_s, args.top)
        return
    with stack_up(args.stack, args.up):
        containers = stack_containers(args.stack)
        if not containers:
            sys.exit(f"no running container of stack {args.stack}: run `generator up` or pass --up")
        print(
            f"{args.stack}: {len(containers)} containers; settling {args.settle_s:.0f} s",
            flush=True,
        )
        time.sleep(args.settle_s)
        sample(containers, args.window_s, args.top)


if __name__ == "__main__":
    main()
