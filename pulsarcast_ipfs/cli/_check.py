"""``pulsarcast check``: the checker (:mod:`pulsarcast_ipfs.check`) from the command line."""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from pathlib import Path
from typing import Any

__all__ = ["add_parser", "run"]

_DESCRIPTION = """\
Run a local cluster of real Kubo daemons with a sidecar each, under a seeded
random nemesis (SIGKILL and restart; a publisher SIGKILLed for good with its repo
and state deleted right after an acknowledgement; partitions; a Kubo restart under
its sidecar; slow links; an unwritable state directory), while publishers publish
at mixed acknowledgement levels. After a final drain, read every live subscriber's
delivery log and history and report per level: lost (acknowledged, missing at a
live subscriber), duplicated, unexpected (read but never sent), causal-order
violations, and what became of the calls without an answer. Writes result.json,
table.txt, calls.ndjson, resources.ndjson and resources.png (sidecar RSS, open FDs,
state-directory and Kubo-repo size per node over time) to OUT (OUT/roundN with
--rounds > 1). Exit 0: no violation; 1: a violation or a problem of the run; 2: bad
usage. See docs/faults.md "The checker"."""

_EPILOG = """\
examples:
  pulsarcast check --nodes 5 --duration 180 --out runs/check1
  nice -n 10 pulsarcast check --nodes 10 --duration 600 --gap 20-40 --out runs/soak10
  pulsarcast check --rounds 4 --duration 300 --out runs/check4   # rounds 1, 3: flat_fanout 3"""


def _gap(text: str) -> tuple[float, float]:
    try:
        lo, _, hi = text.partition("-")
        pair = (float(lo), float(hi or lo))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected MIN-MAX seconds, e.g. 20-40, got {text!r}"
        ) from None
    if not 0 < pair[0] <= pair[1]:
        raise argparse.ArgumentTypeError(f"expected 0 < MIN <= MAX, got {text!r}")
    return pair


def _csv(text: str) -> tuple[str, ...]:
    items = tuple(x.strip() for x in text.split(",") if x.strip())
    if not items:
        raise argparse.ArgumentTypeError("expected a comma-separated list")
    return items


def add_parser(sub: Any) -> None:
    from pulsarcast_ipfs.check import FAULT_KINDS
    from pulsarcast_ipfs.cluster import RELAY_CHOICES, RELAY_FANOUT

    p: argparse.ArgumentParser = sub.add_parser(
        "check",
        help="run a cluster under a seeded nemesis and check what was acknowledged "
        "against what was delivered (lost, duplicated, unexpected, causal order)",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--out", type=Path, required=True, metavar="DIR", help="run directory")
    p.add_argument("--nodes", type=int, default=5, help="nodes (Kubo + sidecar; default 5)")
    p.add_argument(
        "--duration", type=float, default=180.0, metavar="SECONDS", help="publishing time per round"
    )
    p.add_argument("--seed", type=int, default=1, help="the nemesis' seed (round r: seed + r)")
    p.add_argument("--rounds", type=int, default=1, help="rounds, each on a fresh cluster")
    p.add_argument(
        "--relays",
        choices=RELAY_CHOICES,
        default="alternate",
        help=f"rounds with flat_fanout {RELAY_FANOUT} (relays with children): every other one, "
        "the first included (default), all, or none",
    )
    p.add_argument(
        "--publishers", type=int, default=0, help="publishing nodes (default max(3, nodes/3))"
    )
    p.add_argument(
        "--levels",
        type=_csv,
        default=("local", "1", "2"),
        metavar="L,L",
        help="acknowledgement levels the calls draw from (default local,1,2)",
    )
    p.add_argument(
        "--interval",
        type=float,
        default=0.3,
        metavar="SECONDS",
        help="mean time between one publisher's calls (default 0.3)",
    )
    p.add_argument(
        "--gap",
        type=_gap,
        default=(20.0, 40.0),
        metavar="MIN-MAX",
        help="seconds from one fault's start to the next (default 20-40)",
    )
    p.add_argument(
        "--faults",
        type=_csv,
        default=FAULT_KINDS,
        metavar="K,K",
        help=f"fault kinds the nemesis draws from (default all: {','.join(FAULT_KINDS)})",
    )
    p.add_argument(
        "--sample",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="resource sampling period (default 5)",
    )
    p.add_argument(
        "--drain",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="longest wait at the end for every acknowledged event to arrive (default 120)",
    )
    p.add_argument(
        "--plant-loss",
        type=int,
        default=None,
        metavar="N",
        help="TEST ONLY: the last node's sidecar drops its N-th delivery (--misbehave lose=N), "
        "to see the checker catch it; refused unless PULSARCAST_ALLOW_MISBEHAVE=1",
    )
    p.add_argument("--json", action="store_true", help="print result.json instead of the table")
    p.set_defaults(handler=run)


def _say(message: str) -> None:
    print(message, flush=True)


def _quiet(message: str) -> None:
    pass


def _fail(msg: str, code: int) -> int:
    print(f"Error: {msg}", file=sys.stderr)
    return code


def run(args: argparse.Namespace) -> int:
    import anyio

    from pulsarcast_ipfs.check import CheckConfig, render, run_check
    from pulsarcast_ipfs.cluster import RELAY_FANOUT, ClusterError, relay_round
    from pulsarcast_ipfs.testing._misbehave import ALLOW_ENV

    if args.plant_loss is not None and os.environ.get(ALLOW_ENV) != "1":
        return _fail(f"--plant-loss: a test-only option, refused unless {ALLOW_ENV}=1 is set", 2)
    if args.rounds < 1:
        return _fail("--rounds: at least 1", 2)
    configs = []
    for r in range(args.rounds):
        try:
            configs.append(
                CheckConfig(
                    out=args.out if args.rounds == 1 else args.out / f"round{r}",
                    nodes=args.nodes,
                    duration=args.duration,
                    seed=args.seed + r,
                    publishers=args.publishers,
                    levels=args.levels,
                    interval=args.interval,
                    gap=args.gap,
                    kinds=args.faults,
                    flat_fanout=RELAY_FANOUT if relay_round(args.relays, r) else None,
                    sample=args.sample,
                    drain=args.drain,
                    plant_loss=args.plant_loss,
                )
            )
        except ValueError as exc:
            return _fail(str(exc), 2)
    failed = False
    for r, cfg in enumerate(configs):
        if args.rounds > 1:
            print(f"== round {r + 1}/{args.rounds}", flush=True)
        try:
            say = _quiet if args.json else _say
            outcome = anyio.run(functools.partial(run_check, cfg, say=say))
        except ClusterError as exc:
            return _fail(f"the cluster failed: {str(exc).splitlines()[0]}", 1)
        except OSError as exc:
            return _fail(f"cannot write to {cfg.out}: {exc}", 1)
        if args.json:
            print(json.dumps(outcome.result, indent=2, default=str))
        else:
            print(render(outcome))
            print(f"(written to {cfg.out})", flush=True)
        failed = failed or not outcome.ok
    return 1 if failed else 0
