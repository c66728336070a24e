"""Relays that lie on a real cluster: silent and black-hole relays with children.

The cluster (:func:`attack_cluster`) is the fault scenarios' one (Toxiproxy,
``routing_k=1``, fast keep-alives) with a small ``flat_fanout`` on every sidecar, so
that the trees have relays with children below the root's few direct ones.

A scenario (:func:`scenario_lying_relays`) lets the trees settle on a probe topic
first (every node subscribed), picks as attackers the relays with the most children
there (never the topic's author), and restarts their sidecars with the test-only
``--misbehave`` (:mod:`pulsarcast_ipfs.testing._misbehave`). Once their neighbours
no longer hold them suspect (``suspect_ttl`` after the restart), the tree of a new
topic of the same author mostly takes the same shape (a JOIN goes to the known peer
closest to the author); the attack topic is that one (up to ``TOPIC_TRIES`` are
set up until the attackers have children in one), and the attackers' children in it are
read before anything is published. Three honest nodes (the author among them) then
publish; every honest subscriber must deliver every event exactly once (the
attackers are not checked: they are not trusted to tell). Figures: the slowest
honest delivery (the "recovery" of the summary), the ``peer_penalised`` records the
honest nodes wrote (from their metric records) in all, naming an attacker, naming
an honest peer (false), and written by an attacker's child about it. The attackers
are restarted honest at the end and the scenario waits out the cluster's short
``penalty_ttl`` (:data:`ATTACK_PENALTY_TTL`), so the cluster is whole for the next
scenario.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

import anyio

from pulsarcast_ipfs.cluster._faults import (
    FaultResult,
    Publishing,
    _index_of,
    check_delivery,
    diagnose,
    latencies,
    setup_topic,
    tree_of,
)
from pulsarcast_ipfs.cluster._sidecars import LocalSidecarCluster
from pulsarcast_ipfs.core import NodeConfig

__all__ = [
    "ATTACK_SCENARIOS",
    "attack_cluster",
    "penalties",
    "scenario_blackhole_relays",
    "scenario_lying_relays",
    "scenario_silent_relays",
]

TOPIC_TRIES: Final = 4
"""Attack topics set up at most, until the attackers have children in one."""

ATTACK_PENALTY_TTL: Final = 30.0
"""``penalty_ttl`` of the attack cluster: honest nodes avoid a caught liar this long.
A scenario ends by waiting it out after restarting its attackers honest, so that the
next scenario's trees take them in again (with the default 600 s the honest nodes
still refused their JOINs)."""

ATTACK_FANOUT: Final = 3
"""``flat_fanout`` of the attack cluster: the root's list names itself and two
children; everyone else hangs below them (relays with children)."""


def attack_cluster(
    *, nodes: int = 20, run: str = "attacks", flat_fanout: int = ATTACK_FANOUT, witnesses: int = 2
) -> LocalSidecarCluster:
    """The fault scenarios' cluster (:func:`~._faults.fault_cluster`) with a small
    ``flat_fanout`` (relays with children) and ``witnesses`` per node (0: the defence
    off, to see a scenario fail)."""
    return LocalSidecarCluster(
        nodes=nodes,
        routing_k=1,
        run=run,
        toxiproxy=True,
        extra_args=[
            "--ping-interval",
            "1",
            "--flat-fanout",
            str(flat_fanout),
            "--witnesses",
            str(witnesses),
            "--penalty-ttl",
            str(ATTACK_PENALTY_TTL),
        ],
    )


def penalties(sc: LocalSidecarCluster, nodes: Sequence[int], topic: str) -> list[dict[str, Any]]:
    """The ``peer_penalised`` records about ``topic`` (a name) that ``nodes`` wrote,
    each with ``by`` (the writer's index) and ``of`` (the penalised peer's index)."""
    out: list[dict[str, Any]] = []
    for i in nodes:
        for path in sorted(sc[i].metrics_dir.glob("*.jsonl*")):
            for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
                if '"peer_penalised"' not in line:
                    continue
                try:
                    rec = json.loads(line)
                except ValueError:  # a line being written
                    continue
                if rec.get("kind") == "peer_penalised" and rec.get("topic") == topic:
                    out.append({**rec, "by": i, "of": _index_of(sc, rec.get("peer"))})
    return out


async def _restart(sc: LocalSidecarCluster, nodes: Sequence[int], spec: str | None) -> None:
    for i in nodes:
        await sc.stop_sidecar(i)
        if spec is None:
            sc.misbehave.pop(i, None)
        else:
            sc.misbehave[i] = spec
        await sc.start_sidecar(i)


async def scenario_lying_relays(
    sc: LocalSidecarCluster,
    *,
    tag: str = "",
    kind: str = "silent",
    attackers: int = 2,
    seconds: float = 15.0,
) -> FaultResult:
    """``attackers`` relays with children turn ``kind`` (``silent``, ``blackhole``)
    and honest publishers go on for ``seconds``: every honest subscriber must get
    every event (see the module docstring)."""
    n = len(sc)
    author = 0
    everyone = list(range(n))
    problems: list[str] = []
    notes: list[str] = []
    probe = await setup_topic(sc, author, f"probe-{kind}{tag}", everyone)
    await anyio.sleep(3)  # flat trees: nodes move up to the root while it has room
    before = await tree_of(sc, probe, everyone)
    relays = sorted(
        (i for i, st in before.items() if st is not None and st[2] and i != author),
        key=lambda i: (-len(before[i][2]), i),
    )
    liars = relays[:attackers]
    if len(liars) < attackers:
        notes.append(f"only {len(liars)} relays with children in the probe tree: {before}")
    await _restart(sc, liars, kind)
    # Their neighbours saw them unreachable during the restart: a suspect peer gets
    # no JOIN for ``suspect_ttl``; the attack topic's JOINs must not avoid them.
    await anyio.sleep(NodeConfig().suspect_ttl + 2.0)
    try:
        # A new topic's tree takes the probe's shape most of the time, not always:
        # up to TOPIC_TRIES topics, the first where every attacker has children (else
        # the one where most do) carries the events.
        best: tuple[int, str, str, dict[int, list[int]], Any] | None = None
        for attempt in range(TOPIC_TRIES):
            name = f"{kind}{tag}" + (f"-{attempt}" if attempt else "")
            topic = await setup_topic(sc, author, name, everyone)
            await anyio.sleep(3)
            tree = await tree_of(sc, topic, everyone)
            children = {
                a: [c for c in (tree.get(a) or (None, None, []))[2] if c is not None] for a in liars
            }
            score = sum(1 for cs in children.values() if cs)
            if best is None or score > best[0]:
                best = (score, name, topic, children, tree)
            if score == len(liars):
                break
        assert best is not None
        _, name, topic, children, tree = best
        if attempt:
            notes.append(f"{attempt + 1} attack topics tried, {name} used")
        honest = [i for i in everyone if i not in liars]
        below = sorted({c for cs in children.values() for c in cs})
        if not below:
            problems.append(f"no attacker had children in the attack topic's tree: {tree}")
        publishers = [author, *[i for i in honest if i != author and i not in below][:2]]
        pub = Publishing(sc, topic, interval=0.3)
        t_start = time.time()
        async with anyio.create_task_group() as tg:
            for i in publishers:
                tg.start_soon(pub.publish_from, i)
            await anyio.sleep(seconds)
            pub.stop.set()
        want = set(pub.ok)
        got, missing, dups = await check_delivery(sc, topic, honest, want)
        await anyio.sleep(2.5)  # the sidecars flush their metric records every 2 s
        recs = [r for r in penalties(sc, honest, name) if r.get("ts", 0) >= t_start - 1]
        by_children = [r for r in recs if r["of"] in liars and r["by"] in children[r["of"]]]
        lat = latencies(got, want)
        notes += diagnose(sc, got, missing)
        if any(missing.values()):
            notes.append(f"trees at the end: {await tree_of(sc, topic, everyone)}")
        return FaultResult(
            scenario=f"{kind}_relays",
            published=len(want),
            subscribers=tuple(honest),
            missing=missing,
            duplicates=dups,
            problems=tuple(problems),
            recovery_seconds=max(lat, default=None),
            figures={
                "attackers": float(len(liars)),
                "attackers_children": float(len(below)),
                "last_delivery_s": max(lat, default=float("nan")),
                "failed_publish_calls": float(sum(pub.failed.values())),
                "penalties": float(len(recs)),
                "penalties_of_attackers": float(sum(r["of"] in liars for r in recs)),
                "penalties_by_attackers_children": float(len(by_children)),
                "false_penalties": float(sum(r["of"] not in liars for r in recs)),
            },
            notes=(
                f"attackers ({kind}): {liars}, their children {children}",
                f"publishers: {publishers}",
                *notes,
            ),
        )
    finally:
        with anyio.CancelScope(shield=True):
            await _restart(sc, liars, None)
            # Whole again for the next scenario once the honest nodes' penalties of
            # the former attackers have lapsed.
            await anyio.sleep(ATTACK_PENALTY_TTL)


async def scenario_silent_relays(sc: LocalSidecarCluster, *, tag: str = "") -> FaultResult:
    """Two silent relays with children (no EVENT, DIGEST, HEADS or group message)."""
    return await scenario_lying_relays(sc, tag=tag, kind="silent")


async def scenario_blackhole_relays(sc: LocalSidecarCluster, *, tag: str = "") -> FaultResult:
    """Two black-hole relays with children (no EVENT; DIGEST and HEADS as usual)."""
    return await scenario_lying_relays(sc, tag=tag, kind="blackhole")


ATTACK_SCENARIOS: dict[str, Callable[..., Awaitable[FaultResult]]] = {
    "silent_relays": scenario_silent_relays,
    "blackhole_relays": scenario_blackhole_relays,
}
