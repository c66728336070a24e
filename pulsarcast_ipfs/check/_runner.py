"""One checker round on a real cluster: publish under the nemesis, drain, read, judge.

The round (docs/faults.md "The checker"):

1. starts an ``nodes``-node cluster of the fault scenarios (Kubo + sidecar per node,
   Toxiproxy, ``routing_k=1``; ``flat_fanout`` if given: relays with children);
2. creates a topic on node 0 (its author) and subscribes every node;
3. for ``duration`` seconds, ``publishers`` nodes publish at mixed acknowledgement
   levels (:mod:`._publishers`) while the nemesis faults (:mod:`._nemesis`) and the
   resources are sampled (:mod:`._resources`);
4. stops the publishers, brings back every node that is not gone for good, and
   waits (at most ``drain`` seconds) until every live subscriber delivered every
   acknowledged event;
5. reads every live subscriber's delivery log and the topic's history and judges
   (:mod:`._analysis`).

It writes to ``out``: ``result.json`` (everything), ``calls.ndjson`` (every call),
``deliveries/nodeN.ndjson`` (what was read), ``resources.ndjson`` and
``resources.png``, ``table.txt`` (the readable verdict), ``logs/`` (every sidecar's
and Kubo daemon's log).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import anyio
import httpx

from pulsarcast_ipfs.check._analysis import CheckReport, NodeRead, PublishCall, analyse
from pulsarcast_ipfs.check._nemesis import FAULT_KINDS, Liveness, Nemesis
from pulsarcast_ipfs.check._publishers import Publishers
from pulsarcast_ipfs.check._resources import ResourceSampler, plot, summarise
from pulsarcast_ipfs.cluster import LocalSidecarCluster, fault_cluster
from pulsarcast_ipfs.cluster._faults import _deliveries_retried, setup_topic, tree_of
from pulsarcast_ipfs.polling import poll_until

__all__ = ["CheckConfig", "CheckOutcome", "render", "run_check"]

HISTORY_PAGE: Final = 500
"""Events per history page read at the end (the API's largest)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckConfig:
    """A checker round (see the module docstring)."""

    out: Path
    nodes: int = 5
    duration: float = 180.0
    seed: int = 1
    publishers: int = 0
    """Publishing nodes (0: ``max(3, nodes // 3)``), nodes 0, 1, … (0 is the author)."""
    levels: tuple[str, ...] = ("local", "1", "2")
    interval: float = 0.3
    """Mean seconds between one publisher's calls."""
    call_timeout: float = 10.0
    gap: tuple[float, float] = (20.0, 40.0)
    kinds: tuple[str, ...] = FAULT_KINDS
    flat_fanout: int | None = None
    sample: float = 5.0
    drain: float = 120.0
    settle: float = 300.0
    """Resource growth is measured after this many seconds (at most half the run)."""
    plant_loss: int | None = None
    """Test only: the last node's sidecar drops its ``plant_loss``-th delivery
    (``--misbehave lose=N``); that node is never faulted and does not publish."""

    def __post_init__(self) -> None:
        if self.nodes < 4:
            raise ValueError("nodes: at least 4")
        if self.duration <= 0 or self.interval <= 0 or self.sample <= 0 or self.drain <= 0:
            raise ValueError("duration, interval, sample and drain must be positive")
        if not 0 < self.gap[0] <= self.gap[1]:
            raise ValueError("gap: 0 < MIN <= MAX")
        if not self.levels or any(x != "local" and not x.isdigit() for x in self.levels):
            raise ValueError("levels: local or a number of other holders, e.g. local,1,2")
        bad = set(self.kinds) - set(FAULT_KINDS)
        if bad:
            raise ValueError(f"unknown fault kinds {sorted(bad)} (of {', '.join(FAULT_KINDS)})")
        if self.publishing_nodes() > self.nodes - (1 if self.plant_loss else 0):
            raise ValueError("publishers: more than the nodes")
        if self.plant_loss is not None and self.plant_loss < 1:
            raise ValueError("plant_loss: a delivery number from 1")

    def publishing_nodes(self) -> int:
        return self.publishers or max(3, self.nodes // 3)

    def to_json(self) -> dict[str, Any]:
        doc = dataclasses.asdict(self)
        doc["out"] = str(self.out)
        return doc


@dataclass(slots=True, kw_only=True)
class CheckOutcome:
    report: CheckReport
    result: dict[str, Any]
    problems: list[str]

    @property
    def ok(self) -> bool:
        return self.report.violations == 0 and not self.problems


def has_relay(tree: dict[int, Any]) -> bool:
    """Whether a node other than the root has children in ``tree`` (:func:`tree_of`)."""
    return any(v is not None and v[0] != "root" and v[2] for v in tree.values())


async def _topic_with_relays(
    sc: LocalSidecarCluster, cfg: CheckConfig, say: Callable[[str], None]
) -> tuple[str, dict[int, Any]]:
    """The round's topic and its tree. With ``flat_fanout`` (relays wanted), a topic
    whose tree came out flat is left for another name, 5 tries at most: every JOIN
    ends at the node nearest the topic's key, so the tree is flat when that node is
    the author, which the peer IDs and the topic's CID decide (about one topic in
    ``nodes``)."""
    nodes = list(range(cfg.nodes))
    for attempt in range(5):
        name = f"check-{cfg.seed}" + (f"-{attempt}" if attempt else "")
        topic = await setup_topic(sc, 0, name, nodes)
        tree = await tree_of(sc, topic, nodes)
        if not cfg.flat_fanout or has_relay(tree) or attempt == 4:
            return topic, tree
        say(f"topic {topic} came out flat ({tree}): another name, for relays")
        for i in nodes[1:]:
            async with sc.client(i) as c:
                await c.post(f"/v1/topics/{topic}/unsubscribe")
    raise AssertionError("unreachable")


async def run_check(cfg: CheckConfig, *, say: Callable[[str], None] = print) -> CheckOutcome:
    """Run one round (module docstring) and write its files to ``cfg.out``."""
    out = cfg.out
    (out / "deliveries").mkdir(parents=True, exist_ok=True)
    n = cfg.nodes
    spare = n - 1 if cfg.plant_loss is not None else None
    misbehave = {spare: f"lose={cfg.plant_loss}"} if spare is not None else None
    shape = f"flat_fanout {cfg.flat_fanout}" if cfg.flat_fanout else "default flat_fanout"
    say(f"starting a {n}-node cluster ({shape}, seed {cfg.seed})")
    run = f"check{cfg.seed}"
    async with fault_cluster(
        nodes=n, run=run, flat_fanout=cfg.flat_fanout, misbehave=misbehave
    ) as sc:
        topic, tree = await _topic_with_relays(sc, cfg, say)
        say(f"topic {topic}; tree (node: role, parent, children): {tree}")
        live = Liveness()
        publishing = list(range(cfg.publishing_nodes()))
        nemesis = Nemesis(
            sc=sc,
            rng=random.Random(cfg.seed),
            live=live,
            publishers=publishing,
            author=0,
            kinds=cfg.kinds,
            gap=cfg.gap,
            spare=frozenset({spare} if spare is not None else ()),
            max_destroyed=max(1, n // 5),
            say=say,
        )
        pubs = Publishers(
            api_url=lambda i: sc[i].api_url,
            topic=topic,
            run=f"{cfg.seed}-{int(time.time())}",
            levels=cfg.levels,
            seed=cfg.seed,
            interval=cfg.interval,
            timeout=cfg.call_timeout,
            usable=live.usable,
            after_ack=nemesis.after_ack,
        )
        sampler = ResourceSampler(
            probe=lambda i: (
                sc[i].pid if sc[i].is_running() else 0,
                sc[i].state_dir,
                sc.cluster[i].repo,
            ),
            nodes=list(range(n)),
            out=out / "resources.ndjson",
            interval=cfg.sample,
            skip=lambda i: i in live.dead,
        )
        t0 = time.time()
        say(f"publishing from nodes {publishing} for {cfg.duration:.0f} s under the nemesis")
        async with anyio.create_task_group() as tg:
            tg.start_soon(sampler.run)
            tg.start_soon(pubs.run_all, publishing)
            await nemesis.run(t0 + cfg.duration)
            await anyio.sleep(max(0.0, t0 + cfg.duration - time.time()))
            pubs.stop()
            t_end = time.time()
            problems = list(nemesis.problems)
            problems += await _bring_back(sc, live)
            live_nodes = [i for i in range(n) if i not in live.dead]
            say(f"draining (at most {cfg.drain:.0f} s) at live subscribers {live_nodes}")
            waited = await _drain(sc, topic, live_nodes, pubs.calls, live, cfg.drain)
            reads, read_problems = await _read_all(sc, topic, live_nodes, out)
            problems += read_problems
            sampler.stop()
        report = analyse(pubs.calls, reads, destroyed=live.destroyed)
        notes = _planted(sc, spare) if spare is not None else []
        _keep_logs(sc, out / "logs")
    settle = min(cfg.settle, cfg.duration / 2)
    faults_at = [(f.start - t0, f.kind) for f in nemesis.faults]
    plotted = plot(sampler.samples, out / "resources.png", faults=faults_at)
    with (out / "calls.ndjson").open("w") as f:
        for c in pubs.calls:
            f.write(json.dumps(c.to_json()) + "\n")
    result = {
        "config": cfg.to_json(),
        "topic": topic,
        "tree_at_start": {str(k): v for k, v in tree.items()},
        "publishers": publishing,
        "ack_levels_supported": pubs.ack_supported,
        "publish_seconds": t_end - t0,
        "drain_seconds": waited,
        "faults": [f.to_json() for f in nemesis.faults],
        "destroyed": {str(k): v for k, v in live.destroyed.items()},
        "problems": problems,
        "notes": notes,
        "report": report.to_json(),
        "resources": summarise(sampler.samples, settle=settle),
        "plot": "resources.png" if plotted else None,
    }
    outcome = CheckOutcome(report=report, result=result, problems=problems)
    result["ok"] = outcome.ok
    (out / "result.json").write_text(json.dumps(result, indent=2, default=str))
    (out / "table.txt").write_text(render(outcome) + "\n")
    return outcome


def render(outcome: CheckOutcome) -> str:
    """The readable verdict: the per-level table, the faults, resources, problems."""
    r = outcome.result
    kinds: dict[str, int] = {}
    for f in r["faults"]:
        kinds[f["kind"]] = kinds.get(f["kind"], 0) + 1
    lines = [
        outcome.report.table(),
        "",
        "acknowledgement levels honoured by the API: "
        + ("yes" if r["ack_levels_supported"] else "no (every call counts as local)"),
        f"faults: {len(r['faults'])} " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())),
        f"destroyed publishers: {sorted(r['destroyed']) or 'none'}; "
        f"live subscribers checked: {r['report']['subscribers']}",
    ]
    res = r["resources"]
    lines.append(f"resources after {res['settle_s']:.0f} s (MiB; FDs):")
    for node, doc in res["nodes"].items():
        rss = (
            f"RSS {doc['rss_at_settle_mib']:.1f} -> {doc['rss_last_mib']:.1f} "
            f"(growth {doc['rss_growth_mib']:+.1f}, max rise {doc['rss_max_rise_mib']:+.1f})"
            if "rss_growth_mib" in doc
            else "RSS n/a"
        )
        fds = f"FDs {doc['fds_min']}-{doc['fds_max']}" if "fds_min" in doc else "FDs n/a"
        lines.append(
            f"  node{node}: {rss}; {fds}; state max {doc['state_max_mib']:.1f}, "
            f"repo max {doc['repo_max_mib']:.1f}"
        )
    for level in r["report"]["levels"].values():
        for ev in level["lost_events"][:10]:
            lines.append(f"LOST (ack {level['level']}): {ev}")
        for ev in (level["duplicated_events"] + level["unexpected_events"])[:10]:
            lines.append(f"DUPLICATED/UNEXPECTED (ack {level['level']}): {ev}")
        for ev in level["causal_violations"][:10]:
            lines.append(f"CAUSAL (ack {level['level']}): {ev}")
    lines += [f"problem: {p}" for p in outcome.problems]
    lines += [f"note: {x}" for x in r["notes"]]
    lines.append("verdict: " + ("ok" if outcome.ok else "VIOLATIONS"))
    return "\n".join(lines)


async def _bring_back(sc: LocalSidecarCluster, live: Liveness) -> list[str]:
    """Start every node that is down but not gone for good (a safety net: every fault
    heals itself); the ones that do not come back are problems, and not checked."""
    problems = []
    for i in range(len(sc)):
        if i in live.dead:
            continue
        try:
            if not sc.cluster[i].is_running():
                await sc.start_node(i)
            elif not sc[i].is_running():
                sc[i].pid = 0
                await sc.start_sidecar(i)
        except Exception as exc:
            problems.append(f"node{i} did not come back: {str(exc).splitlines()[0]}")
            live.dead.add(i)
    return problems


async def _drain(
    sc: LocalSidecarCluster,
    topic: str,
    nodes: list[int],
    calls: list[PublishCall],
    live: Liveness,
    deadline: float,
) -> float:
    """Wait until every node delivered every acknowledged event that must arrive
    (``local`` ones of destroyed publishers need not); the seconds waited."""
    want = {
        c.cid
        for c in calls
        if c.outcome == "acknowledged"
        and c.cid
        and not (c.effective == "local" and c.node in live.destroyed)
    }
    began = time.monotonic()

    async def delivered_everywhere() -> bool:
        for i in nodes:
            try:
                got = {d["cid"] for d in await _deliveries_retried(sc, i, topic)}
            except (httpx.HTTPError, AssertionError):
                return False
            if not want <= got:
                return False
        return True

    await poll_until(delivered_everywhere, deadline=deadline, interval=3)
    await anyio.sleep(3)  # late duplicates
    return time.monotonic() - began


async def _read_all(
    sc: LocalSidecarCluster, topic: str, nodes: list[int], out: Path
) -> tuple[dict[int, NodeRead], list[str]]:
    reads: dict[int, NodeRead] = {}
    problems = []
    for i in nodes:
        try:
            deliveries = await _deliveries_retried(sc, i, topic)
            history = await _history(sc, i, topic)
        except (httpx.HTTPError, AssertionError, ValueError) as exc:
            problems.append(f"node{i}: cannot read its deliveries or history: {exc}")
            continue
        reads[i] = NodeRead(deliveries=tuple(deliveries), history=tuple(history))
        with (out / "deliveries" / f"node{i}.ndjson").open("w") as f:
            for d in deliveries:
                f.write(json.dumps(d) + "\n")
    return reads, problems


async def _history(sc: LocalSidecarCluster, i: int, topic: str) -> list[dict[str, Any]]:
    """The topic's whole retained history at node ``i``, oldest first."""
    events: list[dict[str, Any]] = []
    cursor: str | None = None
    async with sc.client(i, timeout=30) as c:
        while True:
            params: dict[str, Any] = {"order": "oldest", "limit": HISTORY_PAGE}
            if cursor:
                params["after"] = cursor
            r = await c.get(f"/v1/topics/{topic}/history", params=params)
            if r.status_code != 200:
                raise ValueError(f"history: HTTP {r.status_code} {r.text[:200]}")
            page = r.json()
            events += page["events"]
            cursor = page.get("next")
            if not cursor or not page["events"]:
                return events


def _keep_logs(sc: LocalSidecarCluster, into: Path) -> None:
    """Copy the sidecars' and Kubo daemons' logs into the run directory (the
    cluster's own directory goes when it stops)."""
    into.mkdir(parents=True, exist_ok=True)
    for i in range(len(sc)):
        for src in (sc[i].log_path, sc.cluster[i].log_path):
            with contextlib.suppress(OSError):
                shutil.copyfile(src, into / src.name)


def _planted(sc: LocalSidecarCluster, node: int) -> list[str]:
    """The planted loss's own word (its log line), to compare with the verdict."""
    return [
        f"node{node} (planted bug): {line.strip()}"
        for line in sc[node].log_tail(100_000).splitlines()
        if "on purpose (test only: lose)" in line
    ]
