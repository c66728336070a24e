"""The benchmark runner: one workload, each system × condition on a fresh cluster.

For each combination of node count and rate (one unless the configuration is a
sweep), and in it for each (system, condition), back to back: start the cluster
(Toxiproxy latency toxic for ``latency``), take a first resource sample, create
the topics at their creator nodes, subscribe every node to its topics, wait
until every subscriber and publisher has joined its topics' trees (``_ready.py``;
at most ``join_timeout`` seconds, else the run fails naming who still waits),
wait ``settle`` seconds, publish the events in ``internalId`` order at the aggregate
``rate`` (one publish in flight per node), wait ``grace`` seconds, take a last
sample and tear everything down. ``RUN_DIR/<system>-<condition>/`` (in a sweep
``RUN_DIR/<system>-<condition>-n<nodes>-r<rate>/``) then holds the metric
records (``node-<i>.jsonl``, and ``sidecar/`` for Pulsarcast) and ``run.json``
(command, Kubo version, node count, rate, machine, condition, wall time, errors,
the publish calls that failed or were refused by reason: ``publish_failures``).
With filters (``BenchConfig.filtered``) every run of a combination gets the same
:class:`FilterPlan`, written to ``filters.json`` in its run directory (each
subscription's filter and each scheduled event's attributes, for the summary).
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import resource
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

import anyio
import psutil

from pulsarcast_ipfs.bench._config import BenchConfig, BenchError, Combination
from pulsarcast_ipfs.bench._filters import FilterPlan, assign_filters
from pulsarcast_ipfs.bench._ready import wait_until_ready
from pulsarcast_ipfs.bench._recorder import sample_node
from pulsarcast_ipfs.bench._schedule import Schedule, build_schedule, load_bench_workload
from pulsarcast_ipfs.bench._systems import System, make_system
from pulsarcast_ipfs.cluster import ClusterError

__all__ = ["BenchProgress", "BenchResult", "RunOutcome", "machine_info", "run_bench"]

START_ATTEMPTS = 3
"""Cluster start-ups tried per run: a start-up can fail transiently on a loaded
machine (e.g. two daemons dialing each other at once); each failure is kept in
``run.json`` (``startup_failures``)."""


class BenchProgress:
    """Progress callbacks (no-ops here; the CLI draws ``rich`` bars)."""

    def combination_started(self, combination: Combination, index: int, total: int) -> None:
        """The runs of one (node count, rate) begin (``index`` of ``total`` combinations;
        called for a single combination too, with ``total`` 1)."""

    def run_started(self, system: str, condition: str, index: int, total: int) -> None:
        """A (system, condition) run begins (``index`` of ``total``, over every combination)."""

    def stage(self, text: str) -> None:
        """A set-up or tear-down step."""

    def joining(self, ready: int, total: int) -> None:
        """``ready`` of ``total`` (node, topic) pairs have joined their trees (called
        after every look while the runner waits before publishing)."""

    def publishing(self, done: int, total: int) -> None:
        """``done`` of ``total`` publications have completed."""

    def waiting(self, label: str, elapsed: float, total: float) -> None:
        """A timed wait (settle, grace)."""

    def run_finished(self, outcome: RunOutcome) -> None:
        """A run ended."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunOutcome:
    """What one (system, condition) run did."""

    system: str
    condition: str
    combination: Combination
    run_dir: Path
    status: str
    """``ok``, ``aborted`` or ``failed``."""
    wall_seconds: float
    publish_seconds: float
    publications: int
    max_publish_delay: float
    errors: dict[str, int] = field(default_factory=dict)
    first_error: str | None = None
    publish_failures: dict[str, int] = field(default_factory=dict)
    """Publish calls that failed or were refused, by reason (``System.publish_failures``)."""
    retries: dict[str, int] = field(default_factory=dict)
    """Calls tried again, by call and reason (``System.retries``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchResult:
    out: Path
    runs: tuple[RunOutcome, ...]

    @property
    def ok(self) -> bool:
        return all(r.status == "ok" for r in self.runs)


def machine_info() -> dict[str, Any]:
    """CPU count, memory, file-descriptor limit and load of this machine."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return {
        "nproc": os.cpu_count(),
        "memory_bytes": psutil.virtual_memory().total,
        "memory_available_bytes": psutil.virtual_memory().available,
        "nofile_soft": soft,
        "nofile_hard": hard,
        "loadavg_1_5_15": list(os.getloadavg()),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
    }


def _config_doc(cfg: BenchConfig) -> dict[str, Any]:
    doc = asdict(cfg)
    doc["out"] = str(cfg.out)
    doc["latency"] = {"ms": cfg.latency.ms, "jitter_ms": cfg.latency.jitter}
    return doc


async def _sleep_until(deadline: float) -> None:
    delay = deadline - time.monotonic()
    if delay > 0:
        await anyio.sleep(delay)


async def _timed_wait(label: str, seconds: float, progress: BenchProgress) -> None:
    start = time.monotonic()
    while (elapsed := time.monotonic() - start) < seconds:
        progress.waiting(label, elapsed, seconds)
        await anyio.sleep(min(0.5, seconds - elapsed))
    progress.waiting(label, seconds, seconds)


async def _sample_all(system: System) -> None:
    limiter = anyio.CapacityLimiter(8)

    async def one(i: int) -> None:
        node = system.kubo_nodes[i]
        async with limiter, node.client(timeout=20.0) as kubo:
            await sample_node(
                system.writers[i],
                kubo=kubo,
                kubo_pid=node.pid,
                protocols=system.protocols,
                others=system.other_processes(i),
            )
            system.writers[i].flush()

    async with anyio.create_task_group() as tg:
        for i in range(len(system.kubo_nodes)):
            tg.start_soon(one, i)


def _open_fds(system: System) -> dict[str, list[int]]:
    """Open file descriptors of each node's processes (scale limits, docs/benchmark.md)."""
    out: dict[str, list[int]] = {"kubo": []}
    for i, node in enumerate(system.kubo_nodes):
        procs = {"kubo": node.pid, **system.other_processes(i)}
        for name, pid in procs.items():
            try:
                out.setdefault(name, []).append(psutil.Process(pid).num_fds())
            except psutil.Error:
                continue
    return out


async def _sampler(system: System, interval: float) -> None:
    while True:
        await anyio.sleep(interval)
        await _sample_all(system)


RUN_FAILURES: Final = (BenchError, ClusterError, OSError)
"""What fails one run (recorded, the next run goes on) rather than the whole set."""


def _run_failure(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """The one run failure (:data:`RUN_FAILURES`) a task group wrapped, else ``None``
    (anything else, e.g. cancellation, is not a failed run: it propagates)."""
    leaves: list[BaseException] = []
    pending: list[BaseException] = [group]
    while pending:
        exc = pending.pop()
        if isinstance(exc, BaseExceptionGroup):
            pending.extend(exc.exceptions)
        else:
            leaves.append(exc)
    if len(leaves) == 1 and isinstance(leaves[0], RUN_FAILURES):
        return leaves[0]
    return None


async def _run_one(
    cfg: BenchConfig,
    combination: Combination,
    schedule: Schedule,
    system_name: str,
    condition: str,
    machine: dict[str, Any],
    progress: BenchProgress,
    plan: FilterPlan | None = None,
) -> RunOutcome:
    run_dir = cfg.run_dir(system_name, condition, combination)
    run_id = cfg.run_id(condition, combination)
    run_dir.mkdir(parents=True, exist_ok=True)
    if plan is not None:
        (run_dir / "filters.json").write_text(
            json.dumps(plan.document(schedule.events), separators=(",", ":")) + "\n"
        )
    began = time.monotonic()
    started_at = time.time()
    status = "failed"
    kubo_version = ""
    done = 0
    publish_seconds = 0.0
    max_delay = 0.0
    system: System | None = None
    failure: str | None = None
    meta: dict[str, Any] = {
        "system": system_name,
        "condition": condition,
        "run": run_id,
        "command": cfg.command,
        "nodes": combination.nodes,
        "workload": cfg.workload,
        "rate": combination.rate,
        "payload": combination.payload,
        "events": len(schedule.events),
        "topics": [t.name for t in schedule.topics],
        "subscriptions": sum(len(s) for s in schedule.subscriptions),
        "expected_deliveries": schedule.expected_deliveries(),
        **({"group_capacity": cfg.group_capacity} if system_name == "pulsarcast-fast" else {}),
        **({"ack": cfg.ack or "local"} if system_name.startswith("pulsarcast") else {}),
        **(
            {
                "filters": {
                    "selectivity": plan.selectivity,
                    "seed": plan.seed,
                    "measured": plan.measured,
                    "expected_matching": plan.matching,
                    "applied_by": (
                        "node" if system_name == "pulsarcast-filtered" else "application"
                    ),
                    "tree_filters": system_name == "pulsarcast-filtered",
                }
            }
            if plan is not None
            else {}
        ),
        "grace": cfg.grace,
        "settle": cfg.settle,
        "latency": (
            {"ms": cfg.latency.ms, "jitter_ms": cfg.latency.jitter}
            if condition == "latency"
            else None
        ),
        "machine": machine,
        "loadavg_at_start": list(os.getloadavg()),
        "started_at": started_at,
    }
    try:
        async with contextlib.AsyncExitStack() as stack:
            for attempt in range(1, START_ATTEMPTS + 1):
                progress.stage("starting the cluster")
                system = make_system(
                    system_name,
                    nodes=combination.nodes,
                    run=run_id,
                    run_dir=run_dir,
                    latency=cfg.latency if condition == "latency" else None,
                    sample_interval=cfg.sample_interval,
                    say=progress.stage,
                    group_capacity=cfg.group_capacity,
                    filters=plan,
                    ack=cfg.ack,
                )
                try:
                    await stack.enter_async_context(system)
                    break
                except ClusterError as exc:
                    if attempt == START_ATTEMPTS:
                        raise
                    first = str(exc).splitlines()[0][:200]
                    progress.stage(f"cluster start-up failed ({first}); retrying")
                    meta.setdefault("startup_failures", []).append(str(exc))
                    for leftover in run_dir.glob("node-*.jsonl"):
                        leftover.unlink()
            assert system is not None
            live: System = system
            if plan is not None:
                progress.stage(plan.describe())
            kubo_version = await live.kubo_version()
            meta["kubo_version"] = kubo_version
            meta["peers"] = [n.peer_id for n in live.kubo_nodes]
            meta["pids"] = [n.pid for n in live.kubo_nodes]
            meta["startup_seconds"] = time.monotonic() - began
            await _sample_all(live)
            async with anyio.create_task_group() as tg:
                tg.start_soon(_sampler, live, cfg.sample_interval)
                progress.stage(f"creating {len(schedule.topics)} topics")
                await live.create_topics(schedule)
                progress.stage(f"subscribing ({meta['subscriptions']} subscriptions)")
                await live.subscribe(schedule)
                pairs = sum(len(ts) for ts in schedule.participants().values())
                progress.stage(f"waiting until {pairs} subscriptions and publishers have joined")
                joined = await wait_until_ready(
                    lambda: live.waiting(schedule),
                    total=pairs,
                    limit=cfg.join_timeout,
                    progress=progress.joining,
                )
                meta["join_seconds"] = joined
                progress.stage(f"every subscriber and publisher joined in {joined:.1f} s")
                await _timed_wait("settling", cfg.settle, progress)
                progress.publishing(0, len(schedule.events))
                t0 = time.monotonic()

                async def publish(i: int) -> None:
                    nonlocal done, max_delay
                    ev = schedule.events[i]
                    await live.publish(ev)
                    done += 1
                    max_delay = max(max_delay, time.monotonic() - (t0 + ev.at))
                    progress.publishing(done, len(schedule.events))

                async with anyio.create_task_group() as pubs:
                    for i, ev in enumerate(schedule.events):
                        await _sleep_until(t0 + ev.at)
                        pubs.start_soon(publish, i)
                publish_seconds = time.monotonic() - t0
                await _timed_wait("grace period", cfg.grace, progress)
                tg.cancel_scope.cancel()
            await _sample_all(live)
            meta["open_fds_at_end"] = _open_fds(live)
            progress.stage("tearing down")
        status = "ok"
    except anyio.get_cancelled_exc_class():
        status = "aborted"
        raise
    except BaseException as exc:
        cause = _run_failure(exc) if isinstance(exc, BaseExceptionGroup) else exc
        if isinstance(cause, RUN_FAILURES):
            failure = str(cause)
        raise
    finally:
        outcome = RunOutcome(
            system=system_name,
            condition=condition,
            combination=combination,
            run_dir=run_dir,
            status=status,
            wall_seconds=time.monotonic() - began,
            publish_seconds=publish_seconds,
            publications=done,
            max_publish_delay=max_delay,
            errors=dict(system.errors) if system is not None else {},
            first_error=failure or (system.first_error if system is not None else None),
            publish_failures=dict(system.publish_failures) if system is not None else {},
            retries=dict(system.retries) if system is not None else {},
        )
        meta.update(
            status=status,
            wall_seconds=outcome.wall_seconds,
            publish_seconds=publish_seconds,
            publications_completed=done,
            max_publish_delay=max_delay,
            errors=outcome.errors,
            first_error=outcome.first_error,
            publish_failures=outcome.publish_failures,
            retries=outcome.retries,
            **(system.publish_call_summary() if system is not None else {}),
            finished_at=time.time(),
            loadavg_at_end=list(os.getloadavg()),
        )
        (run_dir / "run.json").write_text(json.dumps(meta, indent=2) + "\n")
        progress.run_finished(outcome)
    return outcome


def check_out_dir(cfg: BenchConfig) -> None:
    """Refuse to mix records into a run directory that already holds some."""
    for combination in cfg.combinations():
        for s in cfg.systems:
            for c in cfg.conditions:
                d = cfg.run_dir(s, c, combination)
                if d.exists() and any(d.iterdir()):
                    raise BenchError(f"{d} already holds a run; choose another --out")


async def run_bench(cfg: BenchConfig, *, progress: BenchProgress | None = None) -> BenchResult:
    """Run every combination of ``cfg``, and in it every (system, condition), in
    turn; see the module docstring.

    Every combination's schedule is built before the first run (a bad workload or
    an empty schedule stops the set before any cluster starts). A failed run
    (cluster error, system error) is recorded in its ``run.json`` and the next run
    goes on; cancellation (Ctrl-C) tears the current one down and stops.
    """
    prog = progress or BenchProgress()
    workload = load_bench_workload(cfg.workload)
    combinations = cfg.combinations()
    schedules: dict[Combination, Schedule] = {}
    plans: dict[Combination, FilterPlan] = {}
    for combination in combinations:
        schedule = build_schedule(
            workload,
            nodes=combination.nodes,
            rate=combination.rate,
            events=cfg.events,
            topics=cfg.topics,
            seed=cfg.seed,
            payload=combination.payload,
        )
        if not schedule.events:
            raise BenchError("the schedule has no events")
        schedules[combination] = schedule
        if cfg.filtered:
            # The same plan for every system of the combination (same schedule, seed).
            plans[combination] = assign_filters(
                schedule, selectivity=cfg.selectivity, seed=cfg.seed
            )
    check_out_dir(cfg)
    cfg.out.mkdir(parents=True, exist_ok=True)
    machine = machine_info()
    (cfg.out / "bench.json").write_text(
        json.dumps({"config": _config_doc(cfg), "machine": machine}, indent=2) + "\n"
    )
    pairs: Sequence[tuple[str, str]] = [(s, c) for s in cfg.systems for c in cfg.conditions]
    total = len(combinations) * len(pairs)
    outcomes: list[RunOutcome] = []
    for k, combination in enumerate(combinations):
        prog.combination_started(combination, k, len(combinations))
        for s, c in pairs:
            prog.run_started(s, c, len(outcomes), total)
            try:
                try:
                    outcomes.append(
                        await _run_one(
                            cfg,
                            combination,
                            schedules[combination],
                            s,
                            c,
                            machine,
                            prog,
                            plans.get(combination),
                        )
                    )
                except BaseExceptionGroup as group:  # raised inside the sampler's task group
                    failure = _run_failure(group)
                    if failure is None:
                        raise
                    raise failure from None
            except RUN_FAILURES as exc:
                d = cfg.run_dir(s, c, combination)
                outcomes.append(
                    RunOutcome(
                        system=s,
                        condition=c,
                        combination=combination,
                        run_dir=d,
                        status="failed",
                        wall_seconds=0.0,
                        publish_seconds=0.0,
                        publications=0,
                        max_publish_delay=0.0,
                        first_error=str(exc),
                    )
                )
                meta_path = d / "run.json"
                if meta_path.exists():
                    meta = json.loads(meta_path.read_text())
                    meta["first_error"] = str(exc)
                    meta_path.write_text(json.dumps(meta, indent=2) + "\n")
    return BenchResult(out=cfg.out, runs=tuple(outcomes))
