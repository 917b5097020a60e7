"""``python -m generator.proxy --config router.yaml`` (or the seed proxy's flags)."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from aiohttp import web

from generator.proxy.app import Proxy
from generator.proxy.config import load_config
from generator.proxy.seed_flags import add_seed_flags, config_from_seed_flags


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m generator.proxy",
        description="P/D proxy: prefill on one vLLM instance, decode on another.",
    )
    parser.add_argument(
        "--config", type=Path, help="router.yaml rendered by `python -m generator render`"
    )
    parser.add_argument("--log-level", default="INFO")
    add_seed_flags(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    config = load_config(args.config) if args.config else config_from_seed_flags(args)
    proxy = Proxy(config)
    _fast_event_loop()
    web.run_app(
        proxy.app(),
        host=config.listen.host,
        port=config.listen.port,
        access_log=None,
        print=lambda _: None,
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
