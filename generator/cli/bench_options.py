"""bench's load options as text: sweeps of rates and concurrencies, the goodput SLO, each
value bounded by what a run can finish within."""

from __future__ import annotations

import re

import typer

from generator.datasets.base import MAX_PROMPTS, MAX_TOKENS

__all__ = [
    "MAX_CONCURRENCY",
    "MAX_LOAD_POINTS",
    "MAX_PROMPTS",
    "MAX_RATE_PER_S",
    "MAX_SEED",
    "MAX_SLO_MS",
    "MAX_TOKENS",
    "MIN_RATE_PER_S",
    "check_sweep",
    "parse_concurrencies",
    "parse_goodput",
    "parse_rates",
]

_SLO_METRICS = ("ttft", "tpot", "e2el")
# Bounds a run can finish within (a rate of 1e-300 req/s never sends its second request;
# prompts and their tokens: generator/datasets/base.py); the seed is numpy's (vLLM's
# benchmark seeds numpy, which takes 32 bits).
MIN_RATE_PER_S = 0.001
MAX_RATE_PER_S = 1e6
MAX_CONCURRENCY = 1_000_000
MAX_SEED = 2**32 - 1
MAX_SLO_MS = 86_400_000.0  # a day
# Each load point is a whole benchmark run (minutes, up to --point-timeout-s), per arm:
# 64 points of a minute are an hour an arm. A longer sweep is several runs.
MAX_LOAD_POINTS = 64
# ASCII only: Python's float() and int() also read other scripts' digits ("١٢").
_DECIMAL = re.compile(r"(?:[0-9]{1,12}(?:\.[0-9]{0,12})?|\.[0-9]{1,12})(?:[eE][+-]?[0-9]{1,3})?")
_WHOLE = re.compile(r"[0-9]{1,7}")


def parse_rates(text: str) -> tuple[float | None, ...]:
    """``1,2,inf``: requests per second at each point; ``inf``: all at once."""
    rates: list[float | None] = []
    for item in _items(text, "--request-rate"):
        if item.lower() == "inf":
            rates.append(None)
            continue
        if not _DECIMAL.fullmatch(item):
            raise typer.BadParameter(f"{item!r} is not a number (or inf)")
        rate = float(item)
        if not MIN_RATE_PER_S <= rate <= MAX_RATE_PER_S:
            raise typer.BadParameter(
                f"{item!r}: a rate is from {MIN_RATE_PER_S:g} to {MAX_RATE_PER_S:g} requests/s "
                "(or inf: all at once)"
            )
        rates.append(rate)
    return tuple(rates)


def parse_concurrencies(text: str) -> tuple[int | None, ...]:
    values: list[int | None] = []
    for item in _items(text, "--max-concurrency"):
        if not _WHOLE.fullmatch(item) or not 1 <= int(item) <= MAX_CONCURRENCY:
            raise typer.BadParameter(
                f"{item!r}: requests in flight must be a whole number from 1 to {MAX_CONCURRENCY}"
            )
        values.append(int(item))
    return tuple(values)


def parse_goodput(text: str) -> tuple[tuple[str, float], ...]:
    """``ttft:500,tpot:50``: a request is good when it meets every one (milliseconds)."""
    slo: dict[str, float] = {}
    for item in _items(text, "--goodput"):
        metric, _, value = item.partition(":")
        if metric not in _SLO_METRICS:
            raise typer.BadParameter(f"{metric!r} is not one of {', '.join(_SLO_METRICS)}")
        if not _DECIMAL.fullmatch(value):
            raise typer.BadParameter(f"{item!r}: write METRIC:MILLISECONDS, e.g. ttft:500")
        ms = float(value)
        if not 0 < ms <= MAX_SLO_MS:
            raise typer.BadParameter(f"{item!r}: milliseconds must be > 0 and at most a day")
        if metric in slo:
            raise typer.BadParameter(f"{metric} is given twice: give each metric once")
        slo[metric] = ms
    return tuple(slo.items())


def _items(text: str, option: str) -> list[str]:
    items = [item.strip() for item in text.split(",")]
    if not all(items):
        raise typer.BadParameter(f"{option} takes a comma-separated list, e.g. 1,2,4")
    if len(items) > MAX_LOAD_POINTS:
        raise typer.BadParameter(
            f"{option} lists {len(items)} values; a sweep has at most {MAX_LOAD_POINTS} "
            "points (each is a benchmark run): split it into several runs"
        )
    return items


def check_sweep(rates: tuple[object, ...], concurrencies: tuple[object, ...]) -> None:
    """Every rate runs at every concurrency: the product is the sweep."""
    points = len(rates) * len(concurrencies)
    if points > MAX_LOAD_POINTS:
        raise typer.BadParameter(
            f"{len(rates)} rates x {len(concurrencies)} concurrencies are {points} load points; "
            f"a sweep has at most {MAX_LOAD_POINTS} (each is a benchmark run): split it into "
            "several runs",
            param_hint="--request-rate, --max-concurrency",
        )
