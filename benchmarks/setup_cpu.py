"""CPU and bitswap traffic of a bench run's set-up phase — not a test.

``pulsarcast bench`` counts the set-up in its CPU per node: topics created, every
subscription joined, a few seconds to settle. This script runs exactly that part of
a run, with the bench's own system (``make_system``), schedule and readiness check,
and prints the CPU seconds of each kind of process (Kubo, sidecar) in each step, the
settle period in 2.5 s slices (what comes after the last subscription), and the
cluster's bitswap counters (``bitswap/stat``: blocks received, duplicates, messages)
and bitswap bytes (``stats/bw``), and the LAN DHT bytes of each step (CPU in seconds):

    PYTHONPATH=. .venv/bin/python benchmarks/setup_cpu.py --system pulsarcast
    PYTHONPATH=. .venv/bin/python benchmarks/setup_cpu.py --system gossipsub --settle 20

Figures are printed, not asserted (``PULSARCAST_IPFS_BIN`` as for the Kubo tests).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import tempfile
import time
from pathlib import Path

import anyio
import psutil

from pulsarcast_ipfs.bench._config import SYSTEMS
from pulsarcast_ipfs.bench._ready import wait_until_ready
from pulsarcast_ipfs.bench._schedule import build_schedule, load_bench_workload
from pulsarcast_ipfs.bench._systems import make_system

SLICE = 2.5
LAN_DHT = "/ipfs/lan/kad/1.0.0"


async def measure(args: argparse.Namespace) -> None:
    schedule = build_schedule(
        load_bench_workload(args.workload), nodes=args.nodes, rate=20.0, events=600
    )
    with tempfile.TemporaryDirectory() as tmp:
        system = make_system(
            args.system,
            nodes=args.nodes,
            run="setup-cpu",
            run_dir=Path(tmp),
            latency=None,
            sample_interval=60.0,
        )
        async with system:
            procs: list[tuple[str, psutil.Process]] = []
            for i, node in enumerate(system.kubo_nodes):
                procs.append(("kubo", psutil.Process(node.pid)))
                procs += [(k, psutil.Process(p)) for k, p in system.other_processes(i).items()]

            stack = contextlib.AsyncExitStack()
            kubos = [await stack.enter_async_context(n.client()) for n in system.kubo_nodes]
            dht = 0.0

            async def lan_dht() -> float:
                total = 0.0
                for kubo in kubos:
                    bw = await kubo.stats_bw(protocol=LAN_DHT)
                    total += (bw.total_in + bw.total_out) / 2
                return total

            def cpu() -> dict[str, float]:
                out: dict[str, float] = {"LAN DHT MB": dht / 1e6}
                for kind, p in procs:
                    out[kind] = out.get(kind, 0.0) + sum(p.cpu_times()[:2])
                return out

            await anyio.sleep(3)
            dht = await lan_dht()
            marks = [("start", time.monotonic(), cpu())]
            await system.create_topics(schedule)
            dht = await lan_dht()
            marks.append(("create", time.monotonic(), cpu()))
            await system.subscribe(schedule)
            dht = await lan_dht()
            marks.append(("subscribe", time.monotonic(), cpu()))
            pairs = sum(len(ts) for ts in schedule.participants().values())
            await wait_until_ready(
                lambda: system.waiting(schedule),
                total=pairs,
                limit=120.0,
                progress=lambda done, total: None,
            )
            dht = await lan_dht()
            marks.append(("join", time.monotonic(), cpu()))
            for k in range(int(args.settle / SLICE)):
                await anyio.sleep(SLICE)
                dht = await lan_dht()
                marks.append((f"settle +{SLICE * (k + 1):.1f} s", time.monotonic(), cpu()))
            print(f"{args.system}, {args.nodes} nodes, {pairs} subscriptions and publishers")
            for (_, t0, c0), (name, t1, c1) in itertools.pairwise(marks):
                per = ", ".join(f"{k} {c1[k] - c0[k]:.2f}" for k in sorted(c1))
                print(f"  {name:14s} {t1 - t0:5.1f} s wall: {per}")
            total = {k: marks[-1][2][k] - marks[0][2][k] for k in marks[0][2]}
            print("  total          " + ", ".join(f"{k} {v:.2f}" for k, v in total.items()))
            stats = {"BlocksReceived": 0, "DupBlksReceived": 0, "MessagesReceived": 0}
            wire = 0.0
            for node in system.kubo_nodes:
                async with node.client() as kubo:
                    doc = await kubo._json("bitswap/stat", [])
                    for key in stats:
                        stats[key] += int(doc.get(key) or 0)
                    bw = await kubo.stats_bw(protocol="/ipfs/bitswap/1.2.0")
                    wire += (bw.total_in + bw.total_out) / 2
            await stack.aclose()
            print(
                f"  bitswap: {stats['BlocksReceived']} blocks received "
                f"({stats['DupBlksReceived']} duplicates), {stats['MessagesReceived']} "
                f"messages, {wire / 1e6:.2f} MB"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--system", default="pulsarcast", choices=sorted(SYSTEMS))
    ap.add_argument("--nodes", type=int, default=20)
    ap.add_argument("--workload", default="25k")
    ap.add_argument("--settle", type=float, default=5.0, help="seconds after the last join")
    anyio.run(measure, ap.parse_args())


if __name__ == "__main__":
    main()
