"""``pulsarcast collect``: metric records of many sidecars into one Parquet dataset."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["add_parser", "add_source_args", "api_sources", "cluster_sources", "run"]

_DESCRIPTION = """\
Pull the metric records every sidecar serves at GET /v1/records into a Parquet
dataset below OUT, partitioned by run and node (OUT/run=RUN/node=PEER/*.parquet).
Resumable: each source's cursor is kept in OUT/_collect_state.json, so a second
run fetches only what is new and never writes a record twice. Then:
  pulsarcast report OUT/run=RUN --out REPORT_DIR"""

SIDECARS_FILE = "sidecars.json"
"""What a local sidecar cluster writes into its directory (``--cluster DIR``)."""


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "collect",
        help="pull metric records from sidecars into a Parquet dataset (resumable)",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("out", metavar="OUT", help="output directory of the dataset")
    add_source_args(p)
    p.add_argument(
        "--page",
        type=int,
        default=5000,
        metavar="N",
        help="records per request (1..10000, default 5000)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(handler=run)


def add_source_args(p: argparse.ArgumentParser) -> None:
    """``--api`` (repeated), ``--api-file``, ``--cluster`` and ``--token``: which
    sidecars to reach and how (read back by :func:`api_sources`)."""
    p.add_argument(
        "--api",
        dest="sources",
        action="append",
        default=[],
        metavar="URL",
        help="a sidecar's API (URL, HOST:PORT or multiaddr); repeat for each sidecar",
    )
    p.add_argument(
        "--api-file",
        metavar="FILE",
        help="a file of sidecar APIs, one per line (# starts a comment)",
    )
    p.add_argument(
        "--cluster",
        metavar="DIR",
        help=f"a local sidecar cluster's directory (its {SIDECARS_FILE} names every sidecar)",
    )
    p.add_argument(
        "--token",
        default=None,
        metavar="TOKEN",
        help="bearer token for the sidecars (env PULSARCAST_API_TOKEN)",
    )


def _err(msg: str) -> int:
    print(f"Error: {msg}", file=sys.stderr)
    return 1


def cluster_sources(directory: Path) -> list[str]:
    """The sidecar APIs listed in ``directory/sidecars.json``."""
    path = directory / SIDECARS_FILE
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        return [str(s["api"]) for s in doc["sidecars"]]
    except FileNotFoundError:
        raise ValueError(f"no sidecar cluster in {directory} (no {SIDECARS_FILE})") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"unreadable {path}: {exc}") from None


def api_sources(args: argparse.Namespace) -> list[str]:
    """The sidecar URLs that :func:`add_source_args`' options name, each once."""
    from pulsarcast_ipfs.sdk._types import normalise_api

    raw: list[str] = list(args.sources)
    if args.api_file:
        try:
            text = Path(args.api_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"cannot read --api-file {args.api_file}: {exc}") from None
        for line in text.splitlines():
            line = line.split("#", 1)[0].strip()
            if line:
                raw.append(line)
    if args.cluster:
        raw += cluster_sources(Path(args.cluster))
    if not raw:
        raise ValueError("no sources: give --api URL (repeated), --api-file FILE or --cluster DIR")
    urls: list[str] = []
    for s in raw:
        url = normalise_api(s)
        if url not in urls:
            urls.append(url)
    return urls


def run(args: argparse.Namespace) -> int:
    from pulsarcast_ipfs.collect import CollectError, Collector

    if not 1 <= args.page <= 10_000:
        return _err("--page must be 1..10000")
    try:
        urls = api_sources(args)
    except ValueError as exc:
        return _err(str(exc))
    token = args.token or os.environ.get("PULSARCAST_API_TOKEN") or None

    def progress(msg: str) -> None:
        if not args.quiet:
            print(f"collect: {msg}", file=sys.stderr, flush=True)

    started = time.monotonic()
    try:
        collector = Collector(Path(args.out), token=token, page_limit=args.page, progress=progress)
        results = collector.collect(urls)
    except CollectError as exc:
        return _err(str(exc))
    failed = 0
    total = 0
    for r in results:
        if r.error:
            failed += 1
            print(f"Error: {r.error}", file=sys.stderr)
            continue
        total += r.records
        extra = f", {r.kept_as_json} kept as JSON (off the schema)" if r.kept_as_json else ""
        print(f"{r.url}  run {r.run}  node {r.node}: {r.records:,} new records{extra}")
    print(
        f"collected {total:,} new records from {len(results) - failed} of {len(results)} "
        f"sources into {args.out} in {time.monotonic() - started:.1f} s"
    )
    return 1 if failed else 0
