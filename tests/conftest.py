"""Shared fixtures. Tests that need a tool this machine may lack skip with a reason; CI sets
XPYD_REQUIRE_ALL=1 so that any such skip becomes a failure there."""

from __future__ import annotations

import copy
import os
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from generator.paths import Workspace

ROOT = Path(__file__).resolve().parent.parent

MINIMAL_GPU: dict[str, Any] = {
    "name": "t",
    "topology": "nixl-mp",
    "model": {"id": "org/model"},
    "hosts": [{"name": "h", "gpus": [0, 1, 2, 3]}],
}


def spec_dict(**changes: Any) -> dict[str, Any]:
    """A minimal valid spec with top-level keys replaced (``None`` removes a key)."""
    data = copy.deepcopy(MINIMAL_GPU)
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return data


@pytest.fixture
def workspace() -> Workspace:
    return Workspace(ROOT)


@pytest.fixture(autouse=True)
def _pin_workspace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XPYD_ROOT", str(ROOT))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if os.environ.get("XPYD_REQUIRE_ALL") and report.skipped:
        report.outcome = "failed"
        report.longrepr = (
            f"skipped, but CI requires every test (XPYD_REQUIRE_ALL=1): {report.longrepr}"
        )
    return report
