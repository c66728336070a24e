"""Simulator engine mechanics: heap, specs, k-bucket tables, transport, determinism.

The network tests here drive a trivial *flooding* test double (``FloodNode``)
to check the engine's own mechanics (timers, transport, loss, crashes, block
store, records, determinism). They are NOT protocol acceptance tests: those are
in ``test_sim_acceptance.py`` and use the real ``PulsarcastNode``.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from pulsarcast_ipfs.core import (
    Deliver,
    Event,
    EventDescriptor,
    FetchBlock,
    SendRpc,
    StoreBlock,
    TopicDescriptor,
    TopicOptions,
    encode_frame,
    format_created,
)
from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.kademlia import bucket_index, validate_peer_id
from pulsarcast_ipfs.records import MetricRecord, RecordKind
from pulsarcast_ipfs.sim import (
    T0,
    CrashSpec,
    EventHeap,
    LatencySpec,
    RoutingTables,
    SimConfig,
    Simulation,
    SimulationError,
    SpecError,
    make_peer_ids,
    parse_crashes,
    parse_duration,
    parse_fraction,
    parse_latency,
    substream,
)
from pulsarcast_ipfs.workload import load_workload

# -- heap and clock ---------------------------------------------------------------------


def test_heap_orders_by_time_then_insertion() -> None:
    h = EventHeap(start=10.0)
    h.push(12.0, 1, "c")
    h.push(11.0, 1, "a")
    h.push(12.0, 1, "d")
    h.push(11.0, 1, "b")
    seen = []
    while len(h):
        t, _, _, a, _, _ = h.pop()
        assert h.now == t
        seen.append(a)
    assert seen == ["a", "b", "c", "d"]
    with pytest.raises(SimulationError, match="before the clock"):
        h.push(11.9, 1)
    assert h.peek_time() is None


def test_substreams_are_independent_and_reproducible() -> None:
    a1, a2, b = substream(1, "a"), substream(1, "a"), substream(1, "b")
    xs = [a1.random() for _ in range(5)]
    assert xs == [a2.random() for _ in range(5)]
    assert xs != [b.random() for _ in range(5)]
    assert xs != [substream(2, "a").random() for _ in range(5)]


# -- option syntax ----------------------------------------------------------------------


def test_parse_duration_and_fraction() -> None:
    assert parse_duration("250ms") == pytest.approx(0.25)
    assert parse_duration("1.5s") == 1.5
    assert parse_duration("2m") == 120.0
    assert parse_duration("3") == 3.0
    assert parse_fraction("5%") == pytest.approx(0.05)
    assert parse_fraction("0.1") == 0.1
    for bad in ("", "ms", "5 parsecs", "-1s"):
        with pytest.raises(SpecError, match="invalid duration"):
            parse_duration(bad)
    for bad in ("five", "150%", "-0.1"):
        with pytest.raises(SpecError):
            parse_fraction(bad)


def test_parse_latency() -> None:
    assert parse_latency("50ms") == LatencySpec(kind="constant", a=0.05)
    n = parse_latency("500ms±300ms")
    assert n.kind == "normal" and n.a == 0.5 and n.b == pytest.approx(0.3)
    assert parse_latency("500ms+-300ms") == n
    u = parse_latency("10ms..90ms")
    assert u.kind == "uniform" and u.a == 0.01 and u.b == pytest.approx(0.09)
    rng = random.Random(1)
    assert all(n.sample(rng) >= 0 for _ in range(2000))
    assert all(0.01 <= u.sample(rng) <= 0.09 for _ in range(200))
    for bad in ("fast", "90ms..10ms", "1s±x"):
        with pytest.raises(SpecError, match="invalid latency"):
            parse_latency(bad)


def test_parse_crashes() -> None:
    waves = parse_crashes("10%@120s, 25@2m")
    assert waves == (CrashSpec(at=120.0, fraction=0.1), CrashSpec(at=120.0, count=25))
    assert waves[0].size(1000) == 100 and waves[1].size(10) == 10
    for bad in ("10%", "ten@5s", "10%@soon", "10%@5s,"):
        with pytest.raises(SpecError):
            parse_crashes(bad)


# -- membership -------------------------------------------------------------------------


def test_peer_ids_are_valid_ed25519_identities() -> None:
    ids = make_peer_ids(50, seed=1)
    assert len(set(ids)) == 50
    assert all(p.startswith("12D3KooW") and validate_peer_id(p) == p for p in ids)
    assert ids == make_peer_ids(50, seed=1)


def test_k_buckets() -> None:
    ids = make_peer_ids(600, seed=3)
    k = 4
    rt = RoutingTables(ids, k=k, rng=substream(3, "k-buckets"))
    for a in range(0, 600, 37):
        table = rt.table(a)
        assert ids[a] not in table and len(set(table)) == len(table)
        by_bucket: dict[int, int] = {}
        for p in table:
            b = bucket_index(rt.positions[a], rt.positions[ids.index(p)])
            by_bucket[b] = by_bucket.get(b, 0) + 1
        assert all(v <= k for v in by_bucket.values())
        # every populated bucket is represented, full when it has >= k peers
        for c in range(256):
            members = [p for p in range(600) if p != a and rt.check_bucket(a, p) == c]
            assert by_bucket.get(c, 0) == min(k, len(members))
    assert RoutingTables(ids, k=k, rng=substream(3, "k-buckets")).table(5) == rt.table(5)
    # a dead peer leaves the tables that held it; its replacement comes from the cache
    victim = ids.index(rt.table(0)[0])
    affected = rt.set_alive([victim], False)
    assert 0 in affected and all(ids[victim] not in rt.table(i) for i in range(600))
    rt.set_alive([victim], True)
    assert ids[victim] in rt.table(0)


# -- a trivial flooding node: engine mechanics only, not the protocol --------------------


_DECODED: dict[bytes, EventDescriptor] = {}


class FloodNode:
    """Test double. Floods every event to its whole routing table; delivers once."""

    def __init__(self, peer_id: str, rng: random.Random, now: float) -> None:
        self.peer_id = peer_id
        self.known: list[str] = []
        self.subscribed: set[CID] = set()
        self.seen: set[CID] = set()
        self.out: list[Any] = []
        self.timer = now + 1.0
        self.ticks = 0
        self.unreachable: list[str] = []
        self.fetched: list[tuple[CID, bool]] = []

    def set_known_peers(self, now: float, peers: Iterable[str]) -> None:
        self.known = list(peers)

    def get_timer(self) -> float | None:
        return self.timer

    def handle_timer(self, now: float) -> None:
        self.ticks += 1
        self.timer = now + 1.0

    def take_outputs(self) -> list[Any]:
        out, self.out = self.out, []
        return out

    def peer_unreachable(self, now: float, peer: str) -> None:
        self.unreachable.append(peer)

    def create_topic(self, now: float, name: str, *, options: TopicOptions | None = None) -> CID:
        d = TopicDescriptor.new(name=name, author=self.peer_id, now=now, options=options)
        self.out.append(StoreBlock(cid=d.cid, data=d.encode()))
        return d.cid

    def subscribe(self, now: float, topic_cid: CID) -> None:
        self.out.append(FetchBlock(cid=topic_cid))

    def block_fetched(self, now: float, cid: CID, data: bytes | None) -> None:
        self.fetched.append((cid, data is not None))
        if data is not None:
            self.subscribed.add(cid)

    def publish(self, now: float, topic_cid: CID, payload: bytes, *, inject_id: str) -> None:
        ev = EventDescriptor(
            topic=topic_cid,
            author=self.peer_id,
            publisher=self.peer_id,
            payload=payload,
            created=format_created(now),
        )
        self.out.append(
            MetricRecord(
                kind=RecordKind.EVENT_PUBLISHED,
                ts=now,
                node=self.peer_id,
                fields={"topic": "t", "event": str(ev.cid), "inject_id": inject_id},
            )
        )
        self._accept(now, ev, None)

    def receive_rpc(self, now: float, peer: str, rpc: Any, *, size: int | None = None) -> None:
        assert isinstance(rpc, Event)
        ev = _DECODED.get(rpc.event)
        if ev is None:
            ev = _DECODED[rpc.event] = EventDescriptor.decode(rpc.event)
        self._accept(now, ev, peer)

    def _accept(self, now: float, ev: EventDescriptor, sender: str | None) -> None:
        if ev.cid in self.seen:
            return
        self.seen.add(ev.cid)
        self.out.append(StoreBlock(cid=ev.cid, data=ev.encode()))
        if ev.topic in self.subscribed:
            self.out.append(
                Deliver(topic_cid=ev.topic, event_cid=ev.cid, event=ev, recovered=False)
            )
            self.out.append(
                MetricRecord(
                    kind=RecordKind.EVENT_DELIVERED,
                    ts=now,
                    node=self.peer_id,
                    fields={
                        "topic": "t",
                        "event": str(ev.cid),
                        "latency": now - ev.created_ts,
                        "recovered": False,
                    },
                )
            )
        rpc, data = _FRAMES.get(ev.cid) or _FRAMES.setdefault(ev.cid, _frame(ev))
        for p in self.known:
            if p != sender:
                self.out.append(SendRpc(peer=p, rpc=rpc, data=data))


_FRAMES: dict[CID, tuple[Event, bytes]] = {}


def _frame(ev: EventDescriptor) -> tuple[Event, bytes]:
    rpc = Event(topic=ev.topic, event=ev.encode())
    return rpc, encode_frame(rpc)


_WORKLOAD = load_workload()


def _mechanics_sim(tmp: Path | None, **kw: Any) -> Simulation:
    base: dict[str, Any] = {
        "nodes": 24,
        "topics": 3,
        "events": 20,
        "seed": 1,
        "k": 3,
        "rate": 5.0,
        "grace": 20.0,
    }
    base.update(kw)
    return Simulation(
        SimConfig(**base),
        out=tmp,
        workload=_WORKLOAD,
        node_factory=lambda pid, rng, now: FloodNode(pid, rng, now),
    )


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_mechanics_fault_free_flood(tmp_path: Path) -> None:
    sim = _mechanics_sim(tmp_path / "a")
    s = sim.run()
    assert s.events_published == 20 and s.events_injected == 20
    assert s.coverage_published == 1.0 and s.duplicates == 0
    assert s.latency_p50 is not None and s.latency_p50 >= 0.05  # at least one 50 ms hop
    # timers were re-armed and fired once a virtual second
    ticks = [n.ticks for n in sim.nodes]
    assert min(ticks) >= int(s.virtual_seconds) - 2
    records = (tmp_path / "a" / "records.jsonl").read_text().splitlines()
    kinds = {line.split('"kind":"', 1)[1].split('"', 1)[0] for line in records}
    assert {"subscribed", "event_injected", "event_published", "event_delivered"} <= kinds
    assert (tmp_path / "a" / "summary.json").is_file()


def test_mechanics_same_seed_same_records(tmp_path: Path) -> None:
    _mechanics_sim(tmp_path / "a", latency=parse_latency("20ms..80ms"), loss=0.1).run()
    _mechanics_sim(tmp_path / "b", latency=parse_latency("20ms..80ms"), loss=0.1).run()
    _mechanics_sim(tmp_path / "c", latency=parse_latency("20ms..80ms"), loss=0.1, seed=2).run()
    a, b, c = (_sha(tmp_path / d / "records.jsonl") for d in "abc")
    assert a == b != c


def test_mechanics_loss_is_seeded(tmp_path: Path) -> None:
    s1 = _mechanics_sim(None, loss=0.2).run()
    s2 = _mechanics_sim(None, loss=0.2).run()
    s3 = _mechanics_sim(None, loss=0.2, seed=9).run()
    assert s1.messages_lost == s2.messages_lost > 0
    assert 0.15 < s1.messages_lost / s1.rpcs_total < 0.25
    assert s3.messages_lost != s1.messages_lost


def test_mechanics_crash_unreachable_and_block_store() -> None:
    sim = _mechanics_sim(None, crashes=(CrashSpec(at=2.0, count=6),), crash_roots=1)
    s = sim.run()
    assert s.crashed == 6 and s.crashed_roots == 1
    dead = {sim.peer_ids[i] for i in sim.crash_plan[0][1]}
    live = [n for n in sim.nodes if n is not None]
    assert len(live) == 18
    # senders learned about dead peers only through the transport
    told = {p for n in live for p in n.unreachable}
    assert told and told <= dead
    # dead peers left the routing tables after the detection delay
    assert not any(set(n.known) & dead for n in live)
    # flooding still reaches every live subscriber of every published event
    assert s.coverage_live == 1.0


def test_mechanics_fetch_needs_a_live_holder() -> None:
    sim = _mechanics_sim(None, events=0, grace=1.0)
    sim._plan()
    creator = sim.scaled.topics[0].creator
    cid = sim.topic_cids[0]
    assert cid is not None
    sim._crash([creator])
    other = next(i for i in range(24) if i != creator)
    sim.nodes[other].out.append(FetchBlock(cid=cid))
    sim._drain(other)
    while len(sim.heap):
        kind = sim.heap._heap[0][2]
        sim.heap.pop() if kind != 2 else sim._finish_fetch(*sim.heap.pop()[3:])
    assert (cid, False) in sim.nodes[other].fetched
    assert sim.heap.now - T0 >= sim.config.fetch_timeout


def test_config_errors() -> None:
    with pytest.raises(SpecError, match="--loss"):
        SimConfig(loss=1.0)
    with pytest.raises(SpecError, match="--rate"):
        SimConfig(rate=0)
    with pytest.raises(SpecError, match="--nodes"):
        SimConfig(nodes=0)


def test_cid_text_matches_multiformats() -> None:
    from pulsarcast_ipfs.core import compute_cid
    from pulsarcast_ipfs.sim._runner import cid_text

    for i in range(50):
        cid = compute_cid(bytes([i]) * (i + 1))
        assert cid_text(cid) == str(cid)


def test_public_names_are_exported() -> None:
    import pulsarcast_ipfs.sim as sim
    from pulsarcast_ipfs.sim import _network, _runner, _spec, _stats

    exported = set(sim.__all__)
    for mod in (_network, _runner, _spec, _stats):
        assert set(mod.__all__) <= exported, mod.__name__
    assert all(hasattr(sim, name) for name in exported)
