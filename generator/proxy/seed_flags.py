"""The seed proxy's flags (LMCache examples/disagg_prefill/xpyd/disagg_proxy_server.py),
mapped to a ProxyConfig. Differences, on purpose:

- ``--decoder-init-port``/``--decoder-alloc-port`` give decoder 0's per-TP-rank list; decoder i
  gets the same list shifted by ``i * len(list)``, so blocks never overlap (the seed shifts by
  ``i`` and overlaps as soon as TP > 1). ``;`` separates explicit per-decoder lists.
- ``CLIENT_BOUND``/``CLIENT_BOUND_KEY`` turn on session stickiness as in the seed.
"""

from __future__ import annotations

import argparse
import os
import re

from pydantic import ValidationError

from generator.proxy.config import (
    BackendConfig,
    DecoderConfig,
    ListenConfig,
    NotifyConfig,
    ProxyConfig,
    describe,
)

__all__ = ["MAX_INSTANCES", "add_seed_flags", "config_from_seed_flags", "count", "port"]

# More engines than any one proxy routes (the seed's flags would otherwise build a billion
# backends from ``--num-prefillers 1000000000`` and run out of memory).
MAX_INSTANCES = 1024
_ASCII_NUMBER = re.compile(r"[0-9]{1,10}")  # str.isdigit and int() also take other scripts' digits


def _number(text: str, what: str, low: int, high: int) -> int:
    value = text.strip()
    if not _ASCII_NUMBER.fullmatch(value) or not low <= int(value) <= high:
        raise argparse.ArgumentTypeError(f"{text!r} is not a {what} ({low}-{high})")
    return int(value)


def port(text: str) -> int:
    """An argparse type: a TCP port in ASCII digits."""
    return _number(text, "port", 1, 65535)


def count(text: str) -> int:
    """An argparse type: an instance count, 1 to MAX_INSTANCES."""
    return _number(text, "count", 1, MAX_INSTANCES)


def add_seed_flags(parser: argparse.ArgumentParser) -> None:
    seed = parser.add_argument_group("seed-compatible flags (instead of --config)")
    seed.add_argument("--host", default="0.0.0.0", help="HTTP listen address")
    seed.add_argument("--port", type=port, default=9100, help="HTTP listen port")
    seed.add_argument("--prefiller-host", help="CSV of prefiller hosts (one, or one per prefiller)")
    seed.add_argument("--prefiller-port", help="CSV of prefiller ports (one, or one per prefiller)")
    seed.add_argument("--num-prefillers", type=count, help="prefiller count (default: longest CSV)")
    seed.add_argument("--decoder-host", help="CSV of decoder hosts")
    seed.add_argument("--decoder-port", help="CSV of decoder ports")
    seed.add_argument("--num-decoders", type=count, help="decoder count (default: longest CSV)")
    seed.add_argument("--decoder-init-port", help="per-TP-rank CSV; ';' between decoders")
    seed.add_argument("--decoder-alloc-port", help="per-TP-rank CSV; ';' between decoders")
    seed.add_argument(
        "--proxy-host", default="0.0.0.0", help="ZMQ bind address for KV-sent notices"
    )
    seed.add_argument("--proxy-port", type=port, default=7500, help="ZMQ port for KV-sent notices")
    seed.add_argument("--protocol", choices=["lmcache-pd", "nixl"], default="lmcache-pd")


def _csv(text: str | None, what: str) -> list[str]:
    values = [part.strip() for part in (text or "").split(",") if part.strip()]
    if not values:
        raise SystemExit(f"error: --{what} is required without --config")
    if len(values) > MAX_INSTANCES:
        raise SystemExit(f"error: --{what} has {len(values)} entries (at most {MAX_INSTANCES})")
    return values


def _expand(values: list[str], count: int, what: str) -> list[str]:
    if len(values) == 1:
        return values * count
    if len(values) != count:
        raise SystemExit(
            f"error: --{what} has {len(values)} entries for {count} instances (give 1 or {count})"
        )
    return values


def _port(text: str, what: str) -> int:
    try:
        return port(text)
    except argparse.ArgumentTypeError:
        raise SystemExit(f"error: --{what}: {text!r} is not a port (1-65535)") from None


def _rank_ports(text: str | None, count: int, what: str) -> list[list[int]]:
    groups = [
        [_port(p, what) for p in _csv(group, what)]
        for group in (text or "").split(";")
        if group.strip()
    ]
    if not groups:
        raise SystemExit(f"error: --{what} is required for lmcache-pd")
    if len(groups) == 1:
        base = groups[0]
        return [[port + index * len(base) for port in base] for index in range(count)]
    if len(groups) != count:
        raise SystemExit(f"error: --{what} has {len(groups)} ';'-groups for {count} decoders")
    return groups


def config_from_seed_flags(args: argparse.Namespace) -> ProxyConfig:
    """The config the seed proxy's flags describe; SystemExit with one line if they are wrong."""
    try:
        return _from_seed_flags(args)
    except ValidationError as exc:
        raise SystemExit(f"error: {describe(exc)}") from exc


def _from_seed_flags(args: argparse.Namespace) -> ProxyConfig:
    p_hosts, p_ports = (
        _csv(args.prefiller_host, "prefiller-host"),
        _csv(args.prefiller_port, "prefiller-port"),
    )
    d_hosts, d_ports = (
        _csv(args.decoder_host, "decoder-host"),
        _csv(args.decoder_port, "decoder-port"),
    )
    n_p = args.num_prefillers or max(len(p_hosts), len(p_ports))
    n_d = args.num_decoders or max(len(d_hosts), len(d_ports))
    p_hosts, d_hosts = (
        _expand(p_hosts, n_p, "prefiller-host"),
        _expand(d_hosts, n_d, "decoder-host"),
    )
    p_numbers = [_port(p, "prefiller-port") for p in _expand(p_ports, n_p, "prefiller-port")]
    d_numbers = [_port(p, "decoder-port") for p in _expand(d_ports, n_d, "decoder-port")]
    lmcache = args.protocol == "lmcache-pd"
    init = _rank_ports(args.decoder_init_port, n_d, "decoder-init-port") if lmcache else [[]] * n_d
    alloc = (
        _rank_ports(args.decoder_alloc_port, n_d, "decoder-alloc-port") if lmcache else [[]] * n_d
    )
    tp = max(1, len(init[0]))  # lmcache-pd pairs prefill and decode ranks one to one
    prefill = [
        BackendConfig(name=f"prefill-{i}", url=f"http://{host}:{port}", tp=tp)
        for i, (host, port) in enumerate(zip(p_hosts, p_numbers, strict=True))
    ]
    decode = [
        DecoderConfig(
            name=f"decode-{i}",
            url=f"http://{host}:{port}",
            tp=max(1, len(init[i])),
            kv_host=host if lmcache else None,
            init_ports=init[i],
            alloc_ports=alloc[i],
        )
        for i, (host, port) in enumerate(zip(d_hosts, d_numbers, strict=True))
    ]
    bound = os.environ.get("CLIENT_BOUND", "").lower() in ("1", "true", "yes")
    return ProxyConfig(
        protocol=args.protocol,
        listen=ListenConfig(host=args.host, port=args.port),
        prefill=prefill,
        decode=decode,
        notify=NotifyConfig(bind_host=args.proxy_host, port=args.proxy_port) if lmcache else None,
        session_header=os.environ.get("CLIENT_BOUND_KEY", "session-id") if bound else None,
    )
