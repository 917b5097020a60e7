"""A picture of Prometheus's own graph page for one query over a window, taken with headless
Chromium: what a reader of a benchmark report looks at to see the KV path's speed during the
run as Prometheus itself draws it (no Grafana needed)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import urllib.parse
from pathlib import Path
from typing import Final

from generator.errors import StackError
from generator.plan import Plan
from generator.probes.prometheus import prometheus_url

__all__ = ["BROWSERS", "find_browser", "graph_url", "screenshot_graph"]

# Debian's package installs /usr/bin/chromium; other distributions name it differently.
BROWSERS: Final = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
_WINDOW: Final = "1600,1000"
# Prometheus's page is a React app that fetches the series after it loads: the browser's
# virtual clock runs this long before the picture is taken (idle network ends it sooner).
_RENDER_BUDGET_MS: Final = 15000
_TIMEOUT_S: Final = 120.0


def find_browser() -> str | None:
    override = os.environ.get("XPYD_CHROMIUM")
    if override:
        return override
    return next((found for name in BROWSERS if (found := shutil.which(name))), None)


def graph_url(plan: Plan, expr: str, range_s: float) -> str:
    """Prometheus 2's graph page with ``expr`` drawn over the last ``range_s`` seconds."""
    minutes = max(1, round(range_s / 60 + 0.5))
    query = urllib.parse.urlencode(
        {"g0.expr": expr, "g0.tab": "0", "g0.range_input": f"{minutes}m", "g0.stacked": "0"}
    )
    return f"{prometheus_url(plan)}/graph?{query}"


def screenshot_graph(plan: Plan, expr: str, range_s: float, target: Path) -> Path:
    """``target`` (a PNG) showing ``expr`` over the last ``range_s`` seconds. StackError when
    no Chromium is installed or it gave no picture (the reason from its own output)."""
    browser = find_browser()
    if browser is None:
        raise StackError(
            "no Chromium to take a picture of Prometheus's graph page with",
            hint="install it (Debian: apt-get install chromium) or name one in XPYD_CHROMIUM",
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    target.unlink(missing_ok=True)
    command = [
        browser,
        "--headless",
        "--disable-gpu",
        "--hide-scrollbars",
        *(["--no-sandbox"] if os.geteuid() == 0 else []),  # Chromium refuses root otherwise
        f"--window-size={_WINDOW}",
        f"--virtual-time-budget={_RENDER_BUDGET_MS}",
        f"--screenshot={target}",
        graph_url(plan, expr, range_s),
    ]
    try:
        done = subprocess.run(
            command, check=False, capture_output=True, text=True, timeout=_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        raise StackError(
            f"{browser} took more than {_TIMEOUT_S:.0f} s to draw Prometheus's graph page",
            hint=f"open {graph_url(plan, expr, range_s)} yourself",
        ) from None
    if done.returncode != 0 or not target.is_file():
        said = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise StackError(
            f"{browser} gave no picture of Prometheus's graph page (exit {done.returncode}): "
            + " / ".join(said),
            hint=f"run it yourself: {shlex.join(command)}",
        )
    return target
