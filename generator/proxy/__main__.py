"""``python -m generator.proxy --config router.yaml`` (or the seed proxy's flags).

Expected failures at startup (no or a bad config, a port in use) end with one line on stderr
and exit 1; once listening it says where on stderr. SIGTERM or Ctrl+C stop it cleanly.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import resource
import signal
import socket
import sys
from pathlib import Path
from typing import NoReturn

from aiohttp import web

from generator.proxy.app import Proxy
from generator.proxy.config import ConfigError, ProxyConfig, load_config
from generator.proxy.errors import StartupError
from generator.proxy.guard import BadHttpFilter
from generator.proxy.seed_flags import add_seed_flags, config_from_seed_flags

_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_BACKLOG = 2048  # a burst of new connections waits in the kernel instead of being refused


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("aiohttp.server").addFilter(BadHttpFilter())
    try:
        config = load_config(args.config) if args.config else config_from_seed_flags(args)
        _raise_open_file_limit(config)
        _fast_event_loop()
        asyncio.run(_serve(config, access_log=args.access_log or config.access_log))
    except (ConfigError, StartupError) as exc:
        sys.exit(f"error: {exc}")


class _OneLineParser(argparse.ArgumentParser):
    """Bad flags end like every other startup failure: one line, exit 1 (no usage block)."""

    def error(self, message: str) -> NoReturn:
        sys.exit(f"error: {message} (see --help)")


def _parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(
        prog="python -m generator.proxy",
        description="P/D proxy: prefill on one vLLM instance, decode on another.",
    )
    parser.add_argument(
        "--config", type=Path, help="router.yaml rendered by `python -m generator render`"
    )
    parser.add_argument(
        "--log-level", default="INFO", type=str.upper, choices=_LEVELS, help="default: INFO"
    )
    parser.add_argument(
        "--access-log",
        action="store_true",
        help="one line per request on stderr (or `access_log: true` in the config)",
    )
    add_seed_flags(parser)
    return parser


async def _serve(config: ProxyConfig, *, access_log: bool) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    listener = _bind(config)  # first: a port in use is the only line printed
    runner = Proxy(config).runner(access_log=access_log)
    try:
        await runner.setup()
        await web.SockSite(runner, listener).start()
        sides = f"{len(config.prefill)} prefiller(s), {len(config.decode)} decoder(s)"
        host, port = config.listen.host, config.listen.port
        print(
            f"xpyd proxy listening on http://{host}:{port} ({config.protocol}, {sides})",
            file=sys.stderr,
            flush=True,
        )
        await stop.wait()
    finally:
        await runner.cleanup()
        listener.close()


def _bind(config: ProxyConfig) -> socket.socket:
    host, port = config.listen.host, config.listen.port
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family, backlog=_BACKLOG)
    except OSError as exc:
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        raise StartupError(f"cannot listen on {host}:{port}: {reason}") from exc


def _raise_open_file_limit(config: ProxyConfig) -> None:
    """Each request in flight holds two sockets; a soft limit of 1024 (common) would refuse new
    connections, health checks included, long before the concurrency cap answers 503."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or hard > soft):
        wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError):  # a kernel cap below the hard limit: keep what we have
            pass
    needed = 2 * config.limits.max_concurrent_requests + 256
    if soft != resource.RLIM_INFINITY and soft < needed:
        logging.getLogger("xpyd.proxy").warning(
            "open-file limit %d is below the %d that limits.max_concurrent_requests needs",
            soft,
            needed,
        )


def _fast_event_loop() -> None:
    """uvloop when installed (the router image has it): measured faster for this proxy."""
    try:
        import uvloop
    except ImportError:
        return
    uvloop.install()


if __name__ == "__main__":
    main()
