"""``pulsarcast demo`` (``make demo``): for now, a local 4-node Kubo cluster's round trip.

Starts four Kubo daemons as PROTOCOL.md §2 configures them, prints their status
(peer IDs, addresses, routing-table sizes, memory) and stops them again.
"""

from __future__ import annotations

import argparse
from typing import Any

import anyio
from rich.console import Console

from pulsarcast_ipfs.cli._cluster import print_status
from pulsarcast_ipfs.kubo import KuboError
from pulsarcast_ipfs.testing import ClusterConfig, ClusterError, LocalCluster
from pulsarcast_ipfs.tools import ToolNotFound

__all__ = ["add_parser"]


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "demo",
        help="run the demonstration (a local Kubo cluster for now)",
        description="Start a local Kubo cluster, show its status and stop it.",
    )
    p.add_argument("-n", "--nodes", type=int, default=4, help="number of nodes (default 4)")
    p.set_defaults(handler=_demo)


def _demo(args: argparse.Namespace) -> int:
    console = Console(stderr=True)
    try:
        cluster = LocalCluster(config=ClusterConfig(nodes=args.nodes))
    except ValueError as exc:
        console.print(f"[red]error:[/red] {exc}")
        return 2

    async def start() -> None:
        with console.status("starting the cluster") as spinner:
            await cluster.start(progress=lambda msg: spinner.update(msg))

    try:
        anyio.run(start)
        console.print(f"[green]{len(cluster)} nodes up[/green] in {cluster.startup_seconds:.1f} s")
        print_status(cluster)
    except (ClusterError, ToolNotFound, KuboError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        return 1
    finally:
        cluster.stop_now()
    console.print("[green]cluster stopped[/green]")
    return 0
