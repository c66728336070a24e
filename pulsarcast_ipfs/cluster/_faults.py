"""Fault scenarios on a real cluster: crashes, restarts, partitions, slow
peers, an unwritable state directory.

Each scenario runs on a :class:`LocalSidecarCluster` (Kubo + sidecar per node,
Toxiproxy in front of every node), creates its own topic, publishes from several
nodes while the fault happens, and returns a :class:`FaultResult`: which events
were published (every publish call answered ``published``), which live subscriber
missed or got twice which event, and the figures (recovery time, latencies).
``tests/test_faults_cluster.py`` asserts on the results, ``benchmarks/faults.py``
repeats the scenarios and prints the figures.

The guarantee checked (docs/protocol.md §5 "History and eventual delivery"): every
event whose publish call succeeded is delivered exactly once to every subscriber
alive at the end, killed-and-restarted subscribers included (persisted state and
gap repair), killed-and-not-restarted ones excluded. Deliveries are read from each
sidecar's persisted delivery log (``GET /v1/deliveries?after=0``).

Recovery time: from the end of the fault (heal, restart) until the last event
created before that moment is delivered at the last live subscriber (0 when every
such event was already delivered everywhere when the fault ended).
"""

from __future__ import annotations

import contextlib
import functools
import json
import subprocess
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import anyio
import httpx

from pulsarcast_ipfs.cluster._sidecars import LocalSidecarCluster
from pulsarcast_ipfs.polling import poll_until
from pulsarcast_ipfs.stats import percentile

__all__ = [
    "RELAY_CHOICES",
    "RELAY_FANOUT",
    "SCENARIOS",
    "FaultResult",
    "chattr",
    "fault_cluster",
    "relay_round",
    "scenario_kill_nodes",
    "scenario_partition",
    "scenario_restarts",
    "scenario_slow_subscriber",
    "scenario_unwritable_state",
    "throttle",
]

PROTOCOL = "/x/pulsarcast/2.12.0"


@dataclass(frozen=True, slots=True, kw_only=True)
class FaultResult:
    """What one run of a fault scenario observed."""

    scenario: str
    published: int
    """Events whose publish call succeeded."""
    subscribers: tuple[int, ...]
    """Live subscribers at the end (the ones checked)."""
    missing: dict[int, tuple[str, ...]] = field(default_factory=dict)
    """Node → published events it never delivered."""
    duplicates: dict[int, dict[str, int]] = field(default_factory=dict)
    """Node → event delivered more than once → times."""
    problems: tuple[str, ...] = ()
    """Other failed checks (health, exit codes, state files), in words."""
    recovery_seconds: float | None = None
    figures: dict[str, float] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return (
            not self.problems
            and not any(self.missing.values())
            and not any(self.duplicates.values())
        )

    def describe(self) -> str:
        lines = [
            f"{self.scenario}: {'ok' if self.ok else 'FAILED'}; {self.published} events, "
            f"subscribers {list(self.subscribers)}, recovery "
            + (f"{self.recovery_seconds:.2f} s" if self.recovery_seconds is not None else "n/a")
        ]
        lines += [f"  {k}: {v:.3f}" for k, v in sorted(self.figures.items())]
        for node, cids in sorted(self.missing.items()):
            if cids:
                lines.append(f"  node{node} missed {len(cids)}: {', '.join(cids[:5])}")
        for node, dups in sorted(self.duplicates.items()):
            if dups:
                lines.append(f"  node{node} duplicates: {dups}")
        lines += [f"  problem: {p}" for p in self.problems]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


RELAY_FANOUT: Final = 3
"""A small ``flat_fanout`` for rounds whose trees must have relays with children: the
root's MEMBERS list names itself and two children, everyone else hangs below them
(with the default, a 10-node tree has depth 1 and a killed "relay" is a leaf)."""

RELAY_CHOICES: Final = ("alternate", "always", "never")
"""Which rounds of a repeated run have relays (:func:`relay_round`)."""


def relay_round(relays: str, r: int) -> bool:
    """Whether round ``r`` (from 0) runs with relays (``flat_fanout``
    :data:`RELAY_FANOUT`): ``alternate`` every other round, the first included."""
    return relays == "always" or (relays == "alternate" and r % 2 == 0)


def fault_cluster(
    *,
    nodes: int = 10,
    run: str = "faults",
    flat_fanout: int | None = None,
    misbehave: Mapping[int, str] | None = None,
) -> LocalSidecarCluster:
    """The cluster the scenarios expect: Toxiproxy on, ``routing_k=1`` (relays and
    depth), fast keep-alives so dead neighbours are noticed within seconds;
    ``flat_fanout`` given (e.g. :data:`RELAY_FANOUT`): the sidecars' ``--flat-fanout``
    (None: their default); ``misbehave``: test-only ``--misbehave`` specs per node."""
    extra = ["--ping-interval", "1"]
    if flat_fanout is not None:
        extra += ["--flat-fanout", str(flat_fanout)]
    return LocalSidecarCluster(
        nodes=nodes,
        routing_k=1,
        run=run,
        toxiproxy=True,
        extra_args=extra,
        misbehave=misbehave,
    )


# -- helpers ---------------------------------------------------------------------------


def _created_ts(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()


async def _api(sc: LocalSidecarCluster, i: int, method: str, path: str, **kw: Any) -> Any:
    async with sc.client(i) as c:
        r = await c.request(method, path, **kw)
    if r.status_code not in (200, 201):
        raise AssertionError(f"node{i} {method} {path}: HTTP {r.status_code} {r.text}")
    return r.json()


async def _topic_status(sc: LocalSidecarCluster, i: int, topic: str) -> dict[str, Any] | None:
    status = await _api(sc, i, "GET", "/v1/status")
    for t in status["topics"]:
        if t["root_cid"] == topic:
            return dict(t)
    return None


async def _deliveries(sc: LocalSidecarCluster, i: int, topic: str) -> list[dict[str, Any]]:
    async with sc.client(i) as c:
        r = await c.get(
            "/v1/deliveries", params={"topic": topic, "after": 0, "follow": "false"}, timeout=30
        )
    if r.status_code != 200:
        raise AssertionError(f"node{i} deliveries: HTTP {r.status_code} {r.text}")
    return [json.loads(line) for line in r.text.splitlines() if line.strip()]


async def _deliveries_retried(
    sc: LocalSidecarCluster, i: int, topic: str, attempts: int = 3
) -> list[dict[str, Any]]:
    """:func:`_deliveries`, asking again after a timeout (``attempts`` times in all)."""
    for _ in range(attempts - 1):
        with contextlib.suppress(httpx.TimeoutException):
            return await _deliveries(sc, i, topic)
    return await _deliveries(sc, i, topic)


async def _wait(pred: Callable[[], Awaitable[bool]], deadline: float, interval: float) -> bool:
    return await poll_until(pred, deadline=deadline, interval=interval)


async def setup_topic(
    sc: LocalSidecarCluster, author: int, name: str, subscribers: Sequence[int]
) -> str:
    """Create ``name`` on ``author``, subscribe ``subscribers`` (author included if
    listed) and wait until every subscriber has joined the tree."""
    topic = str((await _api(sc, author, "POST", "/v1/topics", json={"name": name}))["cid"])
    for i in subscribers:
        await _api(sc, i, "POST", f"/v1/topics/{topic}/subscribe")

    async def joined() -> bool:
        for i in subscribers:
            st = await _topic_status(sc, i, topic)
            if st is None or st["acting_root"] or (st["parent"] is None and st["role"] != "root"):
                return False
        return True

    if not await _wait(joined, 60, 0.3):
        trees = {i: await _topic_status(sc, i, topic) for i in subscribers}
        raise AssertionError(f"not every subscriber joined {name}: {trees}")
    return topic


@dataclass(slots=True)
class Publishing:
    """Publishers publishing in a loop until stopped; what succeeded is recorded."""

    sc: LocalSidecarCluster
    topic: str
    interval: float = 0.2
    ok: dict[str, tuple[int, float]] = field(default_factory=dict)
    """Event CID → (publishing node, time the call returned)."""
    failed: Counter[int] = field(default_factory=Counter)
    stop: anyio.Event = field(default_factory=anyio.Event)

    async def publish_from(self, i: int, *, count: int | None = None) -> None:
        n = 0
        async with self.sc.client(i, timeout=15) as c:
            while not self.stop.is_set() and (count is None or n < count):
                n += 1
                try:
                    r = await c.post(
                        f"/v1/topics/{self.topic}/publish",
                        json={"ack": "local", "text": f"{i}:{n}:{time.time()}"},
                    )
                except httpx.HTTPError:
                    self.failed[i] += 1
                else:
                    doc = r.json() if r.status_code == 200 else {}
                    if doc.get("status") == "published":
                        self.ok[str(doc["event"])] = (i, time.time())
                    else:
                        self.failed[i] += 1
                await anyio.sleep(self.interval)


async def check_delivery(
    sc: LocalSidecarCluster,
    topic: str,
    subscribers: Sequence[int],
    want: set[str],
    *,
    deadline: float = 120.0,
) -> tuple[dict[int, list[dict[str, Any]]], dict[int, tuple[str, ...]], dict[int, dict[str, int]]]:
    """Wait until every subscriber delivered ``want`` (or the deadline), then read the
    logs once more (late duplicates) and return deliveries, missing, duplicates."""
    got: dict[int, list[dict[str, Any]]] = {i: [] for i in subscribers}

    async def done() -> bool:
        answered = True
        for i in subscribers:
            try:
                got[i] = await _deliveries(sc, i, topic)
            except httpx.TimeoutException:  # a slow answer on a loaded machine: not yet
                answered = False
        return answered and all({d["cid"] for d in got[i]} >= want for i in subscribers)

    await _wait(done, deadline, 0.5)
    await anyio.sleep(2.0)
    for i in subscribers:
        got[i] = await _deliveries_retried(sc, i, topic)
    missing = {i: tuple(sorted(want - {d["cid"] for d in got[i]})) for i in subscribers}
    dups: dict[int, dict[str, int]] = {}
    for i in subscribers:
        counts = Counter(d["cid"] for d in got[i])
        dups[i] = {c: n for c, n in counts.items() if n > 1}
    return got, missing, dups


def recovery_after(got: dict[int, list[dict[str, Any]]], want: set[str], fault_end: float) -> float:
    """Seconds from ``fault_end`` until the last event created before it was delivered
    at the last subscriber (0 if all had been delivered before ``fault_end``)."""
    last = fault_end
    for ds in got.values():
        for d in ds:
            if d["cid"] in want and _created_ts(d["created"]) <= fault_end:
                last = max(last, float(d["delivered_at"]))
    return last - fault_end


def diagnose(
    sc: LocalSidecarCluster,
    got: dict[int, list[dict[str, Any]]],
    missing: dict[int, tuple[str, ...]],
) -> list[str]:
    """Why events are missing: how many of them are DAG leaves (no delivered event
    names them as ``parent``, so only HEADS can advertise them), and the end of the
    missing nodes' logs."""
    if not any(missing.values()):
        return []
    parents = {d["parent"] for ds in got.values() for d in ds if d.get("parent")}
    out = []
    for i, cids in sorted(missing.items()):
        if not cids:
            continue
        leaves = sum(1 for c in cids if c not in parents)
        out.append(
            f"node{i}: {len(cids)} missing, {leaves} of them DAG leaves (no event links to "
            f"them); {sum(1 for d in got[i] if d.get('recovered'))} deliveries were recovered"
        )
        tail = [
            ln
            for ln in sc[i].log_tail(400).splitlines()
            if "'duplicate'" not in ln and "INFO" not in ln
        ][-8:]
        out.append(f"node{i} log (warnings, last 8):\n" + "\n".join(tail))
    return out


def _latency(delivery: dict[str, Any]) -> float:
    return float(delivery["delivered_at"]) - _created_ts(delivery["created"])


def latencies(got: dict[int, list[dict[str, Any]]], want: set[str]) -> list[float]:
    return [_latency(d) for ds in got.values() for d in ds if d["cid"] in want]


def _p50(xs: list[float]) -> float:
    return _pct(xs, 0.5)


def _pct(xs: list[float], p: float) -> float:
    """Nearest rank (:mod:`pulsarcast_ipfs.stats`); NaN if there are no values."""
    value = percentile(xs, p)
    return float("nan") if value is None else value


async def tree_of(sc: LocalSidecarCluster, topic: str, nodes: Sequence[int]) -> dict[int, Any]:
    """Node -> (role, parent, children) of the live sidecars, as node indices."""
    out: dict[int, Any] = {}
    for i in nodes:
        if sc[i].is_running():
            with contextlib.suppress(Exception):
                st = await _topic_status(sc, i, topic)
                out[i] = (
                    None
                    if st is None
                    else (
                        st["role"],
                        _index_of(sc, st["parent"]),
                        [_index_of(sc, c) for c in st["children"]],
                    )
                )
    return out


def _index_of(sc: LocalSidecarCluster, peer: str | None) -> int | None:
    for n in sc.cluster.nodes:
        if n.peer_id == peer:
            return n.index
    return None


# -- scenarios -------------------------------------------------------------------------


async def delivery_result(
    sc: LocalSidecarCluster,
    topic: str,
    subscribers: Sequence[int],
    pub: Publishing,
    *,
    scenario: str,
    fault_end: float,
    figures: dict[str, float] | None = None,
    notes: Sequence[str] = (),
    problems: Sequence[str] = (),
) -> FaultResult:
    """The common end of a scenario whose publishers have stopped: every event
    ``pub`` published must reach every one of ``subscribers`` exactly once; recovery
    counts from ``fault_end``. ``figures`` and ``notes`` come first, then the latency
    and failed-publish figures and the diagnosis (with the trees and the missing
    events' publishers when something is missing)."""
    want = set(pub.ok)
    got, missing, dups = await check_delivery(sc, topic, subscribers, want)
    found = diagnose(sc, got, missing)
    if any(missing.values()):
        found.append(f"trees: {await tree_of(sc, topic, subscribers)}")
        by_pub = Counter(pub.ok[c][0] for cids in missing.values() for c in cids)
        found.append(f"missing events by publishing node: {dict(by_pub)}")
    lat = latencies(got, want)
    return FaultResult(
        scenario=scenario,
        published=len(want),
        subscribers=tuple(subscribers),
        missing=missing,
        duplicates=dups,
        problems=tuple(problems),
        recovery_seconds=recovery_after(got, want, fault_end),
        figures={
            **(figures or {}),
            "max_latency_s": max(lat, default=0.0),
            "p50_latency_s": _p50(lat),
            "failed_publish_calls": float(sum(pub.failed.values())),
        },
        notes=(*notes, *found),
    )


async def scenario_kill_nodes(sc: LocalSidecarCluster, *, tag: str = "") -> FaultResult:
    """20 % of the nodes SIGKILLed mid-run (Kubo and sidecar): the topic's author (the
    root) and an interior relay. Publishing goes on from three other nodes (root
    failover); the author publishes until it dies and is restarted 10 s later; the
    relay stays dead (it is excluded from the check)."""
    n = len(sc)
    author = 0
    subs = list(range(n))
    topic = await setup_topic(sc, author, f"kill{tag}", subs)
    relay = None
    for i in subs[1:]:
        st = await _topic_status(sc, i, topic)
        if st and st["children"] and st["role"] != "root":
            relay = i
            break
    notes: list[str] = []
    if relay is None:  # a star: kill the author's first child instead
        relay = next(i for i in subs[1:])
        notes.append("no interior relay in the tree; killed a plain subscriber")
    publishers = [i for i in subs if i not in (author, relay)][:3]
    pub = Publishing(sc, topic)
    t_kill = t_restart = 0.0
    async with anyio.create_task_group() as tg:
        for i in publishers:
            tg.start_soon(pub.publish_from, i)
        author_pub = Publishing(sc, topic, ok=pub.ok)
        tg.start_soon(author_pub.publish_from, author)
        await anyio.sleep(4)
        t_kill = time.time()
        author_pub.stop.set()
        await sc.kill_node(author)
        await sc.kill_node(relay)
        await anyio.sleep(10)
        await sc.start_node(author)
        t_restart = time.time()
        await anyio.sleep(6)
        pub.stop.set()
    live = [i for i in subs if i != relay]
    result = await delivery_result(
        sc,
        topic,
        live,
        pub,
        scenario="kill_20pct",
        fault_end=t_restart,
        figures={
            "killed_root_and_relay_at": t_kill - t_kill,
            "author_restart_after_kill_s": t_restart - t_kill,
        },
        notes=(f"killed node{author} (author/root) and node{relay} (relay)", *notes),
    )
    await sc.start_node(relay)  # leave the cluster whole for the next scenario
    return result


async def scenario_restarts(sc: LocalSidecarCluster, *, tag: str = "") -> FaultResult:
    """A sidecar SIGKILLed and restarted while its Kubo stays up, and a Kubo daemon
    SIGKILLed and restarted under a running sidecar, which must notice (``/health``
    503), keep its API, and resume by itself (listener registered again)."""
    n = len(sc)
    author = 1
    subs = list(range(n))
    topic = await setup_topic(sc, author, f"restart{tag}", subs)
    side, kubo_node = 3, 6
    publishers = [author, 2, kubo_node]
    problems: list[str] = []
    pub = Publishing(sc, topic)
    sidecar_pid = sc[kubo_node].pid
    t_kubo_back = 0.0
    async with anyio.create_task_group() as tg:
        for i in publishers:
            tg.start_soon(pub.publish_from, i)
        await anyio.sleep(3)
        await sc.kill_sidecar(side)
        await sc.kill_kubo(kubo_node)
        # The sidecar of the Kubo-less node stays up and says Kubo is down.
        async with sc.client(kubo_node, timeout=10) as c:
            health = await c.get("/health")
        if health.status_code != 503:
            problems.append(f"/health with Kubo down: {health.status_code} {health.text}")
        await anyio.sleep(3)
        await sc.start_sidecar(side)
        await anyio.sleep(2)
        await sc.restart_kubo(kubo_node)
        t_kubo_back = time.time()
        await anyio.sleep(6)
        pub.stop.set()

    async def relistened() -> bool:
        async with sc.cluster[kubo_node].client() as kubo:
            return any(x.protocol == PROTOCOL for x in await kubo.p2p_ls())

    if not await _wait(relistened, 20, 0.5):
        problems.append(f"node{kubo_node}'s sidecar did not register its p2p listener again")
    if sc[kubo_node].pid != sidecar_pid or not sc[kubo_node].is_running():
        problems.append(f"node{kubo_node}'s sidecar did not survive the Kubo restart")

    async def healthy() -> bool:
        async with sc.client(kubo_node, timeout=10) as c:
            return (await c.get("/health")).status_code == 200

    if not await _wait(healthy, 20, 0.5):
        problems.append(f"node{kubo_node} /health not ok within 20 s after Kubo came back")
    return await delivery_result(
        sc,
        topic,
        subs,
        pub,
        scenario="restarts",
        fault_end=t_kubo_back,
        notes=(f"sidecar of node{side} killed; Kubo of node{kubo_node} killed",),
        problems=problems,
    )


async def scenario_partition(
    sc: LocalSidecarCluster, *, tag: str = "", seconds: float = 30.0
) -> FaultResult:
    """A third of the nodes cut off for ``seconds`` (proxies disabled, connections
    dropped, own dials filtered) while publishers on both sides go on; then healed.
    Recovery: from the heal until the last event created before it is delivered."""
    n = len(sc)
    author = 0
    subs = list(range(n))
    topic = await setup_topic(sc, author, f"partition{tag}", subs)
    cut = list(range(n - n // 3, n))
    publishers = [author, 1, cut[0]]
    pub = Publishing(sc, topic, interval=0.3)
    async with anyio.create_task_group() as tg:
        for i in publishers:
            tg.start_soon(pub.publish_from, i)
        await anyio.sleep(2)
        await sc.partition(cut)
        t_cut = time.time()
        await anyio.sleep(max(0.0, seconds - (time.time() - t_cut)))
        await sc.heal(cut)
        t_heal = time.time()
        await anyio.sleep(5)
        pub.stop.set()
    return await delivery_result(
        sc,
        topic,
        subs,
        pub,
        scenario="partition",
        fault_end=t_heal,
        figures={"partition_s": t_heal - t_cut},
        notes=(f"cut nodes {cut} for {t_heal - t_cut:.1f} s",),
    )


async def throttle(sc: LocalSidecarCluster, i: int, kbps: int | None) -> None:
    """Limit node ``i``'s bandwidth: every connection of it must come in through its
    proxy (its own dials are filtered, every other node dials it)."""
    node = sc.cluster[i]
    await node.set_bandwidth(kbps)
    async with node.client() as kubo:
        if kbps is None:
            with contextlib.suppress(Exception):
                await kubo.swarm_filters_rm("/ip4/127.0.0.1/ipcidr/32")
            return
        await kubo.swarm_filters_add("/ip4/127.0.0.1/ipcidr/32")
        for peer in await kubo.swarm_peers():
            with contextlib.suppress(Exception):
                await kubo.swarm_disconnect(f"/p2p/{peer.peer_id}")
    for other in sc.cluster.nodes:
        if other.index != i and other.is_running():
            async with other.client(timeout=10.0) as kubo:
                with contextlib.suppress(Exception):
                    await kubo.swarm_connect(node.multiaddr)


STEADY_AFTER: Final = 3.0
"""Seconds after a node is slowed down from which the others' latency must be back to
normal (its children notice the lag and move to another parent within ~2 s)."""


async def scenario_slow_subscriber(
    sc: LocalSidecarCluster, *, tag: str = "", events: int = 150, kbps: int = 2
) -> FaultResult:
    """One subscriber bandwidth-limited to ``kbps`` KB/s (Toxiproxy bandwidth toxic, all
    its connections through its proxy): the others' delivery latency (p50, p95, and
    how many of their deliveries took over a second) is compared with a phase without
    the limit — p95 also for the events published ``STEADY_AFTER`` seconds after the
    limit, and how long after it the others still saw a delivery take over a second
    (``others_hurt_for_s``) — and nothing may be lost anywhere. The slow node is the relay with the
    most children in the tree of the first phase (node 8 if every subscriber hangs
    off the root), so its children must see it lag and move (``slow_parent_after``);
    the tree before and after is in the notes."""
    n = len(sc)
    author, other_publisher = 2, 4
    subs = list(range(n))
    topic = await setup_topic(sc, author, f"slow{tag}", subs)
    figures: dict[str, float] = {}
    want_all: set[str] = set()
    trees: dict[str, dict[int, Any]] = {}
    late: list[str] = []
    slow = 8
    others = [i for i in subs if i != slow]
    t_limit = 0.0
    for phase in ("without", "with"):
        if phase == "with":
            await throttle(sc, slow, kbps)
            t_limit = time.time()
        pub = Publishing(sc, topic, interval=0.2)
        async with anyio.create_task_group() as tg:
            for i in (author, other_publisher):
                tg.start_soon(functools.partial(pub.publish_from, i, count=events // 2))
        want = set(pub.ok)
        want_all |= want
        # (with the limit, the slow node itself is checked after the limit is lifted)
        waited = subs if phase == "without" else others
        got, _, _ = await check_delivery(sc, topic, waited, want, deadline=60)
        trees[phase] = await tree_of(sc, topic, subs)
        if phase == "without":
            relays = [
                i
                for i, st in trees[phase].items()
                if st is not None and st[2] and i not in (author, other_publisher)
            ]
            if relays:
                slow = max(relays, key=lambda i: (len(trees[phase][i][2]), -i))
            others = [i for i in subs if i != slow]
        lat = latencies({i: got[i] for i in others if i in got}, want)
        figures[f"others_p50_{phase}_limit_s"] = _p50(lat)
        figures[f"others_p95_{phase}_limit_s"] = _pct(lat, 0.95)
        figures[f"others_over_1s_{phase}_limit"] = float(sum(x > 1.0 for x in lat))
        if phase == "with":
            # Once the slow relay's children have noticed and moved (the first seconds
            # after the limit): the steady state, and how long the others were hurt.
            steady = [
                _latency(d)
                for i in others
                for d in got.get(i, [])
                if d["cid"] in want and _created_ts(d["created"]) >= t_limit + STEADY_AFTER
            ]
            figures["others_p95_steady_with_limit_s"] = _pct(steady, 0.95)
            figures["others_hurt_for_s"] = max(
                (
                    _created_ts(d["created"]) - t_limit
                    for i in others
                    for d in got.get(i, [])
                    if d["cid"] in want and _latency(d) > 1.0
                ),
                default=0.0,
            )
        t_first = min(
            (_created_ts(d["created"]) for ds in got.values() for d in ds if d["cid"] in want),
            default=0.0,
        )
        for i in others:
            slow_ones = [
                _created_ts(d["created"]) - t_first
                for d in got.get(i, [])
                if d["cid"] in want and _latency(d) > 1.0
            ]
            if slow_ones:
                mine = latencies({i: got.get(i, [])}, want)
                late.append(
                    f"{phase} the limit, node{i}: {len(slow_ones)} deliveries over 1 s "
                    f"(published {min(slow_ones):.1f}-{max(slow_ones):.1f} s into the "
                    f"phase), max {max(mine):.2f} s"
                )
    st = trees["without"].get(slow)
    figures["slow_node_children_before"] = float(len(st[2]) if st else 0)
    t_lift = time.time()
    await throttle(sc, slow, None)
    got, missing, dups = await check_delivery(sc, topic, subs, want_all)
    slow_lat = latencies({slow: got[slow]}, want_all)
    figures["slow_node_p50_s"] = _p50(slow_lat)
    return FaultResult(
        scenario="slow_subscriber",
        published=len(want_all),
        subscribers=tuple(subs),
        missing=missing,
        duplicates=dups,
        recovery_seconds=recovery_after({slow: got[slow]}, want_all, t_lift),
        figures=figures,
        notes=(
            f"node{slow} limited to {kbps} KB/s",
            f"tree before the limit: {trees['without']}",
            f"tree at the end of the limited phase: {trees['with']}",
            *late,
            *diagnose(sc, got, missing),
        ),
    )


def chattr(flag: str, *paths: Path) -> None:
    """``chattr FLAG PATHS``: ``+i`` makes them immutable (EPERM even for root)."""
    subprocess.run(["chattr", flag, *map(str, paths)], check=True, capture_output=True)


async def scenario_unwritable_state(sc: LocalSidecarCluster, *, tag: str = "") -> FaultResult:
    """The state directory becomes unwritable under a running sidecar (``chattr +i``
    on the directory and its delivery log: EPERM even for root), then the sidecar is
    started on it: each time a clear error and a non-zero exit, files unchanged; once
    writable again, a restart delivers what was missed, exactly once."""
    n = len(sc)
    author, victim = 0, 5
    subs = [i for i in range(n) if i != author]
    topic = await setup_topic(sc, author, f"disk{tag}", subs)
    problems: list[str] = []
    pub = Publishing(sc, topic, interval=0.1)
    await pub.publish_from(author, count=5)
    await check_delivery(sc, topic, [victim], set(pub.ok), deadline=60)
    await _api(sc, victim, "GET", "/health")
    await anyio.sleep(2.5)  # the housekeeping loop has saved state.json with fresh heads
    sidecar = sc[victim]
    state_dir = sidecar.state_dir
    state_file, log_file = state_dir / "state.json", state_dir / "deliveries.ndjson"
    t_fault = time.time()
    try:
        chattr("+i", state_dir, log_file)
        before = state_file.read_bytes(), log_file.read_bytes()
        await pub.publish_from(author, count=5)

        async def exited() -> bool:
            return not sidecar.is_running()

        if not await _wait(exited, 30, 0.2):
            problems.append("the sidecar kept running with an unwritable state directory")
        code = sidecar.returncode()
        if code in (None, 0):
            problems.append(f"exit code {code} after a write error (want non-zero)")
        if "cannot append to" not in sidecar.log_tail(50):
            problems.append(f"no clear error in the log:\n{sidecar.log_tail(10)}")
        if (state_file.read_bytes(), log_file.read_bytes()) != before:
            problems.append("the state files changed while unwritable")
        sidecar.pid = 0
        # Starting on the unwritable directory: refused with a clear message.
        try:
            await sc.start_sidecar(victim)
            problems.append("the sidecar started on an unwritable state directory")
        except Exception as exc:  # ClusterError with the log tail
            if "cannot write" not in str(exc):
                problems.append(f"unclear start-up error: {exc}")
        sidecar.pid = 0
        if (state_file.read_bytes(), log_file.read_bytes()) != before:
            problems.append("the state files changed during the refused start")
    finally:
        chattr("-i", state_dir, log_file)
    await pub.publish_from(author, count=3)
    await sc.start_sidecar(victim)
    t_fixed = time.time()
    await pub.publish_from(author, count=2)
    want = set(pub.ok)
    got, missing, dups = await check_delivery(sc, topic, subs, want)
    return FaultResult(
        scenario="unwritable_state",
        published=len(want),
        subscribers=tuple(subs),
        missing=missing,
        duplicates=dups,
        problems=tuple(problems),
        recovery_seconds=recovery_after({victim: got[victim]}, want, t_fixed),
        figures={"outage_s": t_fixed - t_fault},
        notes=(f"node{victim}'s state dir made immutable", *diagnose(sc, got, missing)),
    )


SCENARIOS: dict[str, Callable[..., Awaitable[FaultResult]]] = {
    "kill_20pct": scenario_kill_nodes,
    "restarts": scenario_restarts,
    "partition": scenario_partition,
    "slow_subscriber": scenario_slow_subscriber,
    "unwritable_state": scenario_unwritable_state,
}
