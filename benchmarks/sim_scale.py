"""Scale benchmark of the simulator — not a test.

Simulates N nodes (default 10,000) and E publish calls (default 100,000) of the
Reddit 2007 workload with the real protocol core, then prints wall time, peak
memory (max RSS), heap events and publish calls per wall second, tree depth
(max, mean) and the maximum per-node fan-out against log2(N).

    .venv/bin/python benchmarks/sim_scale.py --nodes 10000 --events 100000
    .venv/bin/python benchmarks/sim_scale.py --nodes 10000 --communities 100 \
        --events 100000 --rate 1000 --grace 30s    # the run of docs/simulator.md
    .venv/bin/python benchmarks/sim_scale.py --nodes 2000 --events 2000 --out runs/scale

Records are not written unless ``--out`` is given (they would be ~100 GB at
full scale); ``rpc_sent`` / ``rpc_received`` records are off unless ``--rpc-records``; signatures
(``SimConfig.signatures``: Ed25519 signing and a verification per hop) are off unless
``--signatures`` — the scale figures are for unsigned 1.0.0 descriptors.

Progress (every 30 s, on stderr) and the result give the wall time per publish call
measured since publication started and the wall time this projects for
``--project`` calls (default 100,000), so a run too large for the machine can be
cut short and still say what the full run would cost. docs/simulator.md ("Scale")
has the figures measured and the profile behind them.
"""

from __future__ import annotations

import argparse
import math
import resource
import sys
import time
from pathlib import Path

from pulsarcast_ipfs.sim import SimConfig, Simulation, parse_duration, parse_latency


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--nodes", type=int, default=10_000)
    p.add_argument("--events", type=int, default=100_000)
    p.add_argument("--topics", type=int, default=None)
    p.add_argument(
        "--communities",
        type=int,
        default=1,
        help="copies of the workload's users with their own topics (Workload.scale)",
    )
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--rate", type=float, default=50.0)
    p.add_argument("--latency", default="50ms")
    p.add_argument("--grace", default="30s")
    p.add_argument("--rpc-records", action="store_true")
    p.add_argument(
        "--signatures",
        action="store_true",
        help="signed (1.1.0) descriptors, verified at every hop (off: unsigned 1.0.0)",
    )
    p.add_argument("--out", default=None, help="write records.jsonl.gz and summary.json here")
    p.add_argument(
        "--project", type=int, default=100_000, help="project the wall time for this many calls"
    )
    args = p.parse_args(argv)

    config = SimConfig(
        nodes=args.nodes,
        events=args.events,
        topics=args.topics,
        communities=args.communities,
        seed=args.seed,
        rate=args.rate,
        latency=parse_latency(args.latency),
        grace=parse_duration(args.grace),
        rpc_records=args.rpc_records,
        signatures=args.signatures,
        run=f"sim-scale-{args.nodes}-{args.events}-c{args.communities}",
    )
    wall0 = time.perf_counter()
    last = [wall0]
    first_call: list[float] = []  # wall time of the first publish call seen
    last_call: list[float] = []  # ... and of the last
    sims: list[Simulation] = []

    def progress(vt: float, calls: int, heap: int) -> None:
        now = time.perf_counter()
        if calls and not first_call:
            first_call.append(now)
        if calls >= args.events and not last_call:
            last_call.append(now)
        if now - last[0] >= 30:
            last[0] = now
            line = (
                f"  [{now - wall0:7.0f} s] t={vt:8.1f} s virtual, {calls:,} calls, "
                f"{heap:,} heap events, {sims[0].stats.deliveries:,} deliveries"
            )
            if first_call and calls:
                per_call = (now - first_call[0]) / calls
                line += (
                    f", {per_call:.2f} s/call since the first "
                    f"(projects {per_call * args.project / 3600:,.1f} h for {args.project:,})"
                )
            print(line, file=sys.stderr, flush=True)

    sim = Simulation(
        config, out=Path(args.out) if args.out else None, gzip_records=True, progress=progress
    )
    sims.append(sim)
    setup = time.perf_counter() - wall0
    s = sim.run()
    wall = time.perf_counter() - wall0
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    log2n = math.log2(args.nodes)
    signed = "on" if args.signatures else "off"
    print(f"nodes                     {args.nodes:,} (signatures {signed})")
    print(f"topics                    {len(sim.topic_names):,} ({args.communities:,} communities)")
    print(f"publish calls             {args.events:,} (published {s.events_published:,})")
    print(f"deliveries                {s.deliveries:,} (coverage {s.coverage_published:.4%})")
    print(f"duplicates                {s.duplicates:,}")
    print(f"virtual time              {s.virtual_seconds:,.1f} s")
    print(f"wall time                 {wall:,.1f} s (set-up {setup:,.1f} s)")
    print(f"peak memory (max RSS)     {peak_mib:,.0f} MiB")
    print(f"heap events               {s.heap_events:,} ({s.heap_events / wall:,.0f}/s)")
    print(f"publish calls / wall s    {args.events / wall:,.3f}")
    print(f"deliveries / wall s       {s.deliveries / wall:,.0f}")
    print(f"RPCs sent                 {s.rpcs_total:,}")
    print(f"tree depth max / mean     {s.tree_depth_max} / {s.tree_depth_mean:.2f}")
    print(f"max fan-out vs log2(N)    {s.fanout_max} vs {log2n:.1f}")
    print(f"latency p50 / p99         {s.latency_p50} / {s.latency_p99} s")
    if first_call and last_call and args.events:
        pub_wall = last_call[0] - first_call[0]
        per_call = pub_wall / args.events
        print(f"start-up (to 1st call)    {first_call[0] - wall0:,.1f} s")
        print(f"publication               {pub_wall:,.1f} s ({per_call:.3f} s per call)")
        print(f"grace                     {wall0 + wall - last_call[0]:,.1f} s")
        print(
            f"deliveries per call       {s.deliveries / args.events:,.0f}; "
            f"wall per delivery {pub_wall / max(1, s.deliveries) * 1e6:,.1f} µs"
        )
        print(
            f"projected for {args.project:,} calls: "
            f"{(first_call[0] - wall0 + per_call * args.project) / 3600:,.1f} h"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
