"""``pulsarcast sim``: run the simulator (docs/simulator.md)."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

__all__ = ["add_parser", "summary_table"]

_EPILOG = """\
examples:
  pulsarcast sim --nodes 1000 --topics 23 --events 20000 --seed 1 --out runs/a
  pulsarcast sim --nodes 1000 --events 3000 --crash 10%@60s --loss 5% --out runs/b
  pulsarcast sim --nodes 200 --events 500 --latency 500ms±300ms --ordered --out runs/c
  pulsarcast sim --nodes 1000 --events 800 --loss 5% --byzantine 10% --attack silent --out runs/d
  pulsarcast sim --nodes 1000 --events 800 --attack sybil=1000 --out runs/e

syntax: durations 250ms, 1.5s, 2m; latency 50ms | 500ms±300ms | 10ms..90ms;
fractions 5% or 0.05; crash waves <P%|N>@<time after publication starts>, comma-separated;
attacks blackhole | silent | censor | delay=D | sybil=N (docs/simulator.md "Attacks").
"""


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "sim",
        help="simulate a Pulsarcast network on a virtual clock",
        description=(
            "Simulate N Pulsarcast nodes (the real protocol core) on an event heap with a "
            "virtual clock, replaying the Reddit 2007 workload scaled to N nodes. Same seed, "
            "same records, byte for byte. Writes OUT/records.jsonl and OUT/summary.json."
        ),
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--nodes", type=int, default=100, help="number of nodes (default 100)")
    p.add_argument("--topics", type=int, default=None, help="keep the T largest topics")
    p.add_argument(
        "--communities",
        type=int,
        default=1,
        help="copies of the workload's users, each with its own instance of every topic "
        "(default 1; needs NODES >= C x users)",
    )
    p.add_argument("--events", type=int, default=None, help="publish calls (default: workload's)")
    p.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    p.add_argument("--k", type=int, default=20, help="Kademlia bucket size (default 20)")
    p.add_argument("--latency", default="50ms", help="one-way link latency (default 50ms)")
    p.add_argument("--loss", default="0%", help="random message loss (default 0%%)")
    p.add_argument("--crash", default=None, help="crash waves, e.g. 10%%@120s,5%%@200s")
    p.add_argument(
        "--crash-roots",
        type=int,
        default=1,
        help="the first crash wave includes the roots of this many largest topics (default 1)",
    )
    p.add_argument("--restart", default=None, help="crashed nodes restart after this long")
    p.add_argument("--rate", type=float, default=50.0, help="publish calls per virtual second")
    p.add_argument(
        "--grace", default="300s", help="virtual time simulated after the last publish (300s)"
    )
    p.add_argument(
        "--ordered",
        action="store_true",
        help="only topic creators publish (LAST_SEEN); others request to publish",
    )
    p.add_argument(
        "--filter",
        dest="filters",
        action="append",
        default=[],
        metavar="FILTER",
        help="a subscription filter, repeatable: each subscription gets one of them (a "
        "seeded choice; '*' = none), and events carry the workload's ups, downs, "
        "controversiality and user as attributes (docs/simulator.md)",
    )
    p.add_argument(
        "--tree-filters",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="nodes send subtree summaries of their filters and parents prune by them; "
        "the summary counts pruned and false-positive forwards (default: on; "
        "docs/protocol-notes.md 'Filters in the tree')",
    )
    p.add_argument(
        "--attributes",
        action="store_true",
        help="events carry the workload's attributes even without --filter",
    )
    p.add_argument(
        "--fast",
        action="store_true",
        help="every subscription asks for fast delivery (fast groups: publishers send "
        "straight to subscribers, two hops at most)",
    )
    p.add_argument(
        "--group-capacity",
        type=int,
        default=16,
        help="peers a publisher sends each event to directly along its group (default 16)",
    )
    p.add_argument(
        "--byzantine",
        default="0%",
        metavar="P%",
        help="fraction of the nodes that attack (none creates a topic, none publishes; "
        "needs --attack)",
    )
    p.add_argument(
        "--attack",
        default=None,
        metavar="KIND",
        help="what attackers do: blackhole (drop EVENTs), silent (also DIGEST, HEADS, "
        "groups), censor (one publisher's EVENTs), delay=D (forward D late), sybil=N "
        "(N extra identities take the topics first, then stay silent)",
    )
    p.add_argument(
        "--witnesses",
        type=int,
        default=2,
        help="witnesses a node below a relay watches (0: off; docs/protocol-notes.md "
        "'Relays that lie'; default 2)",
    )
    p.add_argument(
        "--flat-fanout",
        type=int,
        default=64,
        help="children a root takes before trees grow relays (default 64)",
    )
    p.add_argument("--workload", default=None, help="workload file (default: shipped 25k)")
    p.add_argument("--run", default=None, help="run identifier written in every record")
    p.add_argument("--gzip", action="store_true", help="write records.jsonl.gz")
    p.add_argument(
        "--rpc-records",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="nodes emit an rpc_sent/rpc_received record per RPC (default: off; the "
        "summary counts RPCs itself, and at thousands of nodes these records run to GB)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--out", required=True, help="output directory")
    p.set_defaults(handler=_run)


def _fail(msg: str) -> int:
    print(f"pulsarcast sim: error: {msg}", file=sys.stderr)
    return 2


def _run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from pulsarcast_ipfs.sim import (
        SimConfig,
        SimulationError,
        SpecError,
        parse_attack,
        parse_crashes,
        parse_duration,
        parse_fraction,
        parse_latency,
        run_simulation,
    )
    from pulsarcast_ipfs.workload import WorkloadError, load_workload

    try:
        if args.nodes < 1:
            raise SpecError("--nodes must be at least 1")
        if args.events is not None and args.events < 0:
            raise SpecError("--events must be non-negative")
        config = SimConfig(
            nodes=args.nodes,
            topics=args.topics,
            communities=args.communities,
            events=args.events,
            seed=args.seed,
            k=args.k,
            latency=parse_latency(args.latency),
            loss=parse_fraction(args.loss),
            crashes=parse_crashes(args.crash) if args.crash else (),
            crash_roots=args.crash_roots,
            restart=parse_duration(args.restart) if args.restart else None,
            rate=args.rate,
            grace=parse_duration(args.grace),
            ordered=args.ordered,
            filters=tuple(args.filters),
            attributes=args.attributes,
            tree_filters=args.tree_filters,
            fast=args.fast,
            group_capacity=args.group_capacity,
            byzantine=parse_fraction(args.byzantine),
            attack=parse_attack(args.attack) if args.attack else None,
            witnesses=args.witnesses,
            flat_fanout=args.flat_fanout,
            rpc_records=args.rpc_records,
            workload=args.workload,
            run=args.run or f"sim-{args.seed}",
        )
        workload = load_workload(args.workload)
        workload.scale(
            nodes=config.nodes,
            topics=config.topics,
            events=0,
            seed=config.seed,
            communities=config.communities,
        )
    except (SpecError, WorkloadError) as exc:
        return _fail(str(exc))
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        return _fail(f"--out {args.out!r} exists and is not a directory")

    console = Console(stderr=True)
    calls = args.events if args.events is not None else workload.total_events
    with Progress(
        TextColumn("[bold]sim[/]"),
        BarColumn(),
        TextColumn("{task.completed:,.0f}/{task.total:,.0f} publish calls"),
        TextColumn("t={task.fields[vt]:,.1f}s"),
        TextColumn("{task.fields[heap]:,} heap events"),
        TimeElapsedColumn(),
        console=console,
        disable=args.no_progress,
        transient=False,
    ) as progress:
        task = progress.add_task("sim", total=max(calls, 1), vt=0.0, heap=0)

        def report(vt: float, done: int, heap: int) -> None:
            progress.update(task, completed=done, vt=vt, heap=heap)

        try:
            summary = run_simulation(
                config, out=out, gzip_records=args.gzip, workload=workload, progress=report
            )
        except OSError as exc:
            return _fail(f"cannot write to {args.out!r}: {exc.strerror}")
        except SimulationError as exc:
            print(f"pulsarcast sim: simulation failed: {exc}", file=sys.stderr)
            return 1
    Console().print(summary_table(summary.to_dict()))
    print(f"records and summary.json written to {out}")
    return 0


def _fmt_s(v: Any) -> str:
    return "-" if v is None else f"{v * 1000:,.1f} ms"


def summary_table(s: dict[str, Any]) -> Any:
    """A rich table of a run's summary (``SimSummary.to_dict()``)."""
    from rich.table import Table

    t = Table(title=f"simulation: {s['nodes']:,} nodes, {s['topics']} topics, seed {s['seed']}")
    t.add_column("measure")
    t.add_column("value", justify="right")
    rows: list[tuple[str, str]] = [
        ("virtual time simulated", f"{s['virtual_seconds']:,.1f} s"),
        ("wall time", f"{s['wall_seconds']:,.1f} s"),
        ("heap events", f"{s['heap_events']:,}"),
        ("events injected", f"{s['events_injected']:,}"),
        ("  skipped (publisher down)", f"{s['events_skipped']:,}"),
        ("  refused", f"{s['events_refused']:,}"),
        ("events published", f"{s['events_published']:,}"),
        ("deliveries", f"{s['deliveries']:,}"),
        ("coverage vs published", f"{s['coverage_published']:.4%}"),
        ("coverage vs injected", f"{s['coverage_injected']:.4%}"),
        (
            "live subscribers' coverage",
            f"{s['coverage_live']:.4%} ({s['missing_live']:,} missing)",
        ),
        ("duplicates seen by apps", f"{s['duplicates']:,}"),
        ("recovered deliveries", f"{s['recovered']:,}"),
        ("latency p50", _fmt_s(s["latency_p50"])),
        ("latency p95", _fmt_s(s["latency_p95"])),
        ("latency p99", _fmt_s(s["latency_p99"])),
        ("latency max", _fmt_s(s["latency_max"])),
        ("RPCs sent", f"{s['rpcs_total']:,}"),
        (
            "RPCs per node (mean / p95 / max)",
            f"{s['rpcs_per_node_mean']:,.1f} / {s['rpcs_per_node_p95']:,.0f} / "
            f"{s['rpcs_per_node_max']:,}",
        ),
        ("messages lost", f"{s['messages_lost']:,}"),
        ("tree depth (max / mean)", f"{s['tree_depth_max']} / {s['tree_depth_mean']:.2f}"),
        (
            "max fan-out vs log2(N)",
            f"{s['fanout_max']} vs {s['log2_nodes']:.1f}"
            + (f" ({s['fanout_max'] / s['log2_nodes']:.1f}x)" if s["log2_nodes"] else ""),
        ),
        ("same order as publisher", f"{s['order_same']:,}/{s['order_checked']:,}"),
        ("chain breaks at publishers", f"{s['chain_breaks']:,}"),
        ("nodes crashed / restarted", f"{s['crashed']:,} / {s['restarted']:,}"),
        ("topic roots crashed", f"{s['crashed_roots']}"),
    ]
    if s.get("attackers"):
        cleared = s.get("root_slots_cleared_after")
        rows += [
            ("attackers (not counted as subscribers)", f"{s['attackers']:,}"),
            (
                "deliveries below an attacker (p50 / p99 / max)",
                f"{s['below_attacker_deliveries']:,} ({_fmt_s(s['below_attacker_p50'])} / "
                f"{_fmt_s(s['below_attacker_p99'])} / {_fmt_s(s['below_attacker_max'])})",
            ),
            (
                "attackers at the roots at the end / cleared after",
                f"{s['root_slots_attackers']:,} / "
                + (
                    "-"
                    if cleared is None
                    else "not cleared"
                    if cleared < 0
                    else f"{cleared:,.1f} s"
                ),
            ),
        ]
    if s.get("attackers") or s.get("penalties_withheld") or s.get("penalties_silent_child"):
        rows.append(
            (
                "penalised: withholding parents / silent children / honest",
                f"{s.get('penalties_withheld', 0):,} / {s.get('penalties_silent_child', 0):,} / "
                f"{s.get('false_penalties', 0):,}",
            )
        )
    if s.get("filtered_subscriptions"):
        rows.append(
            (
                "filtered subscriptions / unwanted deliveries",
                f"{s['filtered_subscriptions']:,} / {s['unwanted']:,}",
            )
        )
    if s.get("restarted"):
        rows.append(("re-deliveries after restarts (suppressed)", f"{s['redelivered']:,}"))
    if s.get("forwards_down"):
        fp, down = s["forwards_false_positive"], s["forwards_down"]
        rows.append(("false-positive forwards", f"{fp:,} of {down:,} ({fp / down:.1%})"))
    paths = s.get("deliveries_by_path") or {}
    if paths:
        rows.append(
            (
                "fast: first copy by group / helper / tree",
                f"{paths.get('group', 0):,} / {paths.get('helper', 0):,} / "
                f"{paths.get('tree', 0):,}",
            )
        )
    for k, v in rows:
        t.add_row(k, v)
    if not math.isfinite(s["coverage_published"]):
        t.add_row("warning", "coverage undefined")
    return t
