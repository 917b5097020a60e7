"""Benchmark: cpu-1p1d from `up` (images already built) to a verified smoke verdict, against
the same stack started as bare processes in the same run; and peak memory of each.

Targets (issue 3): Docker within 1.15x of bare processes and under 90 s; peak memory of the
running Docker stack under 7.5 GiB.

Run: python tests/benchmarks/bench_up.py   (needs the Docker engine and built images; the
first run makes .cache/bare-*/ venvs from images/wheelhouse, offline, ~2 min)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from python_on_whales import DockerClient  # noqa: E402, TID251 - a benchmark, not the product

from generator.paths import Workspace  # noqa: E402
from generator.plan import Plan  # noqa: E402
from generator.planner import make_plan  # noqa: E402
from generator.probes import Check, run_smoke, wait_until_ready  # noqa: E402
from generator.probes.http import read_here  # noqa: E402
from generator.probes.readiness import (  # noqa: E402
    engine_checks,
    routed_request,
    router_checks,
)
from generator.routers import router_of  # noqa: E402
from generator.services.commands import engine_command  # noqa: E402
from generator.services.parts import IN_PROCESS_WORKER_ENV  # noqa: E402
from generator.stack import load_spec  # noqa: E402
from generator.topologies import topology_of  # noqa: E402

STACK = "cpu-1p1d"
CACHE = ROOT / ".cache"
ENGINE_VENV, ROUTER_VENV, MODEL = CACHE / "bare-engine", CACHE / "bare-router", CACHE / "bare-model"
GIB = 1024**3


class PeakMemory:
    """Samples a total (bytes) every 0.5 s in a thread; keeps the peak."""

    def __init__(self, sample: Callable[[], int]) -> None:
        self.sample, self.peak, self._stop = sample, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            with suppress(Exception):  # a container or process may vanish between samples
                self.peak = max(self.peak, self.sample())
            self._stop.wait(0.5)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def docker_memory(client: DockerClient) -> Callable[[], int]:
    def sample() -> int:
        project = [
            c
            for c in client.container.list()
            if (c.config.labels or {}).get("org.xpyd.stack") == STACK
        ]
        return (
            sum(int(stats.memory_used) for stats in client.container.stats(project))
            if project
            else 0
        )

    return sample


def run_docker() -> tuple[float, int]:
    client = DockerClient()
    generator = [sys.executable, "-m", "generator"]
    subprocess.run([*generator, "down", STACK], check=True, capture_output=True)
    with PeakMemory(docker_memory(client)) as memory:
        run_id = f"bench-up-{int(time.time())}"
        started = time.time()
        command = [*generator, "up", STACK, "--run-id", run_id]
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        time.sleep(2)
    if result.returncode != 0:
        sys.exit(f"docker up failed:\n{result.stderr[-3000:]}")
    # Up to the verified verdict (the run then saves every service's log, which is bookkeeping).
    record = json.loads((ROOT / "runs" / run_id / "run.json").read_text())
    verdict_at = datetime.fromisoformat(record["tasks"]["smoke"]["ended_at"]).timestamp()
    elapsed = verdict_at - started
    subprocess.run([*generator, "down", STACK], check=True, capture_output=True)
    return elapsed, memory.peak


def prepare_bare() -> None:
    wheels = ROOT / "images/wheelhouse"
    for venv, lock in ((ENGINE_VENV, "engine-cpu.txt"), (ROUTER_VENV, "router.txt")):
        if not (venv / "bin/python").exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            pip = [
                str(venv / "bin/pip"),
                "install",
                "-q",
                "--no-index",
                "--no-deps",
                "--find-links",
                str(wheels),
            ]
            subprocess.run([*pip, "-r", str(ROOT / "images/locks" / lock)], check=True)
    alias = next((ENGINE_VENV / "lib").glob("python3*/site-packages")) / "vllm-0.32.0.dist-info"
    alias.mkdir(exist_ok=True)
    (alias / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0+cpu\n")
    # As in the cpu images: vLLM CPU's AMX attention needs the permission asked in each process.
    features = ROOT / "generator/cpu_features.py"
    subprocess.run([str(ENGINE_VENV / "bin/python"), str(features), "--install"], check=True)
    if not (MODEL / "config.json").exists():
        subprocess.run(
            [
                str(ENGINE_VENV / "bin/python"),
                str(ROOT / "images/assets/make_tiny_model.py"),
                str(MODEL),
            ],
            check=True,
        )


def local_plan() -> Plan:
    """cpu-1p1d as processes on this host: loopback addresses, the model from .cache/."""
    spec = load_spec(Workspace(ROOT).stack_file(STACK), [f"model.id={MODEL}"])
    plan = make_plan(spec)
    engines = {e.name: e.model_copy(update={"advertise_host": "127.0.0.1"}) for e in plan.engines}
    return plan.model_copy(
        update={
            "network": "host",
            "prefill": tuple(engines[e.name] for e in plan.prefill),
            "decode": tuple(engines[e.name] for e in plan.decode),
            "router": plan.router.model_copy(update={"advertise_host": "127.0.0.1"}),
        }
    )


def process_tree_rss(pids: list[int]) -> int:
    total, seen, stack = 0, set(), list(pids)
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            total += (
                int(
                    next(
                        line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")
                    )
                )
                * 1024
            )
            for task in Path(f"/proc/{pid}/task").iterdir():
                stack += [int(child) for child in (task / "children").read_text().split()]
        except (OSError, StopIteration):
            continue
    return total


@contextmanager
def bare_processes(
    plan: Plan,
) -> Iterator[Callable[[list[str], dict[str, str], str], subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    logs = CACHE / "bare-logs"
    logs.mkdir(exist_ok=True)

    def start(command: list[str], env: dict[str, str], name: str) -> subprocess.Popen[bytes]:
        log = (logs / f"{name}.log").open("wb")
        process = subprocess.Popen(
            command, env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT
        )
        started.append(process)
        return process

    try:
        yield start
    finally:
        for process in started:
            process.terminate()
        for process in started:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()


def run_bare() -> tuple[float, int]:
    plan = local_plan()
    bin_dir = ENGINE_VENV / "bin"
    base_env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "LMCACHE_TRACK_USAGE": "false",
        "PYTHONHASHSEED": "0",
        "HF_HUB_OFFLINE": "1",
        "VLLM_TARGET_DEVICE": "cpu",
    }
    pids: list[int] = []
    with bare_processes(plan) as start, PeakMemory(lambda: process_tree_rss(pids)) as memory:
        t0 = time.monotonic()
        noop = lambda: None  # noqa: E731
        engines = {engine.name: engine for engine in plan.engines}
        for sidecar in plan.sidecars:
            engine = engines[sidecar.engine] if sidecar.engine is not None else None
            command = topology_of(plan).sidecar_command(plan, engine, sidecar)
            pids.append(start(command, base_env, sidecar.service).pid)
        for sidecar in plan.sidecars:
            wait_until_ready(
                sidecar.service,
                [Check(f"http://127.0.0.1:{sidecar.health_port}{sidecar.health_path}")],
                deadline_s=120,
                assert_alive=noop,
                progress=print,
            )
        t_lmcache = time.monotonic() - t0
        for engine in plan.engines:
            env = {
                **base_env,
                "VLLM_CPU_OMP_THREADS_BIND": ",".join(map(str, engine.cpus)),
                **topology_of(plan).engine_env(plan, engine),
                **IN_PROCESS_WORKER_ENV,  # each worker in its engine core's process, as in the containers
                "VLLM_NIXL_SIDE_CHANNEL_HOST": "127.0.0.1",  # bare processes: all on loopback
                "UCX_NET_DEVICES": "all",
            }
            command = [
                "taskset",
                "-c",
                ",".join(map(str, engine.cpus)),
                *engine_command(plan, engine),
            ]
            pids.append(start(command, env, engine.name).pid)
        for engine in plan.engines:
            wait_until_ready(
                engine.name,
                engine_checks(plan, engine),
                deadline_s=300,
                assert_alive=noop,
                progress=print,
            )
        t_engines = time.monotonic() - t0
        router_env = {"PATH": f"{ROUTER_VENV / 'bin'}:{os.environ['PATH']}"}
        pids.append(start(router_of(plan).command(plan), router_env, "router").pid)
        wait_until_ready(
            "router",
            router_checks(plan),
            deadline_s=120,
            assert_alive=noop,
            progress=print,
        )
        routed_request(plan)
        t_router = time.monotonic() - t0
        result = run_smoke(plan, nonce=f"bare-{int(time.time())}", read_inside=read_here)
        elapsed = time.monotonic() - t0
        phases = (
            f"lmcache ready {t_lmcache:.1f} s, engines {t_engines:.1f} s, router {t_router:.1f} s"
        )
        print(f"bare: {phases}")
        time.sleep(2)
    if not result.passed:
        sys.exit(f"bare-process smoke failed: {[r for r in result.rows if r.passed is False]}")
    return elapsed, memory.peak


def main() -> int:
    prepare_bare()
    # Both sides compared warm: bare processes reuse ~/.cache/vllm on the host, the stack its
    # xpyd-vllm-cache volume (the first `up` on a machine fills it).
    first_s, _ = run_docker()
    docker_s, docker_peak = run_docker()
    bare_s, bare_peak = run_bare()
    print(f"docker first up (vLLM cache volume possibly cold): {first_s:.1f} s")
    ratio = docker_s / bare_s
    print(f"cpu-1p1d up -> verified smoke: docker {docker_s:.1f} s, bare processes {bare_s:.1f} s")
    print(f"  ratio {ratio:.2f} (target <= 1.15), docker {docker_s:.0f} s (target < 90 s)")
    print(f"peak memory: docker stack {docker_peak / GIB:.2f} GiB (target < 7.5)")
    print(f"  bare processes {bare_peak / GIB:.2f} GiB")
    ok = ratio <= 1.15 and docker_s < 90 and docker_peak < 7.5 * GIB
    print("targets:", "OK" if ok else "MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
