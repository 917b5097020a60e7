"""The supervisor's signals reach only the command it started (issue 33, class 1), and its own
edges end in a usage line or a clear exit, never a traceback or an orphan (class 5).

Signals in the property tests go to a recorder (``supervise._deliver``), never to the kernel:
the records they forge name this test process, its parent, PIDs 0, 1 and -1 and stand-ins."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from generator import supervise
from generator.supervise import PID_FILE_ENV, SOURCE, PidRecord, Reach, send, start_time

ROOT = Path(__file__).resolve().parents[1]
SERVICE = "decode-0"
MARK = "xpyd-test-standin"  # every stand-in this module starts carries it in its command line


def _start_ticks(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[19])


@contextmanager
def _recorded(pid_file: Path) -> Iterator[list[tuple[int, int]]]:
    """``send`` with ``pid_file`` as its record and every signal it would send recorded."""
    calls: list[tuple[int, int]] = []

    def record(_pidfd: int | None, pid: int, signum: int) -> None:
        calls.append((pid, signum))

    with (
        mock.patch.object(supervise, "_deliver", record),
        mock.patch.dict(os.environ, {PID_FILE_ENV: str(pid_file)}),
    ):
        yield calls


@pytest.fixture(scope="module")
def standin() -> Iterator[subprocess.Popen[bytes]]:
    """A process this test started, leading a session of its own, whose parent is this test
    process: everything a forged record could want of it, except a supervisor."""
    process = subprocess.Popen(
        ["sh", "-c", f"exec sleep 600 # {MARK}"], start_new_session=True
    )  # fmt: skip
    yield process
    process.kill()
    process.wait()


def _candidates(standin: int) -> list[int]:
    return [-1, 0, 1, os.getpid(), os.getppid(), standin, 2, (1 << 22) + 1, 1 << 63]


def _records(standin: int) -> st.SearchStrategy[str]:
    pids = st.sampled_from(_candidates(standin)) | st.integers(-(1 << 64), 1 << 64)
    real = st.sampled_from([os.getpid(), os.getppid(), standin, 1])

    def with_real_starts(pid: int, supervisor: int) -> str:
        return json.dumps(
            {"service": SERVICE, "pid": pid, "start": _start_ticks(pid),
             "supervisor": supervisor, "supervisor_start": _start_ticks(supervisor)}
        )  # fmt: skip

    forged = st.fixed_dictionaries(
        {
            "service": st.sampled_from([SERVICE, "other", "../x", ""]),
            "pid": pids,
            "start": st.integers(-1, 1 << 40),
            "supervisor": pids,
            "supervisor_start": st.integers(-1, 1 << 40),
        }
    ).map(json.dumps)
    values = st.one_of(st.integers(), st.floats(), st.text(max_size=20), st.none())
    noise = (
        st.text(max_size=200)
        | st.sampled_from(["-1", "0", "1", str(standin)])
        | values.map(json.dumps)
    )
    return st.builds(with_real_starts, real, real) | forged | noise


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_no_forged_record_makes_a_signal(
    data: st.DataObject, tmp_path_factory: pytest.TempPathFactory, standin: subprocess.Popen[bytes]
) -> None:
    text = data.draw(_records(standin.pid))
    record = tmp_path_factory.mktemp("record") / f"{SERVICE}.pid"
    record.write_text(text)
    reach: Reach = data.draw(st.sampled_from(["command", "tree", "under"]))
    with _recorded(record) as calls:
        code = send("KILL", SERVICE, reach)
    assert calls == []
    assert code == 1


def _supervised(record: Path, *command: str, restarts: int = 0) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(ROOT / SOURCE), "--restarts", str(restarts), SERVICE, "--",
         *command],
        stderr=subprocess.PIPE, text=True, start_new_session=True,
        env={**os.environ, PID_FILE_ENV: str(record)},
    )  # fmt: skip


def _wait_for_record(path: Path, within_s: float = 30.0) -> PidRecord:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if path.is_file() and (text := path.read_text()):
            return PidRecord.parse(text)
        time.sleep(0.05)
    raise AssertionError(f"{path} never held a record")


def test_a_genuine_record_reaches_the_command_and_only_what_runs_under_it(
    tmp_path: Path,
) -> None:
    record = tmp_path / "decode-0.pid"
    process = _supervised(record, "sh", "-c", f"sleep 600 & wait # {MARK}")
    try:
        command = _wait_for_record(record)
        time.sleep(0.3)  # its sleep started
        with _recorded(record) as calls:
            assert send("KILL", SERVICE, "command") == 0
            assert send("STOP", SERVICE, "under") == 0
        (sleep,) = [pid for pid in supervise._children(command.pid)]
        assert calls == [(command.pid, signal.SIGKILL), (sleep, signal.SIGSTOP)]
    finally:
        process.terminate()
        process.communicate(timeout=30)
    assert not record.exists()  # the record goes with what it names


def test_a_command_whose_supervisor_is_gone_is_not_signalled(tmp_path: Path) -> None:
    record = tmp_path / "decode-0.pid"
    process = _supervised(record, "sleep", "600")
    command = _wait_for_record(record)
    pinned = os.pidfd_open(command.pid)  # the stand-in itself, whatever happens to its PID
    try:
        process.kill()  # the supervisor dies without cleaning up: its command lives on
        process.wait(timeout=30)  # (not communicate: the command holds its stderr open)
        with _recorded(record) as calls:
            assert send("KILL", SERVICE) == 1
        assert calls == []
        sent = _cli("--signal", "KILL", SERVICE, env={PID_FILE_ENV: str(record)})
        assert sent.returncode == 1
        assert "has no living supervisor" in sent.stderr
    finally:
        signal.pidfd_send_signal(pinned, signal.SIGKILL)
        os.close(pinned)
        assert process.stderr is not None
        process.stderr.close()


def test_a_record_of_an_ended_command_exits_1(tmp_path: Path) -> None:
    """A drill must not record a fault it never sent."""
    ended = subprocess.Popen(["true"])
    start = _start_ticks(ended.pid)
    ended.wait()
    record = tmp_path / "decode-0.pid"
    fields = {"service": SERVICE, "pid": ended.pid, "start": start, "supervisor": os.getpid(),
              "supervisor_start": _start_ticks(os.getpid())}  # fmt: skip
    record.write_text(json.dumps(fields))
    sent = _cli("--signal", "KILL", SERVICE, env={PID_FILE_ENV: str(record)})
    assert sent.returncode == 1
    assert "is not running here" in sent.stderr


@pytest.mark.parametrize("kind", ["link", "fifo", "zero", "huge", "folder"])
def test_a_record_that_is_no_regular_small_file_is_refused(tmp_path: Path, kind: str) -> None:
    record = tmp_path / "decode-0.pid"
    if kind == "link":
        real = tmp_path / "real.pid"
        real.write_text("{}")
        record.symlink_to(real)
    elif kind == "fifo":
        os.mkfifo(record)  # a plain open would block for ever
    elif kind == "zero":
        record.symlink_to("/dev/zero")
    elif kind == "huge":
        record.write_text(" " * (1 << 20))
    else:
        record.mkdir()
    sent = _cli("--signal", "KILL", SERVICE, env={PID_FILE_ENV: str(record)}, timeout_s=10)
    assert sent.returncode == 1
    assert "no supervised decode-0 here" in sent.stderr
    assert "Traceback" not in sent.stderr


def _cli(
    *argv: str, env: dict[str, str] | None = None, timeout_s: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / SOURCE), *argv], capture_output=True, text=True,
        check=False, timeout=timeout_s, env={**os.environ, **(env or {})},
    )  # fmt: skip


@pytest.mark.parametrize(
    "argv",
    [
        ["--restarts", "²", SERVICE, "--"],
        ["--restarts", "-1", SERVICE, "--"],
        ["--restarts", "99999999999999999999", SERVICE, "--"],
        ["--needs-registered", "not a url", SERVICE, "--"],
        ["--restarts-with", "file:///etc/passwd", SERVICE, "--"],
        ["decode/0", "--"],
        ["../decode-0", "--"],
        [SERVICE, "--bogus", "--"],
    ],
)
def test_bad_options_give_a_usage_line_and_start_nothing(tmp_path: Path, argv: list[str]) -> None:
    marker = tmp_path / "started"
    run = _cli(*argv, "touch", str(marker), env={PID_FILE_ENV: str(tmp_path / "x.pid")})
    assert run.returncode == 2
    assert "usage: supervise.py" in run.stderr
    assert "Traceback" not in run.stderr
    assert not marker.exists()


@pytest.mark.parametrize("argv", [["--signal", "9", SERVICE], ["--signal", "HUP", SERVICE],
                                  ["--signal", "KILL"], ["--signal", "KILL", SERVICE, "--tree",
                                                         "--under"], [SERVICE, "--"]])  # fmt: skip
def test_bad_signal_requests_give_a_usage_line(argv: list[str]) -> None:
    run = _cli(*argv)
    assert run.returncode == 2
    assert "usage: supervise.py" in run.stderr
    assert "Traceback" not in run.stderr


def test_signal_names_are_taken_in_any_case(tmp_path: Path) -> None:
    run = _cli("--signal", "kill", SERVICE, env={PID_FILE_ENV: str(tmp_path / "none.pid")})
    assert run.returncode == 1  # understood: there is just nothing to signal
    assert "no supervised decode-0 here" in run.stderr


def test_a_missing_command_exits_127_after_its_restarts(tmp_path: Path) -> None:
    run = _cli("--restarts", "1", SERVICE, "--", str(tmp_path / "no-such-program"),
               env={PID_FILE_ENV: str(tmp_path / "x.pid")})  # fmt: skip
    assert run.returncode == 127
    assert "cannot start" in run.stderr
    assert "gave up after 1 restart(s)" in run.stderr
    assert "Traceback" not in run.stderr


def test_a_record_that_cannot_be_written_starts_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "started"
    run = _cli(SERVICE, "--", "sh", "-c", f"touch {marker}; sleep 60",
               env={PID_FILE_ENV: str(tmp_path / "no-such-folder" / "x.pid")})  # fmt: skip
    assert run.returncode == 2
    assert "cannot write its PID record" in run.stderr
    assert not marker.exists()


@pytest.mark.parametrize("every", ["0", "-1", "nan", "inf", "1e9", "soon"])
def test_a_watch_interval_out_of_bounds_is_refused(tmp_path: Path, every: str) -> None:
    run = _cli("--needs-registered", "http://127.0.0.1:9/status", SERVICE, "--", "sleep", "60",
               env={"XPYD_WATCH_EVERY_S": every, PID_FILE_ENV: str(tmp_path / "x.pid")},
               timeout_s=10)  # fmt: skip
    assert run.returncode == 2
    assert "XPYD_WATCH_EVERY_S" in run.stderr


@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf"])
def test_a_start_that_is_no_moment_is_no_start(value: str) -> None:
    """A page saying nan would otherwise look like a restart at every look."""
    assert start_time(f"process_start_time_seconds {value}\n") is None


def test_a_process_that_made_a_session_of_its_own_goes_with_the_command(tmp_path: Path) -> None:
    left = tmp_path / "left.pid"
    command = f"setsid sleep 300 >/dev/null 2>&1 & echo $! > {left}; sleep 0.2; exit 0 # {MARK}"
    run = _cli(SERVICE, "--", "sh", "-c", command, env={PID_FILE_ENV: str(tmp_path / "x.pid")})
    assert run.returncode == 1, run.stderr  # exited on its own: a failure
    escaped = int(left.read_text())
    deadline = time.monotonic() + 10
    while Path(f"/proc/{escaped}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{escaped}").exists(), f"sleep {escaped} still runs"
