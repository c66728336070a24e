"""Fault scenarios repeated: pass counts and recovery times per scenario.

Run: ``.venv/bin/python benchmarks/faults.py [--repeat 5] [--nodes 10]
[--scenario kill_20pct --scenario partition ...] [--json out.jsonl]``.

Each round starts a fresh cluster (Kubo + sidecar per node, Toxiproxy, routing_k=1)
and runs the chosen scenarios on it in order (``pulsarcast_ipfs.cluster._faults``);
with ``--relays alternate`` (the default) every other round, the first included, runs
with ``flat_fanout`` 3 (``RELAY_FANOUT``), so that its trees have relays with children
and the relays the scenarios kill, restart or slow down are interior nodes (with the
sidecars' default a 10-node tree has depth 1); ``always`` / ``never`` for all rounds;
the relays-that-lie scenarios (``silent_relays``, ``blackhole_relays``:
``pulsarcast_ipfs.cluster._attacks``) get a cluster of their own in the round, with
``flat_fanout`` 3 (relays with children), and their "recovery" is the slowest honest
delivery; their figures count the ``peer_penalised`` records the honest nodes wrote;
each scenario's result is printed as it ends (failures with the missing events,
duplicates and tree snapshots) and appended to ``--json`` if given. A failed run is
reported, never retried. The summary gives per scenario the passes and the recovery
times (median, max). Figures, not assertions.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import sys
import time
import traceback
from pathlib import Path

import anyio

from pulsarcast_ipfs.cluster import (
    ATTACK_SCENARIOS,
    RELAY_CHOICES,
    RELAY_FANOUT,
    SCENARIOS,
    FaultResult,
    LocalSidecarCluster,
    attack_cluster,
    fault_cluster,
    relay_round,
)
from pulsarcast_ipfs.stats import median

ALL_SCENARIOS = {**SCENARIOS, **ATTACK_SCENARIOS}


async def rounds(
    repeat: int, nodes: int, names: list[str], out: Path | None, relays: str = "alternate"
) -> dict[str, list[FaultResult | str]]:
    results: dict[str, list[FaultResult | str]] = {n: [] for n in names}
    for r in range(repeat):
        began = time.monotonic()
        fanout = RELAY_FANOUT if relay_round(relays, r) else None
        shape = f"flat_fanout {fanout}" if fanout else "default flat_fanout"
        print(f"== round {r + 1}/{repeat}: starting a {nodes}-node cluster ({shape})", flush=True)
        groups = (
            (
                functools.partial(fault_cluster, flat_fanout=fanout),
                [n for n in names if n in SCENARIOS],
            ),
            (attack_cluster, [n for n in names if n in ATTACK_SCENARIOS]),
        )
        for make, chosen in groups:
            if not chosen:
                continue
            try:
                async with make(nodes=nodes, run=f"faults{r}") as sc:
                    for name in chosen:
                        res = await one(sc, name, r, out)
                        results[name].append(res)
            except Exception:
                print(f"round {r + 1}: cluster failure\n{traceback.format_exc()}", flush=True)
        print(f"== round {r + 1} took {time.monotonic() - began:.0f} s", flush=True)
    return results


async def one(sc: LocalSidecarCluster, name: str, r: int, out: Path | None) -> FaultResult | str:
    """Run scenario ``name`` once; its result (or the traceback), printed and appended
    to ``out``."""
    t0 = time.monotonic()
    try:
        res: FaultResult | str = await ALL_SCENARIOS[name](sc, tag=f"-{r}")
        print(res.describe(), flush=True)  # type: ignore[union-attr]
    except Exception:
        res = traceback.format_exc()
        print(f"{name}: ERROR\n{res}", flush=True)
    print(f"   ({time.monotonic() - t0:.1f} s)", flush=True)
    if out is not None:
        with out.open("a") as f:
            doc = (
                {"round": r, **dataclasses.asdict(res), "ok": res.ok}
                if isinstance(res, FaultResult)
                else {"round": r, "scenario": name, "error": res}
            )
            f.write(json.dumps(doc, default=str) + "\n")
    return res


def summary(results: dict[str, list[FaultResult | str]]) -> str:
    lines = [f"{'scenario':18} {'pass':>6} {'recovery p50 s':>15} {'recovery max s':>15}"]
    for name, runs in results.items():
        passed = sum(1 for r in runs if isinstance(r, FaultResult) and r.ok)
        rec = [
            r.recovery_seconds
            for r in runs
            if isinstance(r, FaultResult) and r.recovery_seconds is not None
        ]
        p50 = f"{median(rec):.2f}" if rec else "n/a"
        mx = f"{max(rec):.2f}" if rec else "n/a"
        lines.append(f"{name:18} {passed:>3}/{len(runs):<2} {p50:>15} {mx:>15}")
    lying = {
        name: [r.figures for r in runs if isinstance(r, FaultResult) and "penalties" in r.figures]
        for name, runs in results.items()
    }
    if any(lying.values()):
        lines.append(
            "relays that lie, per run: attackers' children / penalties by the honest nodes "
            "(of attackers, by their children, false)"
        )
        for name, figs in lying.items():
            runs_text = "  ".join(
                f"{f['attackers_children']:.0f}/{f['penalties']:.0f}"
                f"({f['penalties_of_attackers']:.0f},{f['penalties_by_attackers_children']:.0f},"
                f"{f['false_penalties']:.0f})"
                for f in figs
            )
            if figs:
                lines.append(f"{name:18} {runs_text}")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=5, help="rounds (fresh cluster each)")
    p.add_argument("--nodes", type=int, default=10, help="nodes per cluster (Kubo + sidecar)")
    p.add_argument(
        "--scenario",
        action="append",
        choices=sorted(ALL_SCENARIOS),
        help="scenario to run (repeatable; default: all)",
    )
    p.add_argument(
        "--relays",
        choices=RELAY_CHOICES,
        default="alternate",
        help=f"rounds whose fault scenarios run with flat_fanout {RELAY_FANOUT} (relays with "
        "children): every other one, the first included (default), all, or none",
    )
    p.add_argument("--json", type=Path, help="append one JSON line per scenario run here")
    a = p.parse_args()
    if a.repeat < 1 or a.nodes < 6:
        p.error("--repeat must be >= 1 and --nodes >= 6")
    names = a.scenario or list(ALL_SCENARIOS)
    results = anyio.run(rounds, a.repeat, a.nodes, names, a.json, a.relays)
    print(summary(results))
    failed = any(
        not (isinstance(r, FaultResult) and r.ok) for runs in results.values() for r in runs
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
