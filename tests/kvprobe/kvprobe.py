"""Running the KV probe in tests: where torch+nixl can be found, and reading its reports."""

from __future__ import annotations

import json
import os
import socket
import sys
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from generator.kvprobe import nixl_kv_probe
from tests.conftest import ROOT

PROBE = Path(nixl_kv_probe.__file__).resolve()
NO_NIXL = "needs a Python with torch+nixl: set XPYD_NIXL_PYTHON to one"


def json_lines(text: str) -> dict[str, dict[str, Any]]:
    """The probes' reports by role (stdout holds nothing else)."""
    reports = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    return {report["role"]: report for report in reports}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def nixl_python() -> str | None:
    """XPYD_NIXL_PYTHON, the Python running the tests if it has torch+nixl, or the one
    .ci/setup makes (.cache/nixl-venv)."""
    explicit = os.environ.get("XPYD_NIXL_PYTHON")
    if explicit:
        return explicit
    if find_spec("nixl") is not None and find_spec("torch") is not None:
        return sys.executable
    made = ROOT / ".cache" / "nixl-venv" / "bin" / "python"
    return str(made) if made.exists() else None
