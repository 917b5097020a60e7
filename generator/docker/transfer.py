"""Images to another engine without a registry: ``docker save`` on one engine streamed into
``docker load`` on the other (no file in between), skipping what is already there."""

from __future__ import annotations

import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import IO

from generator.docker.endpoint import DockerEndpoint, last_lines
from generator.docker.engine import image_id
from generator.errors import DockerError

__all__ = ["TransferReport", "transfer_images"]

_CHUNK_BYTES = 1 << 20
_PROGRESS_EVERY_S = 10.0


@dataclass(frozen=True)
class TransferReport:
    sent: tuple[str, ...]  # tags loaded on the target now
    skipped: tuple[str, ...]  # tags the target already had, with the same image ID
    bytes_sent: int
    seconds: float


def transfer_images(
    tags: Sequence[str],
    source: DockerEndpoint,
    target: DockerEndpoint,
    on_progress: Callable[[str], None],
    *,
    timeout_s: float = 1800.0,
) -> TransferReport:
    """Make every tag on ``source`` present on ``target`` with the same image ID. One stream
    carries all missing tags (layers they share travel once); ``timeout_s`` bounds it."""
    started = time.monotonic()
    missing = _missing_on_target(tags, source, target)
    skipped = tuple(tag for tag in dict.fromkeys(tags) if tag not in missing)
    for tag in skipped:
        on_progress(f"{tag}: already on {target.label}")
    sent_bytes = 0
    if missing:
        on_progress(f"sending {', '.join(missing)} from {source.label} to {target.label}")
        sent_bytes = _stream(list(missing), source, target, on_progress, timeout_s)
        _check_loaded(missing, target)
    seconds = time.monotonic() - started
    return TransferReport(tuple(missing), skipped, sent_bytes, seconds)


def _missing_on_target(
    tags: Sequence[str], source: DockerEndpoint, target: DockerEndpoint
) -> dict[str, str]:
    """{tag: image ID on the source} for each tag the target lacks or holds another image."""
    missing: dict[str, str] = {}
    for tag in dict.fromkeys(tags):
        wanted = image_id(source, tag)
        if wanted is None:
            raise DockerError(
                f"{tag} is not on {source.label}, so it cannot be sent to host {target.host}",
                command=["docker", *source.cli_args(), "image", "inspect", tag],
                output="",
                hint="build the stack's images first (`up` builds them on the local engine)",
            )
        if image_id(target, tag) != wanted:
            missing[tag] = wanted
    return missing


def _stream(
    tags: list[str],
    source: DockerEndpoint,
    target: DockerEndpoint,
    on_progress: Callable[[str], None],
    timeout_s: float,
) -> int:
    save_command = ["docker", *source.cli_args(), "save", *tags]
    load_command = ["docker", *target.cli_args(), "load", "--quiet"]
    with tempfile.TemporaryFile() as save_err, tempfile.TemporaryFile() as load_out:
        save = subprocess.Popen(
            save_command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=save_err
        )
        load = subprocess.Popen(
            load_command, stdin=subprocess.PIPE, stdout=load_out, stderr=subprocess.STDOUT
        )
        expired = threading.Event()
        # A stalled engine must not hold the caller forever: kill both ends at the deadline.
        timer = threading.Timer(timeout_s, _kill, (expired, save, load))
        timer.start()
        try:
            sent, load_gone = _pump(save, load, on_progress)
        finally:
            timer.cancel()
            _kill_if_running(save, load)
        if expired.is_set():
            raise DockerError(
                f"sending {', '.join(tags)} to {target.label} did not finish within "
                f"{timeout_s:.0f} s ({sent / 2**30:.2f} GiB sent)",
                command=[*save_command, "|", *load_command],
                output="",
                hint="check the link to that host, or give the transfer more time",
            )
        # The side that failed first: a broken save also truncates what load reads.
        if load_gone:
            _raise_on_failure(load, load_command, load_out, f"loading on {target.label}")
        _raise_on_failure(save, save_command, save_err, f"saving on {source.label}")
        _raise_on_failure(load, load_command, load_out, f"loading on {target.label}")
    return sent


def _pump(
    save: subprocess.Popen[bytes], load: subprocess.Popen[bytes], report: Callable[[str], None]
) -> tuple[int, bool]:
    """Copy save's stdout into load's stdin: (bytes copied, whether load went away first)."""
    assert save.stdout is not None
    assert load.stdin is not None
    sent, last_report, load_gone = 0, time.monotonic(), False
    try:
        while chunk := save.stdout.read(_CHUNK_BYTES):
            load.stdin.write(chunk)
            sent += len(chunk)
            if time.monotonic() - last_report >= _PROGRESS_EVERY_S:
                report(f"sent {sent / 2**30:.2f} GiB")
                last_report = time.monotonic()
        # The target still unpacks the layers: on a 4 GB image that is most of the time.
        report(f"sent {sent / 2**30:.2f} GiB, all of it; waiting for docker load to finish")
    except BrokenPipeError:
        load_gone = True
        save.kill()  # nobody reads it any more; load's own output says what went wrong
    finally:
        save.stdout.close()
        with suppress(BrokenPipeError):
            load.stdin.close()
    save.wait()
    load.wait()
    return sent, load_gone


def _kill(expired: threading.Event, *processes: subprocess.Popen[bytes]) -> None:
    expired.set()
    _kill_if_running(*processes)


def _kill_if_running(*processes: subprocess.Popen[bytes]) -> None:
    for process in processes:
        if process.poll() is None:
            process.kill()
            process.wait()


def _raise_on_failure(
    process: subprocess.Popen[bytes], command: list[str], output: IO[bytes], what: str
) -> None:
    if process.returncode == 0:
        return
    output.seek(0)
    text = output.read(1 << 20).decode(errors="replace")
    raise DockerError(
        f"{what} failed (exit {process.returncode}): {last_lines(text, 6)}",
        command=command,
        output=text,
        hint="free disk space on that engine's data root if it says so; else read the output",
    )


def _check_loaded(missing: dict[str, str], target: DockerEndpoint) -> None:
    for tag, wanted in missing.items():
        found = image_id(target, tag)
        if found != wanted:
            raise DockerError(
                f"{tag} on {target.label} is {found or 'missing'} after loading, not {wanted}",
                command=["docker", *target.cli_args(), "image", "inspect", tag],
                output="",
                hint="another process may have retagged it meanwhile; run again",
            )
