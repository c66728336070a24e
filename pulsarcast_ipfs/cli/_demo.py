"""``pulsarcast demo`` (``make demo``): Pulsarcast end to end on one machine.

What it does, stage by stage (docs/protocol.md §5 for each operation):

1. starts a local cluster: N Kubo daemons (docs/protocol.md §2 configuration) with a
   ``pulsarcast-sidecar`` beside each (:class:`LocalSidecarCluster`), sidecars
   keeping one known peer per k-bucket so that a small cluster still grows trees
   with relays;
2. node0 creates an open topic ``news`` and a restricted topic ``alerts`` (only
   node0 may publish; nodes 1 and 2 may *request* to publish);
3. the other nodes subscribe (all to ``news``, all but the last to ``alerts``) and
   the demo waits until every subscriber has joined its tree;
4. events are published on ``news`` from three different nodes, node2 requests to
   publish on ``alerts`` (node0 publishes it for it), and the last node's publish
   on ``alerts`` is refused (the SDK's ``NotAllowed``, printed as the CLI would);
5. it waits for every expected delivery and prints them per node, then each node's
   role, parent and children per topic, and one node's view of the history;
6. it stops the sidecars gracefully, copies every node's metric records (docs/protocol.md
   §7) to ``--out`` (default ``./runs/demo-<timestamp>``) and tears the cluster
   down, also on Ctrl-C or an error.

Exit status 0 when every expected delivery arrived and the refusal was refused, 1
otherwise (with what is missing).
"""

from __future__ import annotations

import argparse
import functools
import shutil
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
from rich.console import Console
from rich.table import Table

from pulsarcast_ipfs.cluster import ClusterError, LocalSidecarCluster
from pulsarcast_ipfs.kubo import KuboError
from pulsarcast_ipfs.polling import poll_until
from pulsarcast_ipfs.sdk import AsyncClient, ClientConfig, Delivery, NotAllowed, SdkError
from pulsarcast_ipfs.tools import ToolNotFound

__all__ = ["add_parser"]

MIN_NODES = 5
MAX_NODES = 12
WAIT = 60.0  # seconds for trees to form and deliveries to arrive (root recheck: 10 s)


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "demo",
        help="run Pulsarcast end to end on a local cluster (make demo)",
        description=(
            "Start a local cluster (Kubo + sidecar per node), create an open and a "
            "restricted topic, subscribe nodes, publish (including a request to publish "
            "and a refused publish), show deliveries and trees, keep the metric records, "
            "tear everything down."
        ),
    )
    p.add_argument(
        "-n",
        "--nodes",
        type=int,
        default=6,
        help=f"number of nodes, {MIN_NODES}-{MAX_NODES} (default 6)",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="where to keep the metric records (default ./runs/demo-<timestamp>)",
    )
    p.set_defaults(handler=_demo)


@dataclass(slots=True)
class _Demo:
    console: Console
    n: int
    out: Path
    run: str
    sc: LocalSidecarCluster | None = None
    clients: list[AsyncClient] = field(default_factory=list)
    names: dict[str, str] = field(default_factory=dict)  # peer ID -> node name
    problems: list[str] = field(default_factory=list)

    def stage(self, text: str) -> None:
        self.console.print(f"\n[bold cyan]▶ {text}[/bold cyan]")

    def name(self, peer: str | None) -> str:
        if peer is None:
            return "-"
        return self.names.get(peer, peer[:8] + "…")


def _demo(args: argparse.Namespace) -> int:
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 120)
    if not MIN_NODES <= args.nodes <= MAX_NODES:
        console.print(f"[red]Error:[/red] --nodes must be in {MIN_NODES}..{MAX_NODES}")
        return 2
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    out = Path(args.out) if args.out else Path("runs") / f"demo-{stamp}"
    if out.exists() and any(out.iterdir()):
        console.print(f"[red]Error:[/red] {out} exists and is not empty; choose another --out")
        return 2
    demo = _Demo(console=console, n=args.nodes, out=out, run=f"demo-{stamp}")
    began = time.monotonic()
    try:
        anyio.run(_main, demo)
    except (ClusterError, ToolNotFound, KuboError, SdkError, TimeoutError) as exc:
        console.print(f"[red]Error:[/red] {exc}")
        return 1
    except KeyboardInterrupt:
        console.print("[yellow]interrupted: the cluster was torn down[/yellow]")
        return 130
    took = time.monotonic() - began
    if demo.problems:
        console.print(f"\n[red]demo finished in {took:.1f} s with problems:[/red]")
        for problem in demo.problems:
            console.print(f"  [red]✗[/red] {problem}")
        return 1
    console.print(f"\n[bold green]✓ demo finished in {took:.1f} s[/bold green]")
    return 0


async def _main(demo: _Demo) -> None:
    console = demo.console
    demo.stage(f"starting {demo.n} Kubo nodes, each with a pulsarcast-sidecar")
    sc = LocalSidecarCluster(nodes=demo.n, routing_k=1, run=demo.run)
    demo.sc = sc
    t0 = time.monotonic()
    try:
        with console.status("starting Kubo daemons and sidecars"):
            await sc.start()
        console.print(
            f"  {demo.n} nodes up in {time.monotonic() - t0:.1f} s (metric records: run {demo.run})"
        )
        demo.clients = [AsyncClient(config=ClientConfig(api=sc[i].api_url)) for i in range(demo.n)]
        await _nodes(demo)
        await _scenario(demo)
    finally:
        with anyio.CancelScope(shield=True):
            for client in demo.clients:
                await client.aclose()
            await _teardown(demo)


async def _nodes(demo: _Demo) -> None:
    assert demo.sc is not None
    table = Table(title="nodes", title_justify="left")
    for col in ("node", "peer ID", "sidecar API", "Kubo API"):
        table.add_column(col)
    for i, client in enumerate(demo.clients):
        status = await client.status()
        demo.names[status.peer_id] = f"node{i}"
        table.add_row(f"node{i}", status.peer_id, demo.sc[i].api_url, demo.sc[i].kubo.api_url)
    demo.console.print(table)


async def _wait(what: str, check: Callable[[], Awaitable[bool]]) -> bool:
    return await poll_until(check, deadline=WAIT, interval=0.2)


async def _scenario(demo: _Demo) -> None:
    console, c, n = demo.console, demo.clients, demo.n
    me = (await c[0].status()).peer_id
    requesters = [(await c[i].status()).peer_id for i in (1, 2)]

    demo.stage("node0 creates two topics")
    news = await c[0].create_topic("news")
    alerts = await c[0].create_topic(
        "alerts", allowed_publishers=[me], request_to_publish=requesters
    )
    console.print(f"  news    {news.cid}  (open: anyone may publish)")
    console.print(
        f"  alerts  {alerts.cid}  (only node0 publishes; node1 and node2 may request to publish)"
    )

    news_subs = list(range(1, n))
    alerts_subs = list(range(1, n - 1))
    demo.stage(
        f"subscribing node1-node{n - 1} to news and node1-node{n - 2} to alerts "
        "(joins travel towards node0 over the DHT)"
    )
    for i in news_subs:
        await c[i].subscribe(news.cid)
    for i in alerts_subs:
        await c[i].subscribe(alerts.cid)

    waiting: list[str] = []

    async def joined() -> bool:
        waiting.clear()
        for topic, subs in ((news, news_subs), (alerts, alerts_subs)):
            for i in subs:
                st = (await c[i].status()).topic(topic.cid)
                if st is None or not st.subscribed or st.parent is None:
                    role = "not in the tree" if st is None else f"{st.role}, no parent"
                    waiting.append(f"node{i} in {topic.name} ({role})")
        return not waiting

    if await _wait("the trees", joined):
        console.print("  every subscriber has a parent in its tree")
    else:
        demo.problems.append(
            f"not every subscriber joined its tree within {WAIT:.0f} s: " + "; ".join(waiting)
        )

    demo.stage("publishing")
    expected: dict[int, list[str]] = {i: [] for i in range(n)}
    for publisher, text in ((0, "hello from node0"), (2, "node2 says hi"), (n - 1, "last word")):
        out = await c[publisher].publish(news.cid, text, ack="local")
        console.print(f"  node{publisher} → news: {text!r}  event {out.event}")
        for i in [0, *news_subs]:
            expected[i].append(text)
        # One event at a time, so that each links to the previous one (LAST_SEEN) and
        # the history below is one chain; concurrent publishes would fork the DAG
        # (each event then links every head its publisher knows).
        arrived = functools.partial(_everywhere, c, out.event, news_subs)
        if not await _wait("an event", arrived):
            demo.problems.append(f"{text!r} did not reach every subscriber in {WAIT:.0f} s")
    out = await c[2].publish(alerts.cid, "node2 asks: storm warning", ack="local")
    console.print(
        f"  node2 → alerts: {out.status} (request {out.request_id}); node0 publishes it "
        "with node2 as author"
    )
    if out.published:
        demo.problems.append("node2's publish on alerts was not a request to publish")
    for i in [0, *alerts_subs]:
        expected[i].append("node2 asks: storm warning")
    refused = n - 2
    try:
        await c[refused].publish(alerts.cid, "not allowed", ack="local")
    except NotAllowed as exc:
        console.print(f"  node{refused} → alerts: [red]Error: not allowed: {exc.message}[/red]")
    else:
        demo.problems.append(f"node{refused}'s publish on alerts was not refused")

    delivered: dict[int, list[Delivery]] = {}

    async def all_delivered() -> bool:
        for i in range(n):
            delivered[i] = [d async for d in c[i].deliveries(after=0, follow=False)]
        return all(
            sorted(d.event.text for d in delivered[i]) == sorted(expected[i]) for i in range(n)
        )

    demo.stage("waiting for the deliveries")
    if await _wait("deliveries", all_delivered):
        total = sum(len(v) for v in delivered.values())
        console.print(f"  all {total} expected deliveries arrived")
    else:
        for i in range(n):
            got = sorted(d.event.text for d in delivered.get(i, []))
            if got != sorted(expected[i]):
                demo.problems.append(f"node{i} got {got}, expected {sorted(expected[i])}")
    _print_deliveries(demo, delivered)
    await _print_trees(demo, [news.cid, alerts.cid])

    demo.stage(f"history of news as node{n - 1} sees it (newest first: Lamport clock, then CID)")
    page = await c[n - 1].history(news.cid, limit=10)
    for event in page.events:
        console.print(
            f"  {event.cid}  clock {event.clock}  {event.text!r}  by {demo.name(event.author)}"
        )


async def _everywhere(clients: list[AsyncClient], cid: str | None, nodes: list[int]) -> bool:
    """Whether event ``cid`` was delivered on every one of ``nodes``."""
    for i in nodes:
        cids = [d.cid async for d in clients[i].deliveries(after=0, follow=False)]
        if cid not in cids:
            return False
    return True


def _print_deliveries(demo: _Demo, delivered: dict[int, list[Delivery]]) -> None:
    table = Table(title="deliveries per node", title_justify="left")
    for col in ("node", "seq", "topic", "payload", "author", "publisher", "latency"):
        table.add_column(col)
    for i in sorted(delivered):
        for d in delivered[i]:
            latency = d.delivered_at - d.event.created.timestamp()
            table.add_row(
                f"node{i}",
                str(d.seq),
                d.topic_name,
                d.event.text + (" (recovered)" if d.recovered else ""),
                demo.name(d.event.author),
                demo.name(d.event.publisher),
                f"{latency * 1000:.0f} ms",
            )
        table.add_section()
    demo.console.print(table)


async def _print_trees(demo: _Demo, topics: list[str]) -> None:
    table = Table(title="dissemination trees (tree neighbours per node)", title_justify="left")
    for col in ("topic", "node", "role", "parent", "children"):
        table.add_column(col)
    for cid in topics:
        for i, client in enumerate(demo.clients):
            st = (await client.status()).topic(cid)
            if st is None:
                table.add_row("", f"node{i}", "[dim]not in tree[/dim]", "", "")
                continue
            role = st.role + (" (acting root)" if st.acting_root else "")
            table.add_row(
                st.name if i == 0 else "",
                f"node{i}",
                role,
                demo.name(st.parent),
                ", ".join(demo.name(p) for p in st.children) or "-",
            )
        table.add_section()
    demo.console.print(table)


async def _teardown(demo: _Demo) -> None:
    sc = demo.sc
    if sc is None:
        return
    demo.stage("stopping the sidecars and keeping their metric records")
    copied = records = 0
    for i in list(sc.sidecars):
        try:
            await sc.stop_sidecar(i)
        except Exception as exc:  # keep tearing down the rest
            demo.problems.append(f"sidecar{i} did not stop cleanly: {exc}")
        source = sc[i].metrics_dir
        if source.is_dir():
            target = demo.out / f"node{i}"
            target.mkdir(parents=True, exist_ok=True)
            for f in sorted(source.iterdir()):
                if f.is_file():
                    shutil.copy2(f, target / f.name)
                    copied += 1
                    if f.suffix == ".jsonl":
                        with f.open("rb") as fh:
                            records += sum(1 for _ in fh)
    with demo.console.status("tearing the cluster down"):
        await sc.stop()
    if copied:
        demo.console.print(
            f"  {records} metric records in {copied} files kept in [bold]{demo.out}[/bold]\n"
            f"  analyse them with: pulsarcast report {demo.out} --out {demo.out}/report"
        )
    else:
        demo.problems.append("no metric records were written")
    demo.console.print("  cluster torn down (no Kubo or sidecar process left)")
