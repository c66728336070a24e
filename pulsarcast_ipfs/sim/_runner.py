"""The simulator: drives real :class:`~pulsarcast_ipfs.core.PulsarcastNode` objects
on the core's in-process network driver (:class:`~pulsarcast_ipfs.core.NetDriver`,
which CoreNet runs on too), with the fault and link model of a Kubo network.

Theory of operation
-------------------
A run is a pure function of its :class:`SimConfig` (seed included): same
config, same records file, byte for byte.

1. **Membership** (:mod:`._network`). ``N`` nodes get seeded Ed25519 peer IDs
   (the core's :func:`~pulsarcast_ipfs.core.make_signers`, or
   :func:`~pulsarcast_ipfs.core.make_peer_ids` without signatures) and Kademlia
   routing tables (k-buckets by common-prefix length of the
   sha256 positions, docs/protocol.md §3). Each node gets its table through
   ``set_known_peers``; a crashed node leaves the tables ``detection_delay``
   after its crash and re-enters ``detection_delay`` after its restart, and
   every node whose table changed is told again.
2. **Workload** (:mod:`pulsarcast_ipfs.workload`). At ``t0`` each topic's
   creator calls ``create_topic`` (docs/protocol.md §5, Algorithm 1); in
   ``ordered`` mode only the creator may publish, everyone may request to
   publish, with ``LAST_SEEN`` linking. Subscriptions are spread over
   ``subscribe_window`` seconds, then ``--events`` publish calls follow in
   ``internalId`` order with exponential gaps of mean ``1 / rate``.
3. **Transport** (the driver, with a FIFO :class:`~pulsarcast_ipfs.core.Links`
   model). A ``SendRpc`` to peer ``q`` is dropped with probability
   ``loss``; otherwise it arrives after a draw of the link latency, never
   before an earlier message of the same link (one long-lived TCP-like
   connection per link, FIFO). If ``q`` is down when the message is sent or
   when it arrives, the message is lost and, ``connect_timeout`` later, the
   sender is told ``peer_unreachable(q)`` (once per pending failure).
   Messages are passed as the codec's objects: the simulator does not frame
   them (the core's ``rpc_sent`` records carry the encoded size).
4. **Blocks** (the driver). ``StoreBlock`` puts the block in the node's store (one shared
   copy of the bytes per CID, with the set of holders). ``FetchBlock`` is
   answered after a fetch delay (local: immediately; remote: four link
   latency draws, a provider lookup and a bitswap exchange) if any *live*
   node holds the block, else at ``fetch_timeout`` with whatever is then
   available (``None`` if nothing). A node has at most one fetch of a CID in
   flight (bitswap coalesces wants): a repeated ``FetchBlock`` for a CID
   still being fetched gets the one answer.
5. **Timers** (the driver). After each input the node's ``get_timer()`` is re-armed in the
   heap; superseded timer entries are skipped by a per-node version number.
6. **Faults.** Crash waves (``CrashSpec``) pick nodes with a seeded stream;
   the first wave always includes the creators of the ``crash_roots`` largest
   topics. A crashed node's object is dropped (its queue, timers and in-flight
   fetches with it); its block store survives (Kubo's repository is on disk).
   With ``restart`` the node comes back that long after with a fresh
   ``PulsarcastNode`` for the same peer ID, which re-subscribes to its topics
   with ``since`` = the time each subscription started (as the sidecar's
   persisted state makes it do), so the core recovers the events created while
   it was down and those it had received but not yet delivered (waiting for a
   parent) when it crashed; what it had delivered before is re-delivered and,
   as the sidecar's delivery log does, not counted as a duplicate.

Every :class:`~pulsarcast_ipfs.records.MetricRecord` output goes, as a JSON
line with ``system="sim"``, to ``records.jsonl`` (or ``.jsonl.gz``) as it
happens; the summary is computed incrementally (:mod:`._stats`).
"""

from __future__ import annotations

import base64
import gzip
import io
import json
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from random import Random
from typing import IO, Any, Final, Protocol

from pulsarcast_ipfs.core import (
    DriverError,
    EventDescriptor,
    EventLinking,
    Filter,
    FilterSyntaxError,
    Links,
    LocalProtocolError,
    NetDriver,
    NodeConfig,
    OperationDone,
    PeerPolicy,
    Pending,
    PulsarcastNode,
    SendRpc,
    TopicOptions,
    UnknownTopic,
    cid_str,
    make_peer_ids,
    make_signers,
    parse_filter,
    substream,
)
from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.records import MetricRecord, RecordKind
from pulsarcast_ipfs.sim._attack import Attacker, AttackSpec, sim_subnets
from pulsarcast_ipfs.sim._network import RoutingTables
from pulsarcast_ipfs.sim._spec import CrashSpec, LatencySpec, SpecError
from pulsarcast_ipfs.sim._stats import RunStats, SimSummary
from pulsarcast_ipfs.workload import ScaledWorkload, Workload, load_workload

__all__ = ["T0", "SimConfig", "SimNode", "Simulation", "SimulationError", "run_simulation"]

SimulationError = DriverError
"""The simulation was driven incorrectly (an event scheduled in the past, a failing node)."""

T0: Final = 1_767_225_600.0
"""Virtual start of every run: 2026-01-01T00:00:00Z."""


def cid_text(cid: CID) -> str:
    """``str(cid)`` for a CIDv1 in base32 (``bafy…``), ~20x faster than multiformats' encoder."""
    return "b" + base64.b32encode(bytes(cid)).decode("ascii").lower().rstrip("=")


class SimNode(Protocol):
    """What the simulator needs of a node (``PulsarcastNode`` provides it)."""

    def set_known_peers(self, now: float, peers: Iterable[str]) -> None: ...
    def receive_rpc(self, now: float, peer: str, rpc: Any, *, size: int | None = None) -> None: ...
    def block_fetched(self, now: float, cid: CID, data: bytes | None) -> None: ...
    def peer_unreachable(self, now: float, peer: str) -> None: ...
    def handle_timer(self, now: float) -> None: ...
    def get_timer(self) -> float | None: ...
    def take_outputs(self) -> list[Any]: ...


NodeFactory = Callable[[str, Random, float], Any]
"""``(peer_id, rng, now) -> node``: how a run makes (and remakes) its nodes."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SimConfig:
    """Everything a run depends on. Times are virtual seconds."""

    nodes: int = 100
    topics: int | None = None
    """Keep the T largest topics of the workload (``None``: all)."""
    communities: int = 1
    """Copies of the workload's population, each with its own instance of every topic
    (``Workload.scale``); needs ``nodes`` >= communities x users."""
    events: int | None = None
    """Publish calls (``None``: as many as the workload has)."""
    seed: int = 1
    k: int = 20
    latency: LatencySpec = field(default_factory=lambda: LatencySpec(kind="constant", a=0.05))
    loss: float = 0.0
    crashes: tuple[CrashSpec, ...] = ()
    """Crash waves; their ``at`` counts from the start of publication."""
    crash_roots: int = 1
    """The first crash wave includes the creators of this many of the largest topics."""
    restart: float | None = None
    """Crashed nodes restart this long after their crash (``None``: never)."""
    rate: float = 50.0
    """Aggregate publish calls per virtual second."""
    grace: float = 300.0
    """Virtual seconds simulated after the last publish call."""
    ordered: bool = False
    """Only topic creators publish (``LAST_SEEN``); everyone else requests to publish."""
    workload: str | Path | None = None
    subscribe_window: float = 10.0
    warmup: float = 20.0
    """Publication starts this long after the topics are created."""
    detection_delay: float = 10.0
    connect_timeout: float = 3.0
    fetch_timeout: float = 10.0
    run: str = "sim"
    rpc_records: bool = True
    """Let the nodes emit ``rpc_sent`` / ``rpc_received`` records (off: smaller files)."""
    fast: bool = False
    """Every subscription asks for fast delivery (fast groups): publishers
    send their events to the subscribers in two hops at most, the tree still runs."""
    group_capacity: int = 16
    """Peers a publisher sends each event to directly along its group (``NodeConfig``)."""
    signatures: bool = True
    """Signed descriptors (protocolVersion 1.1.0): nodes get Ed25519 keys from the seed
    and sign at once; off: unsigned 1.0.0 (cheaper, for scale runs)."""
    filters: tuple[str, ...] = ()
    """Subscription filters (docs/simulator.md "Filters"): each subscription
    gets one of them, chosen by a seeded stream per (node, topic); ``"*"`` is none.
    Given any, publish calls carry the workload's attributes (:attr:`attributes`)."""
    attributes: bool = False
    """Publish calls carry the workload's ``ups``, ``downs``, ``controversiality`` and
    ``user`` as event attributes (implied by :attr:`filters`)."""
    tree_filters: bool = True
    """Nodes send subtree summaries (``NodeConfig.tree_filters``): the summary counts
    EVENTs sent down the trees and the false positives among them."""
    byzantine: float = 0.0
    """Fraction of the nodes that are attackers (none of them a topic's creator;
    docs/simulator.md "Attacks"), doing :attr:`attack`."""
    attack: AttackSpec | None = None
    """What the attackers do (``--attack``); ``sybil=N`` adds N attacker identities."""
    witnesses: int = 2
    """``NodeConfig.witnesses`` of the honest nodes (0: no witnesses, no scores)."""
    flat_fanout: int = 64
    """``NodeConfig.flat_fanout``: a root's children (and so a tree's width near it)."""

    def __post_init__(self) -> None:
        if self.nodes < 1:
            raise SpecError("--nodes must be at least 1")
        if self.k < 1:
            raise SpecError("--k must be at least 1")
        if not 0.0 <= self.loss < 1.0:
            raise SpecError("--loss must be at least 0% and below 100%")
        if not (math.isfinite(self.rate) and self.rate > 0):
            raise SpecError("--rate must be a positive number of events per second")
        for name in ("grace", "subscribe_window", "warmup", "detection_delay"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                raise SpecError(f"{name} must be a non-negative number of seconds")
        for name in ("connect_timeout", "fetch_timeout"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v > 0):
                raise SpecError(f"{name} must be a positive number of seconds")
        if self.restart is not None and not (math.isfinite(self.restart) and self.restart > 0):
            raise SpecError("--restart must be a positive duration")
        if self.crash_roots < 0:
            raise SpecError("crash_roots must be non-negative")
        if self.group_capacity < 0:
            raise SpecError("--group-capacity must be non-negative")
        if not 0.0 <= self.byzantine < 1.0:
            raise SpecError("--byzantine must be at least 0% and below 100%")
        if self.attack is None and self.byzantine > 0:
            raise SpecError("--byzantine needs --attack (what the attackers do)")
        if self.attack is not None and self.attack.kind != "sybil" and self.byzantine == 0:
            raise SpecError(f"--attack {self.attack} needs --byzantine P% (how many attack)")
        if not 0 <= self.witnesses <= 8:
            raise SpecError("--witnesses must be between 0 and 8")
        if self.flat_fanout < 0:
            raise SpecError("--flat-fanout must be non-negative")
        if self.warmup < self.subscribe_window:
            raise SpecError("warmup must not be shorter than the subscribe window")
        for text in self.filters:
            try:
                parse_filter(text)
            except FilterSyntaxError as exc:
                raise SpecError(f"--filter {text!r}: {exc}") from None

    @property
    def with_attributes(self) -> bool:
        """Whether publish calls carry attributes."""
        return self.attributes or bool(self.filters)


class _RecordSink:
    """Streams JSON lines to ``records.jsonl`` / ``records.jsonl.gz`` (or nowhere)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._raw: IO[bytes] | None = None
        self._text: IO[str] | None = None
        if path is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.name.endswith(".gz"):
            self._raw = path.open("wb")
            gz = gzip.GzipFile(filename="", mode="wb", fileobj=self._raw, mtime=0)
            self._text = io.TextIOWrapper(gz, encoding="utf-8", newline="\n")
        else:
            self._text = path.open("w", encoding="utf-8", newline="\n")

    @property
    def active(self) -> bool:
        """Whether lines are kept (``False``: no ``out`` directory, nothing to format)."""
        return self._text is not None

    def write(self, line: str) -> None:
        if self._text is not None:
            self._text.write(line)
            self._text.write("\n")

    def close(self) -> None:
        if self._text is not None:
            self._text.close()
            self._text = None
        if self._raw is not None:
            self._raw.close()
            self._raw = None


class Simulation(NetDriver):
    """One run. ``Simulation(config, out=DIR).run()`` -> :class:`SimSummary`."""

    def __init__(
        self,
        config: SimConfig,
        *,
        out: Path | None = None,
        gzip_records: bool = False,
        workload: Workload | None = None,
        node_factory: NodeFactory | None = None,
        progress: Callable[[float, int, int], None] | None = None,
    ) -> None:
        self.config = c = config
        self.out = out
        self._factory: NodeFactory = node_factory or self._real_node
        self._progress = progress
        self._gzip = gzip_records
        wl = workload if workload is not None else load_workload(c.workload)
        self.scaled: ScaledWorkload = wl.scale(
            nodes=c.nodes,
            topics=c.topics,
            events=c.events,
            seed=c.seed,
            communities=c.communities,
        )
        sybils = c.attack.sybils if c.attack is not None else 0
        n = c.nodes + sybils
        signers = make_signers(n, seed=c.seed) if c.signatures else []
        peer_ids = [s.peer_id for s in signers] if signers else make_peer_ids(n, seed=c.seed)
        lat_rng, sample = substream(c.seed, "latency"), c.latency.sample
        links = Links(
            delay=lambda: sample(lat_rng), loss=c.loss, loss_rng=substream(c.seed, "loss")
        )
        super().__init__(
            peer_ids,
            links=links,
            start=T0,
            unreachable_after=c.connect_timeout,
            fetch_timeout=c.fetch_timeout,
            wire=False,
        )
        self.signers = {s.peer_id: s for s in signers}
        self.nodes = self._nodes
        self.alive = self.up
        self._done: dict[str, OperationDone] = {}
        self.tables = RoutingTables(self.peer_ids, k=c.k, rng=substream(c.seed, "k-buckets"))
        self.crashed_at = [T0] * n
        self.sub_started: dict[tuple[int, int], float] = {}
        """(node, topic index) -> when the node first subscribed (its creator: when it
        created the topic): the ``since`` of its resumed subscription after a restart, as
        the sidecar's ``state.json`` keeps it."""
        self.topic_cids: list[CID | None] = [None] * len(self.scaled.topics)
        self.topic_names = [t.name for t in self.scaled.topics]
        self._topic_pos = {t: i for i, t in enumerate(self.topic_names)}
        self.creator_topics: list[list[int]] = [[] for _ in range(n)]
        for ti, t in enumerate(self.scaled.topics):
            self.creator_topics[t.creator].append(ti)
        self.stats = RunStats(
            peer_ids=self.peer_ids,
            topics=self.topic_names,
            calls=len(self.scaled.publications),
        )
        self.attackers: frozenset[int] = self._choose_attackers()
        """Indices of the attacking nodes (docs/simulator.md "Attacks")."""
        self.stats.set_byzantine(self.attackers)
        self._attacker_ids = frozenset(self.peer_ids[i] for i in self.attackers)
        self._censored = (
            self._busiest_publisher() if c.attack and c.attack.kind == "censor" else None
        )
        self.subnets: dict[str, str] = sim_subnets(self.peer_ids, c.nodes)
        """Peer -> colocation key, one mapping shared by every node (``set_peer_subnets``;
        docs/simulator.md "Attacks"): each node on a network of its own, the Sybil
        identities on ``SYBIL_NETWORKS``."""
        self.sub_filters: dict[tuple[int, int], Filter] = {}
        """(node, topic index) -> the subscription's filter (none: unfiltered)."""
        if c.filters:
            choices = [parse_filter(t) for t in c.filters]
            filter_rng = substream(c.seed, "filters")
            for i, names in enumerate(self.scaled.subscriptions):
                for name in names:
                    f = choices[filter_rng.randrange(len(choices))]
                    ti = self._topic_pos[name]
                    if f.conditions:
                        self.sub_filters[(i, ti)] = f
                        self.stats.set_filter(i, name, f)
        self._PUBLISH = self.add_kind("publish", lambda j, _b, _c: self._publish(j))
        self._SUBSCRIBE = self.add_kind("subscribe", lambda i, ti, _c: self._subscribe(i, ti))
        self._CRASH = self.add_kind("crash", lambda victims, _b, _c: self._crash(victims))
        self._DETECT = self.add_kind("failure detection", lambda ps, up, _c: self._detect(ps, up))
        self._RESTART = self.add_kind("restart", lambda peers, _b, _c: self._restart(peers))
        self.crash_plan: list[tuple[float, list[int]]] = []
        self.heap_events = 0
        self.disconnects = 0
        self._sink: _RecordSink | None = None
        self._publish_times: list[float] = []
        self.stats_subscribed_records = 0
        self.stats_injected_records = 0
        self.end_time = T0

    # -- set-up -----------------------------------------------------------------------

    def _choose_attackers(self) -> frozenset[int]:
        """``byzantine`` of the workload's nodes, none a topic's creator (seeded), and
        the Sybil identities beyond them."""
        c = self.config
        if c.attack is None:
            return frozenset()
        if c.attack.kind == "sybil":
            return frozenset(range(c.nodes, len(self.peer_ids)))
        creators = {t.creator for t in self.scaled.topics}
        pool = [i for i in range(c.nodes) if i not in creators]
        count = min(len(pool), round(c.byzantine * c.nodes))
        return frozenset(substream(c.seed, "byzantine").sample(pool, count))

    def _busiest_publisher(self) -> str:
        """(censor) The honest node that makes the most publish calls."""
        counts: dict[int, int] = {}
        for pub in self.scaled.publications:
            if pub.node not in self.attackers:
                counts[pub.node] = counts.get(pub.node, 0) + 1
        best = min(counts, key=lambda i: (-counts[i], i)) if counts else 0
        return self.peer_ids[best]

    def _real_node(self, peer_id: str, rng: Random, now: float) -> Any:
        c = self.config
        cfg = NodeConfig(
            rpc_records=c.rpc_records,
            require_signatures=c.signatures,
            tree_filters=c.tree_filters,
            group_capacity=c.group_capacity,
            witnesses=c.witnesses,
            flat_fanout=c.flat_fanout,
        )
        node = PulsarcastNode(peer_id=peer_id, config=cfg, rng=rng, now=now)
        node.set_peer_subnets(now, self.subnets)
        if peer_id in self._attacker_ids and c.attack is not None:
            return Attacker(node, c.attack, censored=self._censored)
        return node

    def _topic_options(self, creator: int) -> TopicOptions:
        if not self.config.ordered:
            return TopicOptions(event_linking=EventLinking.LAST_SEEN)
        return TopicOptions(
            allowed_publishers=PeerPolicy(enabled=True, peers=(self.peer_ids[creator],)),
            request_to_publish=PeerPolicy(enabled=True, peers=()),
            event_linking=EventLinking.LAST_SEEN,
        )

    def _make_node(self, i: int, now: float) -> None:
        rng = substream(self.config.seed, f"node:{i}:{self.incarnation[i]}")
        self._nodes[i] = self._factory(self.peer_ids[i], rng, now)
        self.armed[i] = None
        self.timer_version[i] += 1
        self.nodes[i].set_known_peers(now, self.tables.table(i))
        self._drain(i)

    def _plan(self) -> None:
        c = self.config
        h = self.heap
        t0 = T0
        for i in range(len(self.peer_ids)):
            self._make_node(i, t0)
        for ti, t in enumerate(self.scaled.topics):
            node = self.nodes[t.creator]
            cid = node.create_topic(t0, t.name, options=self._topic_options(t.creator))
            self._drain(t.creator)
            if isinstance(cid, Pending):  # signed: answered at once by on_sign_request
                done = self._done.pop(cid.op)
                if not isinstance(done.result, CID):
                    raise SimulationError(f"creating topic {t.name!r} failed: {done.error}")
                cid = done.result
            self.topic_cids[ti] = cid
            self.sub_started[(t.creator, ti)] = t0
        sub_rng = substream(c.seed, "subscribe")
        if c.attack is not None and c.attack.kind == "sybil":
            # The Sybils take every topic before the honest nodes subscribe.
            sybil_rng = substream(c.seed, "sybil-subscribe")
            for i in sorted(self.attackers):
                for ti in range(len(self.scaled.topics)):
                    h.push(t0 + 0.5 + sybil_rng.uniform(0.0, 0.4), self._SUBSCRIBE, i, ti)
        for i, subs in enumerate(self.scaled.subscriptions):
            for name in subs:
                ti = self._topic_pos[name]
                at = t0 + 1.0 + sub_rng.uniform(0.0, c.subscribe_window)
                h.push(at, self._SUBSCRIBE, i, ti)
        pub_rng = substream(c.seed, "publish-times")
        start = t0 + 1.0 + c.warmup
        tp = start
        times = self._publish_times
        for _ in self.scaled.publications:
            tp += pub_rng.expovariate(c.rate)
            times.append(tp)
        if times:
            h.push(times[0], self._PUBLISH, 0)
        self.end_time = (times[-1] if times else start) + c.grace
        # crash waves
        crash_rng = substream(c.seed, "crashes")
        up = list(range(c.nodes))
        by_size = sorted(
            range(len(self.scaled.topics)),
            key=lambda ti: (-self.scaled.topics[ti].events, ti),
        )
        forced: list[int] = []
        for ti in by_size:
            if len(forced) >= c.crash_roots:
                break
            creator = self.scaled.topics[ti].creator
            if creator not in forced:
                forced.append(creator)
        for w, wave in enumerate(sorted(c.crashes, key=lambda x: x.at)):
            size = min(wave.size(c.nodes), len(up))
            chosen = [p for p in forced if p in up][:size] if w == 0 else []
            picked = set(chosen)
            rest = [p for p in up if p not in picked]
            chosen += crash_rng.sample(rest, size - len(chosen))
            chosen.sort()
            gone = set(chosen)
            up = [p for p in up if p not in gone]
            if chosen:
                self.crash_plan.append((start + wave.at, chosen))
                h.push(start + wave.at, self._CRASH, chosen)
        roots = {t.creator for t in self.scaled.topics}
        self.stats.crashed_roots = len({p for _, ps in self.crash_plan for p in ps} & roots)
        self.stats.roots = {t.name: t.creator for t in self.scaled.topics}
        self.stats.publication_start = start

    # -- the loop ---------------------------------------------------------------------

    def run(self) -> SimSummary:
        c = self.config
        wall0 = time.perf_counter()
        out = self.out
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
        name = "records.jsonl.gz" if self._gzip else "records.jsonl"
        self._sink = _RecordSink(out / name if out is not None else None)
        try:
            self._plan()
            self._loop()
        finally:
            self._sink.close()
        for i, node in enumerate(self.nodes):
            if node is not None:
                self._harvest_forwards(i)
        self.stats.lost = self.lost
        summary = self.stats.summary(
            seed=c.seed,
            virtual_seconds=self.heap.now - T0,
            wall_seconds=time.perf_counter() - wall0,
            heap_events=self.heap_events,
        )
        if out is not None:
            data = summary.to_dict()
            data["config"] = _config_json(c)
            (out / "summary.json").write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        return summary

    def _loop(self) -> None:
        progress = self._progress
        report = None
        if progress is not None:
            stats = self.stats

            def report(count: int) -> None:
                progress(self.heap.now - T0, stats.injected + stats.skipped, count)

        self.heap_events = self.run_until(self.end_time, progress=report)
        if report is not None:
            report(self.heap_events)

    # -- inputs -----------------------------------------------------------------------

    def history(self, i: int, ti: int, *, page_size: int = 500) -> list[CID] | None:
        """Topic ``ti``'s whole retained history as node ``i`` lists it, newest first
        (paged like an application would), or ``None`` if the node keeps none."""
        node, cid = self.nodes[i], self.topic_cids[ti]
        if node is None or cid is None:
            return None
        out: list[CID] = []
        after: CID | None = None
        while True:
            try:
                page = node.history(cid, after=after, limit=page_size, read=self._read_event)
            except (LocalProtocolError, UnknownTopic):
                return None
            out.extend(c for c, _ in page.events)
            if page.next is None:
                return out
            after = page.next

    def _read_event(self, cid: CID) -> EventDescriptor | None:
        """A retained event's body, read back from the blocks (Kubo in a sidecar)."""
        data = self.blocks.get(cid)
        return EventDescriptor.decode(data, expected_cid=cid) if data is not None else None

    def on_operation_done(self, i: int, out: OperationDone) -> None:
        if out.error is not None:
            raise SimulationError(f"node {i}: an operation failed: {out.error}")
        if self.heap.now <= T0:
            self._done[out.op] = out  # topic creation (set-up) reads its CID

    def _subscribe(self, i: int, ti: int, since: float | None = None) -> None:
        if not self.alive[i]:
            return
        cid = self.topic_cids[ti]
        assert cid is not None, "topics are created before anyone subscribes"
        self.stats.set_subscribed(i, self.topic_names[ti], True)
        self.sub_started.setdefault((i, ti), self.heap.now)
        before = self.stats_subscribed_records
        kw: dict[str, Any] = {}
        if since is not None:
            kw["since"] = since
        if self.config.fast:
            kw["fast"] = True
        where = self.sub_filters.get((i, ti))
        if where is not None:
            kw["filter"] = where
        self.nodes[i].subscribe(self.heap.now, cid, **kw)
        self._drain(i)
        if self.stats_subscribed_records == before and i not in self.attackers:
            # the core did not record it: the runner does (same schema)
            self._write(
                MetricRecord(
                    kind=RecordKind.SUBSCRIBED,
                    ts=self.heap.now,
                    node=self.peer_ids[i],
                    fields={"topic": self.topic_names[ti], "topic_cid": cid_text(cid)},
                )
            )

    def _publish(self, j: int) -> None:
        h = self.heap
        pubs = self.scaled.publications
        if j + 1 < len(pubs):
            h.push(self._publish_times[j + 1], self._PUBLISH, j + 1)
        pub = pubs[j]
        i = pub.node
        if not self.alive[i]:
            self.stats.skipped += 1
            return
        if i in self.attackers:
            self.stats.byzantine_calls += 1  # attackers publish nothing
            return
        ti = self._topic_pos[pub.topic]
        cid = self.topic_cids[ti]
        assert cid is not None, "topics are created before anyone publishes"
        payload = pub.payload(self.config.seed)
        attrs = pub.attributes() if self.config.with_attributes else None
        self.stats.on_call(j, pub.topic, attrs)
        before = self.stats_injected_records
        try:
            if attrs is None:
                self.nodes[i].publish(h.now, cid, payload, inject_id=pub.inject_id)
            else:
                self.nodes[i].publish(
                    h.now, cid, payload, inject_id=pub.inject_id, attributes=attrs
                )
        except LocalProtocolError:
            self.stats.refused += 1
        self._drain(i)
        if self.stats_injected_records == before:
            self._write(
                MetricRecord(
                    kind=RecordKind.EVENT_INJECTED,
                    ts=h.now,
                    node=self.peer_ids[i],
                    fields={
                        "topic": pub.topic,
                        "topic_cid": cid_text(cid),
                        "inject_id": pub.inject_id,
                        "size": len(payload),
                    },
                )
            )

    # -- outputs (transport, blocks and signing are the driver's) ---------------------

    def _sent(self, src: int, out: SendRpc) -> None:
        self.stats.rpcs[src] += 1

    def on_release_blocks(self, i: int, out: Any) -> None:
        """Unpinning: the simulated stores never collect garbage, so nothing changes."""

    def on_deliver(self, i: int, out: Any) -> None:
        if i not in self.attackers:
            self.stats.on_deliver(i, cid_str(out.event_cid), bool(out.recovered))

    def on_topic_updated(self, i: int, out: Any) -> None:
        pass

    def on_disconnect_peer(self, i: int, out: Any) -> None:
        # Simulated links carry no connection state: the core itself ignores the
        # flooding peer until ``out.until`` (its messages are dropped on arrival).
        self.disconnects += 1

    def on_metric_record(self, i: int, rec: MetricRecord) -> None:
        if rec.kind is RecordKind.SUBSCRIBED:
            self.stats_subscribed_records += 1
        elif rec.kind is RecordKind.EVENT_INJECTED:
            self.stats_injected_records += 1
        self._write(rec)

    def _write(self, rec: MetricRecord) -> None:
        self.stats.on_record(rec)
        sink = self._sink
        assert sink is not None
        if sink.active:  # without an output directory nothing is formatted
            sink.write(rec.to_json(run=self.config.run, system="sim", validate=False))

    # -- faults -----------------------------------------------------------------------

    def _crash(self, victims: list[int]) -> None:
        now = self.heap.now
        for i in victims:
            if not self.alive[i]:
                continue
            self._harvest_forwards(i)
            self.take_down(i, keep_state=False)  # its block store survives (on disk)
            self.crashed_at[i] = now
            self.stats.crashed += 1
            self.stats.set_alive(i, False, ())
        self.heap.push(now + self.config.detection_delay, self._DETECT, victims, False)
        if self.config.restart is not None:
            self.heap.push(now + self.config.restart, self._RESTART, victims)

    def _harvest_forwards(self, i: int) -> None:
        """Add node ``i``'s forward counts (tree_filters) to the run's: at its crash
        (the object is dropped) and at the end."""
        counts = getattr(self.nodes[i], "filter_forwards", None)
        if counts:
            self.stats.forwards_down += counts.get("down", 0)
            self.stats.forwards_false_positive += counts.get("false_positive", 0)
            self.stats.forwards_pruned += counts.get("pruned", 0)

    def _detect(self, peers: list[int], alive: bool) -> None:
        now = self.heap.now
        peers = [p for p in peers if self.alive[p] == alive]
        for i in self.tables.set_alive(peers, alive):
            if self.alive[i]:
                self.nodes[i].set_known_peers(now, self.tables.table(i))
                self._drain(i)

    def _restart(self, peers: list[int]) -> None:
        now = self.heap.now
        back = [p for p in peers if not self.alive[p]]
        for i in back:
            self.alive[i] = True
            self.stats.restarted += 1
            self._make_node(i, now)
            self.stats.set_alive(i, True, ())
            # The sidecar resumes each subscription with ``since`` = when it started
            # (state.json), not the crash time: an event received before the crash but
            # still waiting for a parent (causal order) was never delivered, and with
            # ``since`` = the crash time it would be history, never delivered.
            # Re-deliveries of what the application had before the crash are suppressed
            # by the sidecar's delivery log (RunStats.redelivered).
            for ti in self.creator_topics[i]:
                since = self.sub_started.get((i, ti), self.crashed_at[i])
                self.nodes[i].subscribe(now, self.topic_cids[ti], since=since)
                self._drain(i)
            for name in self.scaled.subscriptions[i]:
                ti = self._topic_pos[name]
                since = self.sub_started.get((i, ti), self.crashed_at[i])
                self._subscribe(i, ti, since=since)
        self.heap.push(now + self.config.detection_delay, self._DETECT, back, True)


def _config_json(c: SimConfig) -> dict[str, Any]:
    return {
        "nodes": c.nodes,
        "topics": c.topics,
        "communities": c.communities,
        "events": c.events,
        "seed": c.seed,
        "k": c.k,
        "latency": str(c.latency),
        "loss": c.loss,
        "crashes": [str(w) for w in c.crashes],
        "crash_roots": c.crash_roots,
        "restart": c.restart,
        "rate": c.rate,
        "grace": c.grace,
        "ordered": c.ordered,
        "fast": c.fast,
        "group_capacity": c.group_capacity,
        "workload": str(c.workload) if c.workload is not None else None,
        "detection_delay": c.detection_delay,
        "connect_timeout": c.connect_timeout,
        "fetch_timeout": c.fetch_timeout,
        "run": c.run,
        "rpc_records": c.rpc_records,
        "filters": list(c.filters),
        "attributes": c.with_attributes,
        "tree_filters": c.tree_filters,
        "byzantine": c.byzantine,
        "attack": str(c.attack) if c.attack is not None else None,
        "witnesses": c.witnesses,
        "flat_fanout": c.flat_fanout,
    }


def run_simulation(
    config: SimConfig,
    *,
    out: Path | None = None,
    gzip_records: bool = False,
    workload: Workload | None = None,
    progress: Callable[[float, int, int], None] | None = None,
) -> SimSummary:
    """Run one simulation; write ``records.jsonl[.gz]`` and ``summary.json`` under ``out``."""
    sim = Simulation(
        config, out=out, gzip_records=gzip_records, workload=workload, progress=progress
    )
    return sim.run()
