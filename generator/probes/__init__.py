"""Probes of a running stack: health waits (tenacity) and the smoke verdict."""

from generator.probes.smoke import SmokeResult, VerdictRow, run_smoke
from generator.probes.waits import Check, NotReady, wait_until_ready

__all__ = ["Check", "NotReady", "SmokeResult", "VerdictRow", "run_smoke", "wait_until_ready"]
