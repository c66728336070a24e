"""``pulsarcast bench``: Pulsarcast against Kubo's gossipsub and floodsub (docs/benchmark.md)."""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
from pathlib import Path
from typing import Any

from pulsarcast_ipfs.cli._app import ack_level

__all__ = ["add_parser", "run"]

_EPILOG = """\
examples:
  pulsarcast bench --systems gossipsub,floodsub --nodes 10 --events 200 --out runs/b1
  pulsarcast bench --systems pulsarcast,pulsarcast-ordered,gossipsub,floodsub \\
      --conditions normal,latency --nodes 20 --workload 25k --rate 50 --events 2000 \\
      --grace 30 --latency 500ms±300ms --out runs/b2 --report
  pulsarcast bench --rate 5,20,50,100 --nodes 20,50 --events 2000 --out runs/sweep1
  pulsarcast bench --systems pulsarcast-fast,pulsarcast,gossipsub --conditions latency \
      --nodes 20 --rate 20 --events 1000 --group-capacity 4 --out runs/fast1
  pulsarcast bench --systems gossipsub,floodsub,pulsarcast --conditions normal \
      --nodes 20 --rate 5 --events 100 --payload 16k,64k,256k --out runs/pay1
  pulsarcast bench --systems pulsarcast-filtered,pulsarcast,gossipsub --conditions normal \
      --nodes 20 --rate 5 --events 1000 --selectivity 0.1 --out runs/filtered1

Writes OUT/<system>-<condition>/ (metric records, run.json), OUT/bench.json and
OUT/summary.md; --report also runs the Spark report into OUT/report/.

A sweep (several --rate and/or --nodes values) runs every combination of node
count × rate × system × condition, each under OUT/<system>-<condition>-n<N>-r<R>/.
--payload pads every event to exactly the size given (a sweep over sizes when
several): summary.md then has a table per size and a "Payload sizes" table of
bytes per delivery and latency with their ratios to gossipsub.

summary.md then has a table per combination and each system's knee per node
count: the highest rate such that it and every lower rate tested were sustained
under normal conditions (run completed, every expected delivery made, p99
latency under {p99_ms} ms). bench.json holds the same figures.
"""


def add_parser(sub: Any) -> None:
    from pulsarcast_ipfs.bench import (
        CONDITIONS,
        DEFAULT_NODES,
        DEFAULT_RATE,
        DEFAULT_SELECTIVITY,
        KNEE_P99_SECONDS,
        SYSTEMS,
        rate_label,
    )

    p: argparse.ArgumentParser = sub.add_parser(
        "bench",
        help="benchmark Pulsarcast against Kubo's gossipsub and floodsub on local clusters",
        description=(
            "Run one workload on a fresh local cluster for each system and network "
            "condition, back to back, and write metric records for the Spark report; "
            "several node counts or rates make a sweep over every combination. "
            f"Systems: {', '.join(SYSTEMS)}. Conditions: {', '.join(CONDITIONS)} "
            "(Toxiproxy latency on every node's inbound connections)."
        ),
        epilog=_EPILOG.format(p99_ms=f"{1000 * KNEE_P99_SECONDS:.0f}"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--systems", default="pulsarcast,gossipsub,floodsub", help="comma-separated systems"
    )
    p.add_argument("--conditions", default="normal,latency", help="comma-separated conditions")
    p.add_argument(
        "--nodes",
        default=str(DEFAULT_NODES),
        help=f"nodes per cluster; comma-separated for a sweep, e.g. 20,50 "
        f"(default {DEFAULT_NODES})",
    )
    p.add_argument(
        "--workload", default="25k", help="25k, 10k (shipped Reddit 2007 files) or a file path"
    )
    p.add_argument(
        "--rate",
        default=rate_label(DEFAULT_RATE),
        help="aggregate events per second; comma-separated for a sweep, e.g. 5,20,50,100 "
        f"(default {rate_label(DEFAULT_RATE)})",
    )
    p.add_argument(
        "--events", type=int, default=None, help="publish this many events (default all)"
    )
    p.add_argument(
        "--payload",
        default=None,
        metavar="SIZES",
        help="synthetic payload size of every event, bytes with an optional k or m suffix; "
        "comma-separated for a sweep, e.g. 1k,16k,64k,256k (from 1k to 512k, Pulsarcast's "
        "payload limit; default: the workload's own 200-600 byte records)",
    )
    p.add_argument("--topics", type=int, default=None, help="keep the T largest topics")
    p.add_argument("--grace", type=float, default=30.0, help="seconds after the last publish (30)")
    p.add_argument(
        "--settle", type=float, default=5.0, help="seconds between subscribing and publishing (5)"
    )
    p.add_argument(
        "--join-timeout",
        type=float,
        default=120.0,
        help="seconds to wait, after subscribing, until every subscriber and publisher "
        "has joined its topics' trees; past it the run fails naming them (120)",
    )
    p.add_argument(
        "--latency",
        default="500ms±300ms",
        help="latency condition: MS±JITTER (default 500ms±300ms)",
    )
    p.add_argument(
        "--sample-interval", type=float, default=10.0, help="seconds between resource samples"
    )
    p.add_argument(
        "--ack",
        type=ack_level,
        default="local",
        metavar="LEVEL",
        help="Pulsarcast systems: the acknowledgement level of every publish: 'local' "
        "(the default here: answered once the event is in the publisher's node) or N "
        "(once N other nodes hold it); the run records each publish call's duration",
    )
    p.add_argument(
        "--group-capacity",
        type=int,
        default=4,
        help="pulsarcast-fast: peers a publisher sends each event to directly along its "
        "group, helpers included (default 4: below the 20-node cluster's group sizes)",
    )
    p.add_argument(
        "--selectivity",
        type=float,
        default=DEFAULT_SELECTIVITY,
        help="with filters: the share of a topic's events each subscription's filter "
        f"matches (default {DEFAULT_SELECTIVITY:g})",
    )
    p.add_argument(
        "--filters",
        action="store_true",
        help="give every subscription a filter even without pulsarcast-filtered (which "
        "implies it); other systems' applications apply it (docs/benchmark.md)",
    )
    p.add_argument(
        "--seed", type=int, default=0, help="workload scaling / payload / filter seed (0)"
    )
    p.add_argument("--run", default=None, help="run-set name in the records (default: OUT's name)")
    p.add_argument(
        "--out",
        required=True,
        type=Path,
        help="output directory; a run set may be extended, an existing run is never overwritten",
    )
    p.add_argument("--report", action="store_true", help="run the Spark report afterwards")
    p.set_defaults(handler=run)


def _err(msg: str) -> int:
    print(f"Error: {msg}", file=sys.stderr)
    return 1


def _split(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def run(args: argparse.Namespace) -> int:
    import anyio
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TaskID,
        TextColumn,
        TimeElapsedColumn,
    )

    from pulsarcast_ipfs.bench import (
        BenchConfig,
        BenchError,
        BenchProgress,
        BenchResult,
        Combination,
        RunOutcome,
        parse_latency,
        parse_node_counts,
        parse_payload_sizes,
        parse_rates,
        payload_label,
        rate_label,
        run_bench,
        write_summary,
    )

    console = Console(stderr=True)
    try:
        out: Path = args.out
        cfg = BenchConfig(
            systems=_split(args.systems),
            conditions=_split(args.conditions),
            nodes=parse_node_counts(args.nodes),
            workload=args.workload,
            rates=parse_rates(args.rate),
            payloads=(None,) if args.payload is None else parse_payload_sizes(args.payload),
            events=args.events,
            topics=args.topics,
            grace=args.grace,
            settle=args.settle,
            join_timeout=args.join_timeout,
            latency=parse_latency(args.latency),
            sample_interval=args.sample_interval,
            seed=args.seed,
            group_capacity=args.group_capacity,
            ack=0 if args.ack == "local" else args.ack,
            filters=args.filters,
            selectivity=args.selectivity,
            out=out,
            run=args.run or (out.resolve().name or "bench"),
            command="pulsarcast bench " + shlex.join(sys.argv[2:] if len(sys.argv) > 2 else []),
        )
    except BenchError as exc:
        return _err(str(exc))

    class Bars(BenchProgress):
        def __init__(self, progress: Progress) -> None:
            self.p = progress
            self.runs: TaskID | None = None
            self.pub: TaskID | None = None
            self.wait: TaskID | None = None
            self.join: TaskID | None = None
            self.label = ""
            self.combination = ""

        def combination_started(self, combination: Combination, index: int, total: int) -> None:
            if total > 1:
                what = f"{combination.nodes} nodes, {rate_label(combination.rate)} events/s"
                if combination.payload is not None:
                    what += f", payload {payload_label(combination.payload)}"
                self.combination = f", {what}, combination {index + 1}/{total}"
                console.log(f"combination {index + 1} of {total}: {what}")

        def run_started(self, system: str, condition: str, index: int, total: int) -> None:
            self.label = f"{system}/{condition}{self.combination}"
            if self.runs is None:
                self.runs = self.p.add_task("runs", total=total)
            self.p.update(self.runs, completed=index, description=f"run {self.label}")
            for t in (self.pub, self.wait, self.join):
                if t is not None:
                    self.p.remove_task(t)
            self.pub = self.wait = self.join = None

        def stage(self, text: str) -> None:
            console.log(f"[{self.label}] {text}")

        def joining(self, ready: int, total: int) -> None:
            if self.join is None:
                self.join = self.p.add_task("joined the trees", total=max(total, 1))
            self.p.update(self.join, completed=ready)
            if ready >= total:
                self.p.remove_task(self.join)
                self.join = None

        def publishing(self, done: int, total: int) -> None:
            if self.pub is None:
                self.pub = self.p.add_task("publishing", total=total)
            self.p.update(self.pub, completed=done)

        def waiting(self, label: str, elapsed: float, total: float) -> None:
            if self.wait is None:
                self.wait = self.p.add_task(label, total=max(total, 0.001))
            self.p.update(self.wait, description=label, completed=elapsed, total=max(total, 0.001))
            if elapsed >= total:
                self.p.remove_task(self.wait)
                self.wait = None

        def run_finished(self, outcome: RunOutcome) -> None:
            if self.runs is not None:
                self.p.advance(self.runs)
            errs = ", ".join(f"{k}: {v}" for k, v in outcome.errors.items()) or "no errors"
            if outcome.publish_failures:
                errs += (
                    " (publish calls failed or refused: "
                    + ", ".join(f"{n} {why}" for why, n in outcome.publish_failures.items())
                    + ")"
                )
            console.log(
                f"[{self.label}] {outcome.status} in {outcome.wall_seconds:.0f} s, "
                f"{outcome.publications} publications, {errs}"
                + (f" (first: {outcome.first_error})" if outcome.first_error else "")
            )

    aborted = False

    async def main() -> BenchResult | None:
        nonlocal aborted
        result: BenchResult | None = None
        failure: BenchError | None = None
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        ) as progress:
            async with anyio.create_task_group() as tg:

                async def watch() -> None:
                    nonlocal aborted
                    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as sigs:
                        async for _ in sigs:
                            aborted = True
                            console.log("interrupted: tearing the cluster down")
                            tg.cancel_scope.cancel()
                            return

                tg.start_soon(watch)
                try:
                    result = await run_bench(cfg, progress=Bars(progress))
                except BenchError as exc:
                    failure = exc  # raised below, outside the task group
                tg.cancel_scope.cancel()
        if failure is not None:
            raise failure
        return result

    try:
        result = anyio.run(main)
    except BenchError as exc:
        return _err(str(exc))
    table = write_summary(cfg.out)
    print(table)
    if aborted:
        print("aborted: every process was stopped; partial records kept", file=sys.stderr)
        return 130
    assert result is not None
    status = 0 if result.ok else 1
    if args.report:
        from pulsarcast_ipfs import _report_job

        rep = argparse.Namespace(
            run_dirs=[str(r.run_dir) for r in result.runs],
            out=str(cfg.out / "report"),
            master=None,
            format="md",
            driver_memory=None,
            exclude_publisher=False,
            bucket=cfg.sample_interval,
            report_dir=None,
            no_plots=False,
        )
        status = max(status, _report_job.run(rep))
    return status
