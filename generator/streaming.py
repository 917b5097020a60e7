"""Run a command with its output streamed line by line to a callback (progress on long work),
keeping the last lines for the error message when it fails."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Mapping, Sequence

__all__ = ["stream_command"]


def stream_command(
    command: Sequence[str],
    on_line: Callable[[str], None],
    *,
    keep_lines: int,
    env: Mapping[str, str] | None = None,
) -> tuple[int, str]:
    """(exit status, the last ``keep_lines`` lines of its stdout and stderr); ``env``: its
    environment (default: ours)."""
    with subprocess.Popen(
        list(command), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    ) as process:
        assert process.stdout is not None
        lines: list[str] = []
        for line in process.stdout:
            lines.append(line.rstrip())
            del lines[:-keep_lines]
            on_line(line.rstrip())
        return process.wait(), "\n".join(lines)
