"""``pulsarcast cluster up|status|down``: a local Kubo cluster that outlives the command.

``up`` starts N daemons (docs/protocol.md §2 configuration) detached from the terminal
and records them in a state directory; ``status`` and ``down`` find them there
from any other process.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import anyio
from rich.console import Console
from rich.table import Table

from pulsarcast_ipfs.cli._output import table_console
from pulsarcast_ipfs.cluster import ClusterConfig, ClusterError, LocalCluster, default_state_dir
from pulsarcast_ipfs.kubo import KuboError
from pulsarcast_ipfs.tools import ToolNotFound

__all__ = ["add_parser", "node_rows", "print_status"]


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "cluster",
        help="start, inspect and stop a local Kubo cluster",
        description="A local cluster of Kubo daemons on loopback, connected into a LAN DHT.",
    )
    state_help = f"where the cluster's state and repos live (default: {default_state_dir()})"
    p.add_argument("--state-dir", type=Path, default=None, help=state_help)
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    # --state-dir is also taken after the action (`cluster up -n 3 --state-dir D`);
    # SUPPRESS keeps an omitted one from overwriting the value given before it.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--state-dir", type=Path, default=argparse.SUPPRESS, help=state_help)

    up = actions.add_parser("up", help="start N Kubo daemons and connect them", parents=[common])
    up.add_argument("-n", "--nodes", type=int, default=4, help="number of nodes (default 4)")
    up.add_argument(
        "--toxiproxy",
        action="store_true",
        help="put a Toxiproxy proxy in front of every node's swarm port",
    )
    up.add_argument(
        "--pubsub",
        choices=["gossipsub", "floodsub"],
        default=None,
        help="enable Kubo's own pubsub with this router (for baselines)",
    )
    up.add_argument(
        "--timeout", type=float, default=90.0, help="seconds to wait for the DHT (default 90)"
    )
    up.set_defaults(handler=_up)

    status = actions.add_parser("status", help="show the running cluster's nodes", parents=[common])
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.set_defaults(handler=_status)

    down = actions.add_parser(
        "down", help="stop every daemon and remove the cluster's files", parents=[common]
    )
    down.set_defaults(handler=_down)


def _state_dir(args: argparse.Namespace) -> Path:
    return Path(args.state_dir) if args.state_dir else default_state_dir()


def _up(args: argparse.Namespace) -> int:
    console = Console(stderr=True)
    state_dir = _state_dir(args)
    try:
        existing = LocalCluster.load(state_dir)
    except ClusterError:
        existing = None
    if existing is not None:
        if any(n.is_running() for n in existing.nodes):
            console.print(
                f"[red]error:[/red] a cluster is already running (state in {state_dir}); "
                "run `pulsarcast cluster down` first"
            )
            return 1
        existing.stop_now()
    try:
        config = ClusterConfig(
            nodes=args.nodes,
            toxiproxy=args.toxiproxy,
            pubsub_router=args.pubsub,
            table_timeout=args.timeout,
            base_dir=state_dir / "nodes",
        )
    except ValueError as exc:
        console.print(f"[red]error:[/red] {exc}")
        return 2
    cluster = LocalCluster(config=config, detached=True)

    async def start() -> None:
        with console.status("starting the cluster") as spinner:
            await cluster.start(progress=lambda msg: spinner.update(msg))

    try:
        anyio.run(start)
    except (ClusterError, ToolNotFound, KuboError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        return 1
    except BaseException:
        cluster.stop_now()
        raise
    cluster.save_state(state_dir)
    console.print(
        f"[green]{len(cluster)} Kubo nodes up[/green] in {cluster.startup_seconds:.1f} s "
        f"(state in {state_dir})"
    )
    print_status(cluster)
    return 0


async def node_rows(cluster: LocalCluster) -> list[dict[str, Any]]:
    """One dict per node: identity, addresses, liveness, routing-table size, memory."""
    rows: list[dict[str, Any]] = []
    for node in cluster.nodes:
        row: dict[str, Any] = {
            "name": node.name,
            "peer_id": node.peer_id,
            "api": node.api_url,
            "swarm": node.swarm_address,
            "announce": node.announce_address,
            "pid": node.pid,
            "running": node.is_running(),
            "lan_peers": None,
            "connected": None,
            "rss_mib": None,
        }
        if row["running"]:
            try:
                async with node.client(timeout=5.0) as kubo:
                    row["lan_peers"] = len((await kubo.stats_dht()).peers("lan"))
                    row["connected"] = len(await kubo.swarm_peers())
                row["rss_mib"] = round(node.memory_rss() / 2**20, 1)
            except (KuboError, ClusterError):
                row["running"] = False
        rows.append(row)
    return rows


def print_status(cluster: LocalCluster, *, as_json: bool = False) -> None:
    rows = anyio.run(node_rows, cluster)
    if as_json:
        print(json.dumps({"nodes": rows, "toxiproxy": cluster.toxiproxy_url or None}, indent=2))
        return
    table = Table(title=f"local Kubo cluster ({len(rows)} nodes)")
    for col in ("node", "peer ID", "API", "dial address", "pid", "up", "LAN DHT", "conns", "RSS"):
        # IDs and addresses fold onto further lines in a narrow terminal, never cut
        wide = col in ("peer ID", "API", "dial address")
        table.add_column(col, overflow="fold", min_width=10 if wide else None, no_wrap=not wide)
    for r in rows:
        table.add_row(
            r["name"],
            r["peer_id"],
            r["api"],
            r["announce"] or r["swarm"],
            str(r["pid"]),
            "[green]yes[/green]" if r["running"] else "[red]no[/red]",
            "-" if r["lan_peers"] is None else str(r["lan_peers"]),
            "-" if r["connected"] is None else str(r["connected"]),
            "-" if r["rss_mib"] is None else f"{r['rss_mib']} MiB",
        )
    table_console().print(table)


def _status(args: argparse.Namespace) -> int:
    try:
        cluster = LocalCluster.load(_state_dir(args))
    except ClusterError as exc:
        Console(stderr=True).print(f"[red]error:[/red] {exc}")
        return 1
    print_status(cluster, as_json=args.json)
    return 0 if all(n.is_running() for n in cluster.nodes) else 1


def _down(args: argparse.Namespace) -> int:
    console = Console(stderr=True)
    state_dir = _state_dir(args)
    try:
        cluster = LocalCluster.load(state_dir)
    except ClusterError as exc:
        console.print(f"[red]error:[/red] {exc}")
        return 1
    with console.status(f"stopping {len(cluster)} nodes"):
        cluster.stop_now()
    (state_dir / "cluster.json").unlink(missing_ok=True)
    console.print(f"[green]stopped[/green] {len(cluster)} nodes and removed {cluster.base_dir}")
    return 0
