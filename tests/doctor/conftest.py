"""Process mode builds namespaces with unshare: tests of it need root."""

from __future__ import annotations

import shutil
import subprocess

import pytest


@pytest.fixture(scope="module")
def namespaces() -> None:
    """Skip unless this process may make mount and PID namespaces (root, CAP_SYS_ADMIN)."""
    if shutil.which("unshare") is None:
        pytest.skip("util-linux `unshare` is not installed")
    trial = ["unshare", "--mount", "--propagation", "private", "--pid", "--fork", "--mount-proc"]
    done = subprocess.run([*trial, "true"], capture_output=True, text=True, timeout=10, check=False)
    if done.returncode != 0:
        pytest.skip(f"unshare not permitted here (process mode needs root): {done.stderr.strip()}")
