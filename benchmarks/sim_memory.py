"""Where the simulator's memory goes, by structure — not a test.

Runs ``pulsarcast sim`` (default options: signatures on, records not written) up to
the end of publication, then walks the objects reachable from the driver's tables and
from every node's attributes and prints their bytes (``sys.getsizeof`` of each object,
counted once: an object shared by many nodes counts for the first holder only), per
structure, per node and per publish call. The walk goes down into the core's own
objects (trees, windows, edge summaries) one attribute path deep, so the per-tree
and per-edge tables show apart.

    .venv/bin/python benchmarks/sim_memory.py --nodes 300 --events 1500 --seed 3
    .venv/bin/python benchmarks/sim_memory.py --nodes 100 --events 500 --tracemalloc

With ``--tracemalloc`` it also prints the lines of source that allocated most of
what is live at that moment (slower: ~3x). docs/simulator.md ("Memory per node")
has the figures.
"""

from __future__ import annotations

import argparse
import gc
import resource
import sys
import time
import tracemalloc
import types
from collections import defaultdict
from typing import Any

from pulsarcast_ipfs.sim import SimConfig, Simulation

_LEAVES = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.CodeType)


class Walker:
    """Bytes of the objects reachable from a root, each object counted once per walker."""

    def __init__(self, stop: set[int]) -> None:
        self.seen: set[int] = set(stop)

    def size(self, root: Any) -> int:
        total = 0
        stack = [root]
        seen = self.seen
        while stack:
            obj = stack.pop()
            oid = id(obj)
            if oid in seen or isinstance(obj, _LEAVES):
                continue
            seen.add(oid)
            total += sys.getsizeof(obj)
            stack.extend(gc.get_referents(obj))
        return total


def _fields(obj: Any) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    d = getattr(obj, "__dict__", None)
    if isinstance(d, dict):
        out.extend(d.items())
    for cls in type(obj).__mro__:
        for name in getattr(cls, "__slots__", ()):
            if name != "__dict__" and hasattr(obj, name):
                out.append((name, getattr(obj, name)))
    return out


# Node attributes whose values hold per-topic objects worth splitting one level further.
_SPLIT = {"_trees"}
# Node attributes that are objects of their own, split by their attributes.
_OBJECTS = {"_guard", "_acks", "_gate", "_signing"}


def measure(sim: Simulation) -> tuple[dict[str, int], int]:
    """(structure -> bytes, nodes measured)."""
    nodes = [n for n in sim.nodes if n is not None]
    stop = {id(sim)} | {id(n) for n in nodes}
    w = Walker(stop)
    table: dict[str, int] = defaultdict(int)
    # The driver's own tables first (their shared objects count there).
    for name, value in _fields(sim):
        if name in ("_nodes", "nodes"):
            continue
        table[f"sim.{name}"] += w.size(value)
    from pulsarcast_ipfs.core import _signqueue

    table["core._CHECKED_EVENTS (per process)"] += w.size(_signqueue._CHECKED_EVENTS)
    for node in nodes:
        for name, value in _fields(node):
            if name in _SPLIT and isinstance(value, dict):
                for tree in value.values():
                    for tname, tvalue in _fields(tree):
                        if tname == "edges" and isinstance(tvalue, dict):
                            for edge in tvalue.values():
                                for ename, evalue in _fields(edge):
                                    table[f"node.{name}.edges.{ename}"] += w.size(evalue)
                            table[f"node.{name}.edges"] += w.size(tvalue)
                        else:
                            table[f"node.{name}.{tname}"] += w.size(tvalue)
                    table[f"node.{name}"] += w.size(tree)
                table[f"node.{name}"] += w.size(value)
            elif name in _OBJECTS:
                for oname, ovalue in _fields(value):
                    table[f"node.{name}.{oname}"] += w.size(ovalue)
                table[f"node.{name}"] += w.size(value)
            else:
                table[f"node.{name}"] += w.size(value)
        table["node (object itself)"] += sys.getsizeof(node)
    return dict(table), len(nodes)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--nodes", type=int, default=300)
    p.add_argument("--events", type=int, default=1500)
    p.add_argument("--seed", type=int, default=3)
    p.add_argument("--top", type=int, default=40, help="structures (and source lines) shown")
    p.add_argument("--tracemalloc", action="store_true", help="also the top allocating lines")
    args = p.parse_args(argv)
    if args.tracemalloc:
        tracemalloc.start(1)
    cpu0 = time.process_time()
    sim = Simulation(SimConfig(nodes=args.nodes, events=args.events, seed=args.seed))
    sim._sink = None
    from pulsarcast_ipfs.sim._runner import _RecordSink

    sim._sink = _RecordSink(None)
    sim._plan()
    end_pub = sim._publish_times[-1] if sim._publish_times else sim.end_time
    sim.run_until(end_pub)
    cpu = time.process_time() - cpu0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    calls = len(sim._publish_times)
    print(
        f"{args.nodes} nodes, {calls} calls, seed {args.seed}: end of publication at "
        f"{sim.heap.now - sim.start:.1f} s virtual, {cpu:.0f} s CPU, max RSS {rss:.0f} MiB, "
        f"{sim.stats.deliveries:,} deliveries"
    )
    if args.tracemalloc:
        snap = tracemalloc.take_snapshot()
        stats = snap.statistics("lineno")
        total = sum(s.size for s in stats)
        print(f"\ntracemalloc: {total / 2**20:.1f} MiB live; top lines:")
        for s in stats[: args.top]:
            f = s.traceback[0]
            name = f.filename.split("site-packages/")[-1].split("pulsarcast_ipfs/")[-1]
            print(f"  {s.size / 2**20:8.2f} MiB {s.count:>9,} blocks  {name}:{f.lineno}")
        tracemalloc.stop()
    table, n = measure(sim)
    total = sum(table.values())
    print(f"\nreachable objects: {total / 2**20:.1f} MiB ({total / n:,.0f} B per node)")
    print(f"{'structure':48} {'MiB':>8} {'B/node':>9} {'B/node/call':>11}")
    for name, size in sorted(table.items(), key=lambda kv: -kv[1])[: args.top]:
        print(f"{name:48} {size / 2**20:8.2f} {size / n:9,.0f} {size / n / max(1, calls):11.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
