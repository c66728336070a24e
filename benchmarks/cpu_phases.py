"""CPU of one bench run by phase and process — not a test.

``pulsarcast bench`` reports one CPU figure per node: the CPU time of every
process of the system (Kubo, and for Pulsarcast the sidecar) over the run,
divided by the nodes and the run's length. That mixes three phases of different
length and cost: setting up (daemons started, topics created and announced,
subscriptions joined), publishing, and the grace period after. This script splits
it, from the ``resource_sample`` records of a run directory (cumulative CPU seconds
per process, every ``--sample-interval`` s; interpolated linearly at the first
and last ``event_injected``):

    PYTHONPATH=. .venv/bin/python benchmarks/cpu_phases.py runs/s11n/pulsarcast-normal-n20-r20
    PYTHONPATH=. .venv/bin/python benchmarks/cpu_phases.py runs/s11n/*-n20-r20 --json

For each process kind and phase: CPU seconds summed over the nodes, and cores per
node (seconds / nodes / the phase's length).
"""

from __future__ import annotations

import argparse
import bisect
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

PHASES = ("setup", "publishing", "after")


def _at(samples: list[tuple[float, float]], t: float) -> float:
    """Cumulative CPU seconds at ``t``, linear between samples, clamped at the ends."""
    times = [s[0] for s in samples]
    i = bisect.bisect_left(times, t)
    if i == 0:
        return samples[0][1]
    if i >= len(samples):
        return samples[-1][1]
    (t0, c0), (t1, c1) = samples[i - 1], samples[i]
    return c0 + (c1 - c0) * (t - t0) / (t1 - t0) if t1 > t0 else c1


def phases(run_dir: Path) -> dict[str, Any]:
    """Per process kind and phase: CPU seconds and cores per node of one run."""
    series: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    injected: list[float] = []
    for path in sorted(run_dir.glob("node-*.jsonl")):
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            rec = json.loads(line)
            if rec.get("kind") == "resource_sample":
                series[(path.name, rec["process"])].append((rec["ts"], rec["cpu_seconds"]))
            elif rec.get("kind") == "event_injected":
                injected.append(rec["ts"])
    if not series or not injected:
        raise SystemExit(f"{run_dir}: no resource samples or no injected events")
    t0, t1 = min(injected), max(injected)
    start = min(s[0][0] for s in (sorted(v) for v in series.values()))
    end = max(s[-1][0] for s in (sorted(v) for v in series.values()))
    lengths = {"setup": t0 - start, "publishing": t1 - t0, "after": end - t1}
    out: dict[str, Any] = {"run": str(run_dir), "seconds": lengths, "processes": {}}
    kinds = sorted({k for _, k in series})
    for kind in kinds:
        nodes = [sorted(s) for (_, k), s in series.items() if k == kind]
        cpu = {"setup": 0.0, "publishing": 0.0, "after": 0.0}
        for s in nodes:
            cpu["setup"] += _at(s, t0) - s[0][1]
            cpu["publishing"] += _at(s, t1) - _at(s, t0)
            cpu["after"] += s[-1][1] - _at(s, t1)
        out["processes"][kind] = {
            p: {
                "cpu_seconds": round(cpu[p], 2),
                "cores_per_node": round(cpu[p] / len(nodes) / lengths[p], 4) if lengths[p] else 0,
            }
            for p in PHASES
        }
    return out


def _table(results: list[dict[str, Any]]) -> str:
    rows = ["| run | process | " + " | ".join(f"{p} s (cores/node)" for p in PHASES) + " |"]
    rows.append("|---|---|" + "---:|" * len(PHASES))
    for r in results:
        name = Path(r["run"]).name
        lengths = " / ".join(f"{r['seconds'][p]:.0f}" for p in PHASES)
        for kind, ph in r["processes"].items():
            cells = " | ".join(
                f"{ph[p]['cpu_seconds']:.1f} ({ph[p]['cores_per_node']:.3f})" for p in PHASES
            )
            rows.append(f"| {name} ({lengths} s) | {kind} | {cells} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path, help="run directories (SYSTEM-CONDITION[-nN-rR])")
    ap.add_argument("--json", action="store_true", help="one JSON object per run instead")
    a = ap.parse_args(argv)
    results = [phases(r) for r in a.runs]
    if a.json:
        for r in results:
            print(json.dumps(r))
    else:
        print(_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
