"""The picture of Prometheus's graph page: the URL Prometheus 2's page reads its query from,
and clear refusals when there is no browser or it draws nothing. (A real picture, by Debian's
Chromium of a live Prometheus: tests/integration/test_cpu_lmcache_pd.py.)"""

from __future__ import annotations

import os
import urllib.parse
from pathlib import Path

import pytest

from generator.errors import StackError
from generator.observe.rules import KV_GIB_S
from generator.paths import Workspace
from generator.probes.prometheus_page import graph_url, screenshot_graph
from tests.observe.helpers import observed_plan


def test_the_url_names_the_query_and_a_window_covering_the_run(workspace: Workspace) -> None:
    plan = observed_plan(workspace, "cpu-lmcache-pd")
    assert plan.observe is not None
    url = urllib.parse.urlsplit(graph_url(plan, KV_GIB_S, 130))
    assert (url.hostname, url.port) == ("127.0.0.1", plan.observe.prometheus_port)
    assert url.path == "/graph"
    asked = dict(urllib.parse.parse_qsl(url.query))
    assert asked["g0.expr"] == KV_GIB_S
    assert asked["g0.tab"] == "0"  # the graph, not the table
    assert asked["g0.range_input"] == "3m"  # 130 s rounded up to whole minutes


def test_no_browser_is_a_clear_error(
    workspace: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("XPYD_CHROMIUM", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no chromium on it
    with pytest.raises(StackError) as caught:
        screenshot_graph(observed_plan(workspace, "cpu-1p1d"), "up", 60, tmp_path / "p.png")
    assert "no Chromium" in caught.value.message
    assert "apt-get install chromium" in (caught.value.hint or "")


def test_a_browser_that_draws_nothing_says_why(
    workspace: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    browser = tmp_path / "browser"
    browser.write_text("#!/bin/sh\necho 'cannot open display' >&2\nexit 3\n")
    os.chmod(browser, 0o755)
    monkeypatch.setenv("XPYD_CHROMIUM", str(browser))
    target = tmp_path / "old.png"
    target.write_bytes(b"an earlier picture")
    with pytest.raises(StackError) as caught:
        screenshot_graph(observed_plan(workspace, "cpu-1p1d"), "up", 60, target)
    assert "(exit 3): cannot open display" in caught.value.message
    assert not target.exists()  # an earlier run's picture is never passed off as this one's
