"""Running the KV probe in tests: where torch+nixl can be found, and reading its reports."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import nixl_kv_probe

PROBE = Path(nixl_kv_probe.__file__).resolve()
ENGINE_REPOSITORIES = ("xpyd/engine-base", "xpyd/prefill", "xpyd/decode")
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
    explicit = os.environ.get("XPYD_NIXL_PYTHON")
    if explicit:
        return explicit
    if find_spec("nixl") is not None and find_spec("torch") is not None:
        return sys.executable
    return None


def engine_image() -> str | None:
    docker = shutil.which("docker")
    if docker is None:
        return None
    listed = subprocess.run(
        [docker, "images", "--format", "{{.Repository}}:{{.Tag}}"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    names = listed.stdout.split() if listed.returncode == 0 else []
    return next((name for name in names if name.split(":")[0] in ENGINE_REPOSITORIES), None)
