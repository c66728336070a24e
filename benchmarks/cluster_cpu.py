"""CPU per delivery of the sidecars and their Kubo daemons on a local cluster, under a
steady publish rate: the CPU-per-node figure against gossipsub, measured with less noise
than a whole ``pulsarcast bench`` run (no set-up phase, no gossipsub run beside it).

Run: ``PYTHONPATH=. .venv/bin/python benchmarks/cluster_cpu.py [--nodes 20] [--rate 20]
[--seconds 20] [--profile PREFIX]`` (``PULSARCAST_IPFS_BIN`` as for the Kubo tests).

``--topics`` topics are created at nodes 0.. and every other node subscribes to all
of them. After ``--settle`` seconds, events of 200 bytes go to the topics in turn,
each published through the HTTP API of a node picked round-robin (never the topic's
creator), at ``--rate`` per second for ``--seconds``; then 3 s more. The process CPU
(user + system, ``psutil``) of every sidecar and every Kubo daemon over that window,
divided by the deliveries made (events × subscribers), is printed in µs, with the
largest sidecar's resident memory at the end.
``--profile PREFIX`` records three sidecars with ``py-spy`` meanwhile (raw
collapsed stacks in ``PREFIX-<node>.txt``) and takes Go CPU profiles of their Kubo
daemons from the RPC API's ``/debug/pprof/profile`` (``PREFIX-kubo-<node>.pprof``;
``go tool pprof -top PREFIX-kubo-*.pprof`` merges them). Figures are printed, not
asserted.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time

import anyio
import httpx
import psutil

from pulsarcast_ipfs.cluster import LocalSidecarCluster


async def measure(args: argparse.Namespace) -> dict[str, float]:
    result: dict[str, float] = {}
    nodes = args.nodes
    async with (
        LocalSidecarCluster(
            nodes=nodes,
            run="cluster-cpu",
            extra_args=["--log-level", "warning", "--routing-interval", "5"],
        ) as sc,
        anyio.create_task_group() as profiling,
    ):
        topics: list[tuple[int, str]] = []
        for t in range(args.topics):
            async with sc.client(t) as c:
                r = await c.post("/v1/topics", json={"name": f"cpu-{t}"})
                r.raise_for_status()
                topics.append((t, r.json()["cid"]))
        subscribers = 0
        for i in range(nodes):
            async with sc.client(i) as c:
                for t, cid in topics:
                    if t != i:
                        (await c.post(f"/v1/topics/{cid}/subscribe")).raise_for_status()
                        subscribers += 1
        print(f"{nodes} nodes, {subscribers} subscriptions; settling", flush=True)
        await anyio.sleep(args.settle)
        sidecars = [psutil.Process(sc[i].pid) for i in range(nodes)]
        kubos = [psutil.Process(sc[i].kubo.pid) for i in range(nodes)]

        def cpu(procs: list[psutil.Process]) -> float:
            return sum(sum(p.cpu_times()[:2]) for p in procs)

        profilers = []
        if args.profile:
            spy = shutil.which("py-spy") or str(sys.prefix + "/bin/py-spy")
            for i in (5, 9, 13):
                record = ["record", "-r", "100", "-d", str(int(args.seconds)), "-f", "raw"]
                out = ["-p", str(sc[i].pid), "-o", f"{args.profile}-{i}.txt"]
                profilers.append(
                    await anyio.open_process(
                        [spy, *record, *out],
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                )
            seconds = int(args.seconds)

            async def kubo_profile(i: int) -> None:
                root = sc[i].kubo.api_url.removesuffix("/").removesuffix("/api/v0")
                async with httpx.AsyncClient(timeout=seconds + 30) as http:
                    r = await http.get(f"{root}/debug/pprof/profile", params={"seconds": seconds})
                await anyio.Path(f"{args.profile}-kubo-{i}.pprof").write_bytes(r.content)

            for i in (5, 9, 13):
                profiling.start_soon(kubo_profile, i)
        events = int(args.rate * args.seconds)
        per_topic = [0] * len(topics)
        failed = 0

        async def publish(k: int) -> None:
            nonlocal failed
            t, cid = topics[k % len(topics)]
            node = (k * 7 + 3) % nodes
            if node == t:
                node = (node + 1) % nodes
            async with sc.client(node) as c:
                r = await c.post(
                    f"/v1/topics/{cid}/publish",
                    json={"ack": "local", "text": f"event {k} " + "x" * 200},
                )
            if r.status_code == 200:
                per_topic[k % len(topics)] += 1
            else:
                failed += 1

        s0, k0, t0 = cpu(sidecars), cpu(kubos), time.monotonic()
        async with anyio.create_task_group() as tg:
            for k in range(events):
                await anyio.sleep(max(0.0, t0 + k / args.rate - time.monotonic()))
                tg.start_soon(publish, k)
        await anyio.sleep(3)
        window = time.monotonic() - t0
        s1, k1 = cpu(sidecars), cpu(kubos)
        rss = max(p.memory_info().rss for p in sidecars)
        for p in profilers:
            await p.wait()
        deliveries = sum(n * (subscribers // len(topics)) for n in per_topic)
        result = {
            "events": events,
            "failed": failed,
            "window": window,
            "deliveries": deliveries,
            "sidecar_s": s1 - s0,
            "kubo_s": k1 - k0,
            "sidecar_us": 1e6 * (s1 - s0) / max(1, deliveries),
            "kubo_us": 1e6 * (k1 - k0) / max(1, deliveries),
            "rss_mib": rss / (1 << 20),
        }
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=20, help="sidecars (and Kubo daemons)")
    ap.add_argument("--topics", type=int, default=4, help="topics, created at nodes 0..")
    ap.add_argument("--rate", type=float, default=20.0, help="events per second, all topics")
    ap.add_argument("--seconds", type=float, default=20.0, help="how long to publish")
    ap.add_argument("--settle", type=float, default=8.0, help="seconds after subscribing")
    ap.add_argument("--profile", metavar="PREFIX", help="py-spy three sidecars to PREFIX-*")
    args = ap.parse_args(argv)
    if args.nodes < 2 or not 1 <= args.topics < args.nodes or args.rate <= 0:
        ap.error("need 2+ nodes, 1 <= topics < nodes and a positive rate")
    r = anyio.run(measure, args)
    print(
        f"{r['events']:.0f} events ({r['failed']:.0f} failed), {r['deliveries']:.0f} deliveries "
        f"in {r['window']:.1f} s: sidecars {r['sidecar_s']:.2f} s CPU = "
        f"{r['sidecar_us']:,.0f} µs per delivery; Kubo {r['kubo_s']:.2f} s = "
        f"{r['kubo_us']:,.0f} µs per delivery; largest sidecar RSS {r['rss_mib']:.0f} MiB"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
