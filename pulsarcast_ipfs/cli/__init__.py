"""The ``pulsarcast`` command line: one sub-command module per area."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

__all__ = ["main"]


def build_parser() -> argparse.ArgumentParser:
    from pulsarcast_ipfs import __version__
    from pulsarcast_ipfs.cli import (
        _app,
        _bench,
        _check,
        _cluster,
        _collect,
        _dashboard,
        _demo,
        _report,
        _sim,
    )

    parser = argparse.ArgumentParser(
        prog="pulsarcast",
        description="Reliable, persistent, topic-based publish/subscribe for IPFS.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _cluster.add_parser(sub)
    _demo.add_parser(sub)
    _sim.add_parser(sub)
    _report.add_parser(sub)
    _collect.add_parser(sub)
    _dashboard.add_parser(sub)
    _bench.add_parser(sub)
    _check.add_parser(sub)
    _app.add_parsers(sub, root=parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = args.handler
    try:
        return int(handler(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
