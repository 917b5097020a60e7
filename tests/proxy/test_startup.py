"""Issue 8, class 5: ``python -m generator.proxy`` as an operator runs it: a bad start ends
with one line and exit 1, a good one says where it listens, the access log is there on ask."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.proxy.harness import free_port

ROOT = Path(__file__).resolve().parents[2]


def run_proxy(*args: str, timeout_s: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "generator.proxy", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=ROOT,
        env=os.environ | {"PYTHONPATH": str(ROOT)},
        check=False,
    )


def config_file(tmp_path: Path, port: int, text: str | None = None) -> Path:
    path = tmp_path / "router.yaml"
    path.write_text(
        text
        if text is not None
        else f"protocol: nixl\nlisten: {{host: 127.0.0.1, port: {port}}}\n"
        "prefill: [{name: p, url: 'http://127.0.0.1:9'}]\n"
        "decode: [{name: d, url: 'http://127.0.0.1:9'}]\n"
    )
    return path


def assert_one_line_failure(result: subprocess.CompletedProcess[str], expected: str) -> None:
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("error: ")
    assert expected in result.stderr


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (None, "cannot read"),  # no file at all
        ("protocol: [", "is not YAML"),
        ("protocol: nixl\n", "prefill: Field required"),
        ("protocol: nixl\nlisten: {port: 99999}\nprefill: []\ndecode: []\n", "listen.port"),
        ("- a list\n", "(top level)"),
    ],
)
def test_a_missing_or_invalid_config_is_one_line(
    tmp_path: Path, text: str | None, expected: str
) -> None:
    path = tmp_path / "missing.yaml" if text is None else config_file(tmp_path, 1, text)
    assert_one_line_failure(run_proxy("--config", str(path)), expected)


def test_bad_seed_flags_are_one_line() -> None:
    result = run_proxy(
        "--protocol", "nixl", "--prefiller-host", "p", "--prefiller-port", "80x",
        "--decoder-host", "d", "--decoder-port", "81",
    )  # fmt: skip
    assert_one_line_failure(result, "--prefiller-port: '80x' is not a port")


def test_a_port_in_use_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_proxy("--config", str(config_file(tmp_path, port)))
    assert_one_line_failure(result, f"cannot listen on 127.0.0.1:{port}: Address already in use")


def test_a_kv_notice_port_in_use_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        notify = taken.getsockname()[1]
        config = config_file(
            tmp_path,
            0,
            f"protocol: lmcache-pd\nlisten: {{host: 127.0.0.1, port: {free_port()}}}\n"
            f"notify: {{bind_host: 127.0.0.1, port: {notify}}}\n"
            "prefill: [{name: p, url: 'http://127.0.0.1:9'}]\n"
            "decode: [{name: d, url: 'http://127.0.0.1:9', kv_host: h, init_ports: [1],"
            " alloc_ports: [2]}]\n",
        )
        result = run_proxy("--config", str(config))
    assert_one_line_failure(result, f"cannot bind the KV-notice port tcp://127.0.0.1:{notify}")


@pytest.fixture
def running(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], int]]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "generator.proxy", "--config", str(config_file(tmp_path, port)),
         "--log-level", "info", "--access-log"],
        stderr=subprocess.PIPE, text=True, cwd=ROOT, env=os.environ | {"PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    yield process, port
    if process.poll() is None:
        process.kill()
    process.wait(timeout=10)
    assert process.stderr is not None
    process.stderr.close()


def test_it_says_where_it_listens_logs_access_and_stops_on_sigterm(
    running: tuple[subprocess.Popen[str], int],
) -> None:
    """--log-level info (lower case) is fine; the listening line comes once the port is open."""
    process, port = running
    assert process.stderr is not None
    first = process.stderr.readline()
    assert (
        first
        == f"xpyd proxy listening on http://127.0.0.1:{port} (nixl, 1 prefiller(s), 1 decoder(s))\n"
    )
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as reply:
        assert reply.status == 200
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/completions",
        data=b'{"prompt": "x"}',
        headers={"X-Request-Id": "probe-1"},
    )
    with pytest.raises(urllib.error.HTTPError) as failed:  # its backends are not there
        urllib.request.urlopen(request, timeout=10)
    failed.value.close()
    process.send_signal(signal.SIGTERM)  # ends stderr too
    lines = [line for line in iter(process.stderr.readline, "") if "aiohttp.access" in line][:2]
    assert '"GET /health HTTP/1.1" 200' in lines[0]
    assert '"POST /v1/completions HTTP/1.1" 50' in lines[1]
    assert lines[1].rstrip().endswith(" probe-1")
    assert process.wait(timeout=15) == 0


def test_help_still_works() -> None:
    result = run_proxy("--help")
    assert result.returncode == 0
    assert "--prefiller-host" in result.stdout
    assert "--access-log" in result.stdout


def test_malformed_http_is_a_warning_line_not_a_traceback(
    running: tuple[subprocess.Popen[str], int],
) -> None:
    process, port = running
    assert process.stderr is not None
    process.stderr.readline()  # listening
    with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
        client.sendall(b"POST /v1/completions HTTP/1.1\r\nContent-Length: -1\r\n\r\n")
        assert client.recv(100).startswith(b"HTTP/1.0 400")
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=15) == 0
    log = process.stderr.read()
    assert "WARNING aiohttp.server: malformed request: 400, message: Invalid" in log
    assert "Traceback" not in log
    assert "ERROR" not in log


SEED_FLAGS = (
    "--protocol", "nixl", "--prefiller-host", "p", "--prefiller-port", "80",
    "--decoder-host", "d", "--decoder-port", "81",
)  # fmt: skip


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (("--num-prefillers", "1000000000"), "--num-prefillers: '1000000000' is not a count"),
        (("--num-decoders", "-3"), "--num-decoders: '-3' is not a count"),
        (("--num-decoders", "0"), "is not a count"),
        (("--port", "٣"), "--port: '٣' is not a port"),  # int() would take it as 3
        (("--proxy-port", "99999"), "--proxy-port: '99999' is not a port"),
        (("--prefiller-port", "²"), "--prefiller-port: '²' is not a port"),
        (("--decoder-host", ",".join(["d"] * 2000)), "--decoder-host has 2000 entries"),
        (("--config", "/dev/zero"), "/dev/zero is larger than 1048576 bytes"),
        (("--config", "/dev/null"), "(top level)"),
        (("--bogus",), "unrecognized arguments: --bogus"),
    ],
)
def test_hostile_flags_are_one_line(flags: tuple[str, ...], expected: str) -> None:
    """Issue 17, item 6: no flag ends in MemoryError or a traceback."""
    assert_one_line_failure(run_proxy(*SEED_FLAGS, *flags), expected)


@pytest.mark.parametrize(
    ("content", "expected"),
    [(b"\xff\xfe bad", "is not UTF-8 text"), (b"[" * 100_000, "not")],
)
def test_a_config_that_is_not_text_or_too_deep_is_one_line(
    tmp_path: Path, content: bytes, expected: str
) -> None:
    path = tmp_path / "router.yaml"
    path.write_bytes(content)
    assert_one_line_failure(run_proxy("--config", str(path)), expected)
