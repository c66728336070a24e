"""What one open dashboard costs a sidecar: its CPU with and without a client on the
dashboard's event stream, under the same publishing — not a test.

Run: ``PYTHONPATH=. .venv/bin/python benchmarks/dashboard_cost.py [--nodes 4]
[--rate 20] [--seconds 40] [--repeat 2] [--node 1] [--clients 1,10]``
(``PULSARCAST_IPFS_BIN`` as for the Kubo tests).

A local cluster of ``--nodes`` real sidecars beside real Kubo daemons: node 0 creates
a topic, every other node subscribes. Then ``--repeat`` rounds of windows: events of
200 bytes are published through node 0 at ``--rate`` per second for ``--seconds``,
first with no dashboard open, then with each count of ``--clients`` reading sidecar
``--node``'s ``GET /dashboard/events`` (one JSON snapshot a second, what an open page
gets) for the whole window. The sidecar's CPU time (user + system, from
``/proc/PID/stat``) over each window is printed, with the share it adds over the
window without. Each stream builds its own snapshots, so N clients cost N times one:
a window with several clients measures one client's cost above the noise of a shared
machine (divided by N). The clients run in this process, so their own work is not
counted. Figures are printed, not asserted.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import anyio

from pulsarcast_ipfs.cluster import LocalSidecarCluster

_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of process ``pid`` (``/proc/PID/stat`` fields 14 and 15)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


async def window(
    sc: LocalSidecarCluster, topic: str, args: argparse.Namespace, *, clients: int
) -> tuple[float, float, int, int]:
    """Publish for ``args.seconds``; the measured sidecar's CPU seconds, the window's
    length, events published and snapshots the dashboard clients read."""
    pid = sc[args.node].pid
    snapshots = 0
    events = int(args.rate * args.seconds)
    failed = 0

    async def read_stream(stop: anyio.Event) -> None:
        nonlocal snapshots
        async with (
            sc.client(args.node, timeout=None) as c,
            c.stream("GET", "/dashboard/events") as r,
        ):
            r.raise_for_status()
            with anyio.CancelScope() as scope:
                async with anyio.create_task_group() as tg:

                    async def stopper() -> None:
                        await stop.wait()
                        scope.cancel()

                    tg.start_soon(stopper)
                    async for line in r.aiter_lines():
                        if line.startswith("data: "):
                            snapshots += 1

    async with (
        sc.client(0, timeout=30) as api,
        anyio.create_task_group() as tg,
    ):
        stop = anyio.Event()
        for _ in range(clients):
            tg.start_soon(read_stream, stop)
        if clients:
            await anyio.sleep(1.0)  # connected, first snapshots sent

        async def publish(k: int) -> None:
            nonlocal failed
            r = await api.post(f"/v1/topics/{topic}/publish", json={"text": f"{k} " + "x" * 200})
            failed += r.status_code != 200

        c0, t0 = cpu_seconds(pid), time.monotonic()
        async with anyio.create_task_group() as pubs:
            for k in range(events):
                await anyio.sleep(max(0.0, t0 + k / args.rate - time.monotonic()))
                pubs.start_soon(publish, k)
        await anyio.sleep(max(0.0, t0 + args.seconds - time.monotonic()))
        c1, t1 = cpu_seconds(pid), time.monotonic()
        stop.set()
    if failed:
        print(f"  ({failed} publishes failed)")
    return c1 - c0, t1 - t0, events - failed, snapshots


async def measure(args: argparse.Namespace) -> None:
    async with LocalSidecarCluster(
        nodes=args.nodes, run="dashboard-cost", extra_args=["--log-level", "warning"]
    ) as sc:
        async with sc.client(0) as c:
            r = await c.post("/v1/topics", json={"name": "dashboard-cost"})
            r.raise_for_status()
            topic = r.json()["cid"]
        for i in range(1, args.nodes):
            async with sc.client(i) as c:
                (await c.post(f"/v1/topics/{topic}/subscribe")).raise_for_status()
        await anyio.sleep(args.settle)
        print(
            f"{args.nodes} nodes; publishing {args.rate:g} events/s through node 0 for "
            f"{args.seconds:g} s a window; sidecar {args.node}'s CPU (/proc/{sc[args.node].pid})"
        )
        added: dict[int, list[float]] = {n: [] for n in args.clients}
        for rnd in range(1, args.repeat + 1):
            base = await window(sc, topic, args, clients=0)
            show(rnd, 0, base)
            share = base[0] / base[1]
            for n in args.clients:
                got = await window(sc, topic, args, clients=n)
                show(rnd, n, got)
                per_client = 100 * (got[0] / got[1] - share) / share / n
                added[n].append(per_client)
                print(f"round {rnd}: {n} open dashboards add {per_client:+.2f} % each")
        for n, values in added.items():
            each = ", ".join(f"{a:+.2f} %" for a in values)
            print(f"one dashboard's share measured with {n} open: {each}")


def show(rnd: int, clients: int, got: tuple[float, float, int, int]) -> None:
    cpu, secs, events, snaps = got
    print(
        f"round {rnd}, {clients:2} dashboards: {cpu:6.2f} s CPU in {secs:5.1f} s "
        f"({100 * cpu / secs:5.2f} % of a core), {events} events, {snaps} snapshots"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=4, help="sidecars (and Kubo daemons)")
    ap.add_argument("--rate", type=float, default=20.0, help="events per second")
    ap.add_argument("--seconds", type=float, default=40.0, help="length of a window")
    ap.add_argument("--repeat", type=int, default=2, help="rounds of (without, with)")
    ap.add_argument("--node", type=int, default=1, help="the sidecar measured and watched")
    ap.add_argument(
        "--clients",
        type=lambda t: [int(x) for x in t.split(",")],
        default=[1, 10],
        help="dashboards open in the windows with (comma-separated counts, default 1,10)",
    )
    ap.add_argument("--settle", type=float, default=8.0, help="seconds after subscribing")
    args = ap.parse_args(argv)
    if args.nodes < 2 or not 0 <= args.node < args.nodes or args.rate <= 0 or args.repeat < 1:
        ap.error("need 2+ nodes, 0 <= node < nodes, a positive rate and 1+ rounds")
    if not args.clients or min(args.clients) < 1:
        ap.error("--clients: counts of 1 or more")
    anyio.run(measure, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
