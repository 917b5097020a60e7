"""generator/streaming.py with a real child process: every line to the callback, the tail kept."""

from __future__ import annotations

import sys

from generator.streaming import stream_command


def test_lines_stream_and_the_tail_is_kept() -> None:
    seen: list[str] = []
    code = "import sys\nfor i in range(50): print(i)\nprint('bad', file=sys.stderr); sys.exit(3)"
    status, tail = stream_command([sys.executable, "-c", code], seen.append, keep_lines=3)
    assert status == 3
    assert seen == [*map(str, range(50)), "bad"]
    assert tail == "48\n49\nbad"
