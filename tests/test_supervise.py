"""The supervisor that restarted services run under (generator/supervise.py), run for real as
a child process, as in the images: exits nobody asked for fail, asked-for stops keep their
code, signals reach the command."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from generator.supervise import (
    SOURCE,
    STOPPING_FILE,
    PidRecord,
    exit_code,
    last_said,
    pid_file,
    start_time,
    watch_options,
)

ROOT = Path(__file__).resolve().parents[1]
SUPERVISE = [sys.executable, str(ROOT / SOURCE), "decode-0", "--"]


def _wait_for(path: Path, within_s: float = 30.0) -> None:
    deadline = time.monotonic() + within_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def _first_line(path: Path, within_s: float = 30.0) -> str:
    """Once ``path`` holds a whole line (a shell's ``>>`` makes the file before it writes)."""
    deadline = time.monotonic() + within_s
    while not (path.exists() and "\n" in (text := path.read_text())):
        assert time.monotonic() < deadline, f"{path} never got a line"
        time.sleep(0.05)
    return text.splitlines()[0]


def test_an_exit_0_nobody_asked_for_is_a_failure() -> None:
    run = subprocess.run([*SUPERVISE, "true"], capture_output=True, text=True, check=False)
    assert run.returncode == 1
    assert "decode-0 exited with 0 without being asked to: reported as 1" in run.stderr


def test_a_failing_command_keeps_its_code() -> None:
    run = subprocess.run([*SUPERVISE, "sh", "-c", "exit 7"], capture_output=True, check=False)
    assert run.returncode == 7


def test_a_killed_command_exits_as_a_shell_would_say() -> None:
    run = subprocess.run(
        [*SUPERVISE, "sh", "-c", "kill -9 $$"], capture_output=True, text=True, check=False
    )
    assert run.returncode == 128 + 9
    assert "was killed by SIGKILL" in run.stderr


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_is_forwarded_and_its_exit_kept(signum: signal.Signals) -> None:
    # The command traps the signal and exits 0, as a server that shuts down cleanly does.
    service = f"stop-test-{time.monotonic_ns()}"
    child = subprocess.Popen(
        [sys.executable, str(ROOT / SOURCE), service, "--", "sh", "-c",
         "trap 'exit 0' TERM INT; echo trapped > \"$0\"; while :; do sleep 0.05; done",
         str(pid_file(service).with_suffix(".trapped"))],
        stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    # The supervisor's handlers are in place once it wrote the pid file, the command's trap
    # once it said so: a signal before then would be lost where the shell that started the
    # tests ignores SIGINT (a background job: measured, the test then hung).
    _wait_for(pid_file(service))
    _wait_for(pid_file(service).with_suffix(".trapped"))
    child.send_signal(signum)
    _, stderr = child.communicate(timeout=10)
    assert child.returncode == 0
    assert "after it was asked to stop" in stderr
    pid_file(service).with_suffix(".trapped").unlink()


def test_usage_is_refused() -> None:
    run = subprocess.run([*SUPERVISE[:-1], "true"], capture_output=True, text=True, check=False)
    assert run.returncode == 2
    assert "usage" in run.stderr


@pytest.mark.parametrize(
    ("returncode", "asked", "code"),
    [(0, False, 1), (0, True, 0), (3, False, 3), (-15, True, 143), (-9, False, 137)],
)
def test_exit_codes(returncode: int, asked: bool, code: int) -> None:
    assert exit_code(returncode, asked_to_stop=asked) == code


def _signal(service: str, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(ROOT / SOURCE), "--signal", *args[:1], service, *args[1:]]
    return subprocess.run(command, capture_output=True, text=True, check=False)


def test_the_signal_mode_crashes_the_command_not_the_supervisor() -> None:
    service = f"kill-test-{time.monotonic_ns()}"
    child = subprocess.Popen(
        [sys.executable, str(ROOT / SOURCE), service, "--", "sleep", "60"],
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(0.5)  # the pid file is written
    sent = _signal(service, "KILL")
    assert sent.returncode == 0, sent.stderr
    assert f"sent SIGKILL to {service}" in sent.stdout
    _, stderr = child.communicate(timeout=10)
    assert child.returncode == 137  # seen as a crash: the runtime restarts it
    assert f"{service} was killed by SIGKILL" in stderr


def test_the_signal_mode_stops_and_continues_the_whole_tree() -> None:
    service = f"stop-test-{time.monotonic_ns()}"
    # A command with a child of its own: both must stop.
    child = supervised_as(service, "sh", "-c", "sleep 60 & wait")
    time.sleep(0.5)
    sent = _signal(service, "STOP", "--tree")
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout.count("sent SIGSTOP") == 2  # sh and its sleep
    pids = [int(line.rsplit("pid ", 1)[1].rstrip(")")) for line in sent.stdout.splitlines()]
    assert all(_state(pid) == "T" for pid in pids)
    assert _signal(service, "CONT", "--tree").returncode == 0
    assert all(_state(pid) != "T" for pid in pids)
    assert _signal(service, "KILL", "--tree").returncode == 0
    child.communicate(timeout=10)
    assert child.returncode == 137


def test_the_signal_mode_can_stop_only_what_runs_under_the_command() -> None:
    """hang: a vLLM engine's core stops, its API server (the command) answers on."""
    service = f"hang-test-{time.monotonic_ns()}"
    child = supervised_as(service, "sh", "-c", "sleep 60 & wait")
    time.sleep(0.5)
    command = PidRecord.parse(pid_file(service).read_text(encoding="ascii")).pid
    sent = _signal(service, "STOP", "--under")
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout.count("sent SIGSTOP") == 1  # the sleep, not sh
    (stopped,) = [int(line.rsplit("pid ", 1)[1].rstrip(")")) for line in sent.stdout.splitlines()]
    assert stopped != command
    assert _state(stopped) == "T"
    assert _state(command) != "T"
    assert _signal(service, "CONT", "--under").returncode == 0
    assert _state(stopped) != "T"
    assert _signal(service, "KILL", "--tree").returncode == 0
    child.communicate(timeout=10)


def test_the_signal_mode_says_when_nothing_runs_under_the_command() -> None:
    service = f"alone-test-{time.monotonic_ns()}"
    child = supervised_as(service, "sleep", "60")
    time.sleep(0.5)
    sent = _signal(service, "STOP", "--under")
    assert sent.returncode == 1
    assert f"{service} runs no process under its command" in sent.stderr
    assert _signal(service, "KILL").returncode == 0
    child.communicate(timeout=10)


def test_the_signal_mode_says_when_there_is_no_such_service() -> None:
    sent = _signal("no-such-service-here", "KILL")
    assert sent.returncode == 1
    assert "no supervised no-such-service-here here" in sent.stderr


def supervised_as(service: str, *command: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(ROOT / SOURCE), service, "--", *command],
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def test_what_the_command_leaves_running_goes_with_it(tmp_path: Path) -> None:
    """vLLM's engine core outlives its killed API server (measured under the process
    runtime: the next start then failed on its NIXL port): the supervisor ends it."""
    left = tmp_path / "left.pid"
    command = f"sleep 300 >/dev/null 2>&1 & echo $! > {left}; exit 0"  # not on our pipes
    run = subprocess.run(
        [*SUPERVISE, "sh", "-c", command], capture_output=True, text=True, check=False
    )
    assert run.returncode == 1, run.stderr  # exited on its own: a failure
    orphan = int(left.read_text())
    deadline = time.monotonic() + 10
    while _gone_or_zombie(orphan) is False and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone_or_zombie(orphan), f"sleep {orphan} still runs"


def _gone_or_zombie(pid: int) -> bool:
    try:
        return _state(pid) == "Z"
    except FileNotFoundError:
        return True


def _state(pid: int) -> str:
    """The process's state letter from /proc (T: stopped)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0]


def test_with_restarts_it_runs_the_command_again_then_gives_up(tmp_path: Path) -> None:
    """The process runtime's policy: N more runs after exits nobody asked for (an exit 0
    included), the count written where the runtime reads it, then the command's own code."""
    runs, count = tmp_path / "runs", tmp_path / "restarts"
    command = ["sh", "-c", f"echo run >> {runs}; exit 3"]
    run = subprocess.run(
        [sys.executable, str(ROOT / SOURCE), "--restarts", "2", "decode-0", "--", *command],
        capture_output=True, text=True, check=False, timeout=60,
        env={"XPYD_RESTARTS_FILE": str(count), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert run.returncode == 3
    assert runs.read_text().count("run") == 3
    assert count.read_text().splitlines() == ["2", "decode-0 exited with 3"]
    assert "decode-0 restarting (1 of 2) in 0.1 s" in run.stderr
    assert "decode-0 restarting (2 of 2) in 0.2 s" in run.stderr
    assert run.stderr.rstrip().endswith("decode-0 gave up after 2 restart(s)")


def test_a_stop_while_it_waits_to_restart_ends_it_at_once(tmp_path: Path) -> None:
    marker = tmp_path / "started"
    # Exits at once each time: the supervisor then waits 0.1 s, 0.2 s, ... up to 30 s.
    command = ["sh", "-c", f"touch {marker}; exit 1"]
    process = subprocess.Popen(
        [sys.executable, str(ROOT / SOURCE), "--restarts", "50", "stop-wait", "--", *command],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    _wait_for(marker)
    time.sleep(2.0)  # several quick restarts, now in a longer wait
    started = time.monotonic()
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=30)
    assert time.monotonic() - started < 2.0
    assert process.returncode == 128 + signal.SIGTERM
    assert "gave up" not in stderr


class _Page:
    """A page on a free local port whose body ``body()`` gives (None: 503, as a service that
    is restarting)."""

    def __init__(self, path: str, port: int = 0) -> None:
        import http.server
        import threading

        page = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = page.body()
                if body is None:
                    self.send_error(503)
                    return
                self.send_response(200)
                self.end_headers()
                self.wfile.write(body.encode())

            def log_message(self, *_: object) -> None:
                return

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def body(self) -> str | None:
        raise NotImplementedError

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _Store(_Page):
    """A stand-in for an `lmcache server`'s /status (the registration lists only): what the
    watch reads. The real server's restart is in the faults drill (bench --fault
    kill:lmcache-decode-0)."""

    def __init__(self) -> None:
        self.registered: list[int] | None = []  # None: does not answer
        super().__init__("/status")

    def body(self) -> str | None:
        if self.registered is None:
            return None
        return json.dumps(
            {
                "is_healthy": True,
                "registered_gpu_ids": [],
                "registered_non_cuda_instance_ids": self.registered,
            }
        )


def _watched(url: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(ROOT / SOURCE), "--needs-registered", url, "watched", "--",
         "sleep", "600"],
        stderr=subprocess.PIPE, text=True,
        env={"XPYD_WATCH_EVERY_S": "0.2", "PATH": "/usr/bin:/bin"},
    )  # fmt: skip


def test_an_engine_whose_store_lost_it_is_ended_as_a_crash() -> None:
    store = _Store()
    process = _watched(store.url)
    try:
        time.sleep(0.6)
        store.registered = [7]  # the engine registers (seconds after its start)
        time.sleep(1.0)  # seen registered
        store.registered = None  # the store restarts: no answer is no reason
        time.sleep(1.0)
        assert process.poll() is None
        store.registered = []  # back, without the engine
        _, stderr = process.communicate(timeout=30)
    finally:
        process.kill()
        store.close()
    assert process.returncode in (1, 128 + signal.SIGTERM)  # a crash: the policy restarts it
    assert f"watched lost its registration at {store.url}" in stderr


def test_an_engine_never_registered_is_left_alone() -> None:
    """Before the engine registers (it loads for minutes), an empty list is no restart."""
    store = _Store()
    store.registered = []
    try:
        _still_running_after(_watched(store.url), 1.5)
    finally:
        store.close()


def test_an_earlier_engines_registration_reaped_is_no_loss() -> None:
    """A killed engine stays listed until its server reaps it (LMCache's worker reaper, 120 s
    by default): listed at the watch's first answer, it is not this run's engine, and its reap
    (before or after this run's engine registers) ends nothing. On an H100 it ended the
    restarted prefiller that the reap had just made room for."""
    store = _Store()
    store.registered = [3]  # the engine killed before this run: not reaped yet
    process = _watched(store.url)
    try:
        time.sleep(0.6)
        store.registered = []  # reaped before this run's engine registers
        time.sleep(0.8)
        store.registered = [7]  # this run's engine
        time.sleep(0.8)
        assert process.poll() is None
        store.registered = [3, 7]  # (as if both were listed) and the earlier one reaped again
        time.sleep(0.4)
        store.registered = [7]
        time.sleep(0.8)
        assert process.poll() is None
        store.registered = [9]  # a store that restarted lists another engine only: ours is lost
        _, stderr = process.communicate(timeout=30)
    finally:
        process.kill()
        store.close()
    assert f"watched lost its registration at {store.url}" in stderr


def _still_running_after(process: subprocess.Popen[str], seconds: float) -> None:
    """The supervised command is not ended within ``seconds``; then it is stopped."""
    try:
        time.sleep(seconds)
        assert process.poll() is None
    finally:
        process.terminate()
        process.communicate(timeout=30)


class _Peer(_Page):
    """A stand-in for a decoder's Prometheus page (only the line the watch reads): the real
    decoder's restart is in the lmcache-pd fault drill (docs/faults.md)."""

    def __init__(self, port: int = 0) -> None:
        self.started: float | None = 1.79e9  # None: does not answer
        super().__init__("/metrics", port)

    def body(self) -> str | None:
        if self.started is None:
            return None
        return (
            "# TYPE process_start_time_seconds gauge\n"
            f"process_start_time_seconds {self.started:.11e}\n"
            'vllm:num_requests_running{model_name="m"} 0.0\n'
        )


def _watching(*urls: str) -> subprocess.Popen[str]:
    return _supervising("--restarts-with", urls, "watching")


def _supervising(
    option: str, urls: tuple[str, ...], name: str, pid_file: Path | None = None
) -> subprocess.Popen[str]:
    """``sleep 600`` supervised as ``name``, watching each of ``urls`` with ``option``."""
    env = {"XPYD_WATCH_EVERY_S": "0.2", "PATH": "/usr/bin:/bin"}
    if pid_file is not None:
        env["XPYD_PID_FILE"] = str(pid_file)
    options = [part for url in urls for part in (option, url)]
    return subprocess.Popen(
        [sys.executable, str(ROOT / SOURCE), *options, name, "--", "sleep", "600"],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def test_a_service_whose_peer_restarted_is_ended_as_a_crash() -> None:
    quiet, restarting = _Peer(), _Peer()
    process = _watching(quiet.url, restarting.url)
    try:
        time.sleep(1.0)  # both seen
        restarting.started = None  # down: no answer is no reason
        time.sleep(1.0)
        assert process.poll() is None
        restarting.started = 1.79e9 + 0.5  # the same start, as the page rounds it
        time.sleep(1.0)
        assert process.poll() is None
        restarting.started = 1.79e9 + 95  # a new process
        _, stderr = process.communicate(timeout=30)
    finally:
        process.kill()
        quiet.close()
        restarting.close()
    assert process.returncode in (1, 128 + signal.SIGTERM)  # a crash: the policy restarts it
    assert f"watching saw its peer at {restarting.url} restart" in stderr
    assert quiet.url not in stderr


def test_a_peer_first_seen_late_sets_the_start_it_is_held_to() -> None:
    """A peer that comes up after the service (a stack starting) is no restart."""
    peer = _Peer()
    peer.started = None
    process = _watching(peer.url)
    try:
        time.sleep(0.6)
        peer.started = 1.79e9 + 300
        time.sleep(1.2)
        assert process.poll() is None
    finally:
        process.terminate()
        process.communicate(timeout=30)
        peer.close()


def _mapping(url: str, pid_file: Path | None = None) -> subprocess.Popen[str]:
    return _supervising("--ends-with", (url,), "mapper", pid_file)


def test_a_service_that_maps_a_peer_that_is_gone_is_ended_as_a_crash() -> None:
    """A peer that answers 503 (restarting, or slow) is no reason; one whose port refuses
    connections (its process is gone, its GPU memory still mapped here) is."""
    peer = _Peer()
    process = _mapping(peer.url)
    try:
        time.sleep(1.0)  # seen
        peer.started = None
        time.sleep(1.0)
        assert process.poll() is None
        peer.close()  # nothing listens on its port now
        _, stderr = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode in (1, 128 + signal.SIGTERM)  # a crash: the policy restarts it
    assert (
        f"mapper saw its peer at {peer.url} gone (it holds the peer's GPU memory or its agent)"
        in stderr
    )


def test_a_mapped_peer_that_restarts_ends_the_service_too() -> None:
    peer = _Peer()
    process = _mapping(peer.url)
    try:
        time.sleep(1.0)
        peer.started = 1.79e9 + 95
        _, stderr = process.communicate(timeout=30)
    finally:
        process.kill()
        peer.close()
    assert f"mapper saw its peer at {peer.url} restart" in stderr


def test_a_peer_gone_while_the_stack_stops_is_no_reason(tmp_path: Path) -> None:
    """The process runtime's `down` stops services one after another and marks the stack as
    stopping (STOPPING_FILE beside the PID records): the mapper is not restarted meanwhile."""
    peer = _Peer()
    process = _mapping(peer.url, tmp_path / "mapper.pid")
    try:
        time.sleep(1.0)  # seen
        (tmp_path / STOPPING_FILE).write_text("down\n")
        peer.close()
        time.sleep(1.5)  # seven looks, all refused
        assert process.poll() is None
    finally:
        process.terminate()
        _, stderr = process.communicate(timeout=30)
    assert "gone" not in stderr


def test_a_mapped_peer_never_seen_is_no_reason() -> None:
    """A stack starting: the peer's port refuses until it is up."""
    peer = _Peer()
    url = peer.url
    peer.close()
    _still_running_after(_mapping(url), 1.5)


@pytest.mark.parametrize(
    ("page", "started"),
    [
        ("process_start_time_seconds 1.79619109987e+09\n", 1.79619109987e9),
        ("# HELP process_start_time_seconds Start time\nprocess_start_time_seconds 12.5", 12.5),
        ("process_start_time_seconds_total 3\n", None),
        ("process_start_time_seconds nope\n", None),
        ("", None),
    ],
)
def test_the_start_time_is_read_from_the_page(page: str, started: float | None) -> None:
    assert start_time(page) == started


def test_the_watch_options_are_what_the_supervisor_parses() -> None:
    options = watch_options(
        "http://s:1/status", ["http://d0:2/metrics", "http://d1:3/metrics"], ["http://p:4/metrics"]
    )
    assert options == [
        "--needs-registered", "http://s:1/status",
        "--restarts-with", "http://d0:2/metrics",
        "--restarts-with", "http://d1:3/metrics",
        "--ends-with", "http://p:4/metrics",
    ]  # fmt: skip
    assert watch_options(None, []) == []


def test_the_last_thing_said_is_why_it_stopped_not_the_restart_that_followed() -> None:
    log = "xpyd: d exited with 5\nxpyd: d restarting (1 of 2) in 0.1 s\nserving again\n"
    assert last_said(log) == "d exited with 5"
    assert last_said(log + "xpyd: d gave up after 2 restart(s)\n") == "d gave up after 2 restart(s)"
    assert last_said("serving\n") is None


class _Health(_Page):
    """A stand-in for an engine's /health: 503 until ``serving`` (a real shared-GPU start is
    in the GPU drill, docs/gpu-h200)."""

    def __init__(self) -> None:
        self.serving = False
        super().__init__("/health")

    def body(self) -> str | None:
        return "" if self.serving else None


def _alone(
    name: str, health: _Health, marker: Path, state: Path, *, restarts: int = 0, runs: str = "600"
) -> subprocess.Popen[str]:
    """A stand-in engine on gpu-0 that records when it starts, then sleeps ``runs`` s."""
    command = ["sh", "-c", f"date +%s.%N >> {marker}; sleep {runs}"]
    options = ["--restarts", str(restarts), "--starts-alone-on", "gpu-0"]
    return subprocess.Popen(
        [sys.executable, str(ROOT / SOURCE), *options, "--started-when", health.url, name,
         "--", *command],
        stderr=subprocess.PIPE, text=True, start_new_session=True,
        env={"XPYD_PID_FILE": str(state / f"{name}.pid"), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip


def test_engines_sharing_a_gpu_start_one_at_a_time(tmp_path: Path) -> None:
    """The second waits while the first is starting, and starts once the first serves."""
    first_page, second_page = _Health(), _Health()
    first_ran, second_ran = tmp_path / "first", tmp_path / "second"
    first = _alone("prefill-0", first_page, first_ran, tmp_path)
    second: subprocess.Popen[str] | None = None
    try:
        _wait_for(first_ran)
        second = _alone("decode-0", second_page, second_ran, tmp_path)
        time.sleep(2.0)
        assert not second_ran.exists()  # the first is still starting
        first_page.serving = True
        _wait_for(second_ran)
    finally:
        for process in (first, second):
            if process is not None:
                process.terminate()
        _, said = second.communicate(timeout=30) if second else ("", "")
        first.communicate(timeout=30)
        first_page.close()
        second_page.close()
    assert "decode-0 waits to start: prefill-0 is starting on gpu-0" in said


def test_a_start_that_ended_unserved_lets_the_next_go(tmp_path: Path) -> None:
    """A restart waits for its neighbour's start too; a run that ends before it serves
    frees the GPU at once."""
    crashing, waiting = _Health(), _Health()
    crashed, ran = tmp_path / "crashed", tmp_path / "ran"
    first = _alone("prefill-0", crashing, crashed, tmp_path, runs="1; exit 1")
    second: subprocess.Popen[str] | None = None
    try:
        crashed_at = float(_first_line(crashed))
        second = _alone("decode-0", waiting, ran, tmp_path)
        assert first.wait(timeout=30) == 1
        started_after = float(_first_line(ran, within_s=5.0)) - crashed_at
        assert started_after >= 0.9  # not before the first run ended
    finally:
        for process in (first, second):
            if process is not None:
                if process.poll() is None:
                    process.terminate()
                process.communicate(timeout=30)
        crashing.close()
        waiting.close()


def test_a_stop_while_it_waits_its_turn_ends_it_without_starting(tmp_path: Path) -> None:
    holding, waiting = _Health(), _Health()
    held, never = tmp_path / "held", tmp_path / "never"
    first = _alone("prefill-0", holding, held, tmp_path)
    try:
        _wait_for(held)
        second = _alone("decode-0", waiting, never, tmp_path, restarts=3)
        time.sleep(1.0)
        second.send_signal(signal.SIGTERM)
        _, said = second.communicate(timeout=10)
        assert second.returncode == 128 + signal.SIGTERM
        assert not never.exists()
        assert "waits to start" in said
    finally:
        first.terminate()
        first.communicate(timeout=30)
        holding.close()
        waiting.close()


def test_starting_alone_needs_its_page(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, str(ROOT / SOURCE), "--starts-alone-on", "gpu-0", "decode-0", "--",
         "true"],
        capture_output=True, text=True, check=False, timeout=30,
    )  # fmt: skip
    assert run.returncode == 2
    assert "--starts-alone-on needs --started-when" in run.stderr


def test_a_lock_file_that_is_a_link_is_refused(tmp_path: Path) -> None:
    """Nothing is opened or made through a link: the supervisor stops before the command."""
    target = tmp_path / "elsewhere"
    (tmp_path / "start-alone-gpu-0.lock").symlink_to(target)
    page, marker = _Health(), tmp_path / "ran"
    try:
        process = _alone("decode-0", page, marker, tmp_path)
        _, said = process.communicate(timeout=30)
    finally:
        page.close()
    assert process.returncode == 2
    assert "cannot open its start lock" in said
    assert not target.exists()
    assert not marker.exists()


@pytest.mark.parametrize("alone", [["--starts-alone-on", "gpu-0"], []], ids=["alone", "together"])
def test_a_start_watches_its_peer_only_once_it_serves(tmp_path: Path, alone: list[str]) -> None:
    """While it starts it has met no peer: the peer seen, then gone, ends nothing (a pair
    restarting on one GPU would end each other: on an H100 a prefiller restarted at once saw its
    decoder end with the killed prefiller, and ended too). Once it serves, the peer seen and
    then gone ends it. The same whether it takes a start lock or not."""
    health, peer = _Health(), _Peer()
    port = peer.server.server_address[1]
    options = [*alone, "--started-when", health.url, "--ends-with"]
    process = subprocess.Popen(
        [sys.executable, str(ROOT / SOURCE), *options, peer.url, "decode-0", "--", "sleep",
         "600"],
        stderr=subprocess.PIPE, text=True, start_new_session=True,
        env={"XPYD_PID_FILE": str(tmp_path / "decode-0.pid"), "XPYD_WATCH_EVERY_S": "0.2",
             "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    try:
        time.sleep(1.0)  # the peer answers meanwhile, but this run does not serve yet
        peer.close()
        time.sleep(1.5)
        assert process.poll() is None
        health.serving = True
        time.sleep(1.0)  # watched now: the peer refuses, but it was never seen
        assert process.poll() is None
        peer = _Peer(port)
        time.sleep(1.0)  # seen
        peer.close()
        _, said = process.communicate(timeout=30)
    finally:
        process.kill()
        health.close()
        peer.close()
    assert f"decode-0 saw its peer at {peer.url} gone" in said
