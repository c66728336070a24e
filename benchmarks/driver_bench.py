"""Sidecar CPU per event without Kubo — not a test.

A real :class:`sidecar.Driver` — protocol core, BlockStore, KuboClient, state and
metric files, timers, the HTTP API (on a free port) — runs against in-process fakes:

* Kubo: an ``httpx.MockTransport`` answering the RPC endpoints the driver calls
  (``id``, ``version``, ``config``, ``dag/import`` of a CAR (the block store's puts),
  ``block/put`` with one ``{"Key","Size"}`` line per multipart file, ``block/get``,
  ``pin/add``, ``pin/rm``, ``provide/once``, ``stats/dht``, ``swarm/peers``,
  ``stats/bw``, ``key/sign`` with the node's Ed25519 key, ...);
* the p2p transport: :class:`FakeTransport`, a ``Transport`` whose outgoing frames
  are counted and handed to the fake peers, and whose incoming frames go through the
  real incoming connection protocol (peer-ID line, ``FrameDecoder``, ``on_rpc``),
  one per peer, one frame per event-loop callback (as one socket read each);
* the peers: the topic's author (the node's parent) is a real protocol core driven
  in process (it answers JOIN and PING); the children are scripted: they JOIN, PING
  every ``ping_interval`` and keep what they are sent.

The tree is built through the node's own inputs (subscribe and create-topic through
the API's handlers over an in-process ASGI transport, JOIN / JOIN_ACK RPCs), so the
node is in the state it has on a cluster. Signatures are on, as by default. Each
scenario sends N events as fast as the node takes them:

receive   a subscriber leaf: signed events (each linking the previous one) arrive
          from its parent, signed as the author's core signs its own events with a
          delegated key, what a sidecar sends by default (``--received kubo``: two
          ``key/sign`` signatures, 2.1.0);
forward   the same subscriber with K children: each event is forwarded to all of them;
publish   the node is the topic's author with K children and publishes through
          ``Driver.call(node.publish)`` + ``Driver.complete``, what ``POST
          /v1/topics/{cid}/publish`` does without the HTTP part (signed with the
          delegated key; ``--delegate-ttl 0``: two ``key/sign`` calls per event).

Reported per event: the process's CPU (``time.process_time``) in µs from the first
event in until the last is written and pinned in Kubo, with the fakes' own CPU (the
fake Kubo's handler, the fake peers, feeding the frames) measured apart and taken
out; events/s until the last is delivered; frames, bytes and Kubo calls. The events are
made before the clock starts (their memoised CIDs are then forgotten, so the node builds
each event's CID as it arrives, as on a cluster; ``--warm-cids`` keeps them, as the
figures before session 9 did), so they are a few seconds old when they arrive: the
node sends its parent one probe PING a second (answered at once). The fake HTTP
transport skips sockets and HTTP parsing: real Kubo calls cost the sidecar more.

The fake Kubo answers at once by default; ``--kubo-latency MS`` makes each answer
wait (no CPU) as a real daemon's round trip does, which changes how the block store's
requests batch.

    .venv/bin/python benchmarks/driver_bench.py                  # 5,000 events, K = 8
    .venv/bin/python benchmarks/driver_bench.py --events 20000 --children 16 --json
    .venv/bin/python benchmarks/driver_bench.py --kubo-latency 2 --kubo-calls
    .venv/bin/python benchmarks/driver_bench.py --profile        # top 25 by cumulative time
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import gc
import io
import json
import logging
import math
import pstats
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import anyio
import anyio.abc
import httpx

from pulsarcast_ipfs.core import (
    SIGNED_VERSION,
    DelegateKey,
    Delegation,
    Ed25519Signer,
    Event,
    EventDescriptor,
    Join,
    PublishResult,
    PulsarcastNode,
    TopicDescriptor,
    UnknownTopic,
    _dagcbor,
    cid_str,
    compute_cid,
    encode_frame,
    format_created,
)
from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.core.testing import make_peer_ids, make_signers
from pulsarcast_ipfs.kademlia import peer_position
from pulsarcast_ipfs.polling import poll_until
from pulsarcast_ipfs.testing import FAKE_KUBO_URL, FakeKubo, FakePeers, FakeTransport, running
from sidecar import Driver, SidecarConfig, build_app
from sidecar._config import DEFAULT_DELEGATE_TTL
from sidecar._driver import Listener

__all__ = [
    "SCENARIOS",
    "Outcome",
    "main",
    "run_scenario",
]

SCENARIOS = ("receive", "forward", "publish")
RECEIVED = ("delegated", "kubo")
"""How the events a receive or forward scenario feeds are signed (``--received``)."""
POLL = 0.005
"""How often the harness looks whether a scenario is done (seconds)."""

log = logging.getLogger("pulsarcast.bench.driver")


# -- scenarios ------------------------------------------------------------------------------


@dataclass(slots=True, kw_only=True)
class Outcome:
    """What one scenario measured, and what it needs for its correctness checks."""

    scenario: str
    events: int
    children: int
    wall: float
    """Seconds from the first event in until the last was delivered (events/s)."""
    stored_after: float
    """... and until the last was written and pinned in Kubo (the store batches)."""
    cpu_total: float
    """Process CPU (s) from the first event in until the last was written and pinned."""
    cpu_fakes: float
    """The part of it spent in the fake Kubo, the fake peers and feeding frames."""
    frames_out: int
    bytes_out: int
    kubo_calls: Counter[str]
    blocks_put: int
    """Blocks written with the block store's ``dag/import`` calls (several per call: a batch)."""
    expected: list[str]
    """The scenario's event CIDs in publication order."""
    delivered: list[str]
    """Event CIDs as the application's delivery listener got them, in order."""
    forwarded: dict[str, Counter[str]]
    """Per child, how many times each event was sent to it."""
    stored: set[str]
    """Expected events present in the fake Kubo (``block/put``)."""
    pinned: set[str]
    """Expected events pinned in the fake Kubo (then or since: retention unpins the oldest)."""
    bad_frames: int
    unknown_endpoints: Counter[str] = field(default_factory=Counter)

    @property
    def cpu_us(self) -> float:
        """Sidecar CPU per event (µs), the fakes' own taken out."""
        return (self.cpu_total - self.cpu_fakes) / self.events * 1e6

    @property
    def fakes_us(self) -> float:
        return self.cpu_fakes / self.events * 1e6

    @property
    def blocks_per_put(self) -> float:
        return self.blocks_put / max(1, self.kubo_calls["dag/import"])

    @property
    def events_per_s(self) -> float:
        return self.events / self.wall if self.wall > 0 else math.inf

    def problems(self) -> list[str]:
        """Correctness, not speed: every event delivered once, in order; forwarded
        once to each child; stored and pinned in Kubo."""
        out: list[str] = []
        want = Counter(self.expected)
        if self.delivered != self.expected:
            got = Counter(self.delivered)
            out.append(
                f"delivered {len(self.delivered)} (distinct {len(got)}, repeated "
                f"{sum(n - 1 for n in got.values() if n > 1)}, missing "
                f"{len(want - got)}) of {len(self.expected)}, or out of order"
            )
        for child, got in sorted(self.forwarded.items()):
            if got != want:
                out.append(
                    f"child {child[-8:]}: {sum(got.values())} event frames for "
                    f"{len(self.expected)} events ({len(want - got)} missing, "
                    f"{sum((got - want).values())} extra)"
                )
        if len(self.stored) != len(want):
            out.append(f"{len(want) - len(self.stored)} events not written to Kubo")
        if len(self.pinned) != len(want):
            out.append(f"{len(want) - len(self.pinned)} events not pinned in Kubo")
        if self.bad_frames:
            out.append(f"{self.bad_frames} frames refused by the transport")
        if self.unknown_endpoints:
            out.append(f"unanswered Kubo endpoints: {dict(self.unknown_endpoints)}")
        return out

    def as_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "events": self.events,
            "children": self.children,
            "wall_s": round(self.wall, 4),
            "stored_after_s": round(self.stored_after, 4),
            "events_per_s": round(self.events_per_s, 1),
            "cpu_us_per_event": round(self.cpu_us, 1),
            "fakes_cpu_us_per_event": round(self.fakes_us, 1),
            "process_cpu_s": round(self.cpu_total, 4),
            "frames_out_per_event": round(self.frames_out / self.events, 3),
            "bytes_out_per_event": round(self.bytes_out / self.events, 1),
            "kubo_calls_per_event": round(sum(self.kubo_calls.values()) / self.events, 3),
            "blocks_per_block_put": round(self.blocks_per_put, 2),
            "kubo_calls": dict(sorted(self.kubo_calls.items())),
            "problems": self.problems(),
        }


async def _until(
    predicate: Callable[[], bool], what: str, *, max_wait: float, required: bool = True
) -> bool:
    """Poll ``predicate`` every :data:`POLL` s, at most ``max_wait`` s (a liveness bound
    of the harness, not a speed check); ``required``: raise if it never held."""
    # (the block store has no "drained" event to wait on)
    held = await poll_until(predicate, deadline=max_wait, interval=POLL)
    if required and not held:
        raise TimeoutError(f"driver bench: {what} did not happen within {max_wait:.0f} s")
    return held


def _farther_peers(me: str, author: str, count: int, seed: int) -> list[str]:
    """``count`` peer IDs farther from ``author`` than ``me`` (they may hang below ``me``)."""
    if count == 0:
        return []
    target = peer_position(author)
    mine = peer_position(me) ^ target
    found = [
        p
        for p in make_peer_ids(8 * count + 64, seed=seed)
        if p != author and peer_position(p) ^ target > mine
    ]
    assert len(found) >= count, "not enough peers farther from the author"
    return found[:count]


def _payload(i: int, size: int) -> bytes:
    return (b"event %d " % i).ljust(size, b".")


def _signed_events(
    author: Ed25519Signer,
    topic: CID,
    count: int,
    size: int,
    *,
    core: PulsarcastNode | None = None,
) -> tuple[list[bytes], list[str]]:
    """``count`` EVENT frames of ``author`` (publisher and author), each linking the
    previous one (LAST_SEEN), and their CIDs. Signed as Kubo's ``key/sign`` would
    (2.1.0), or, given the author's ``core``, as that core signs its own events with a
    delegated key (what a sidecar writes by default: the code's own signing step,
    ``_signed_event``, so the bench follows the event version the code writes)."""
    frames: list[bytes] = []
    cids: list[str] = []
    parents: tuple[CID, ...] = ()
    if core is not None:
        key = DelegateKey(bytes(range(32)))
        expires = int(time.time() + DEFAULT_DELEGATE_TTL)
        key = key.with_delegation(
            Delegation(
                key=key.public_key,
                expires=expires,
                signature=author.sign(key.statement(author.peer_id, expires)),
            )
        )
        core.use_delegate(time.time(), key)
    for i in range(count):
        draft = EventDescriptor(
            topic=topic,
            author=author.peer_id,
            publisher=author.peer_id,
            parents=parents,
            clock=i,
            payload=_payload(i, size),
            created=format_created(time.time()),
            protocol_version=SIGNED_VERSION,
        )
        if core is not None:
            steps = core._signing.signed_event(draft, topic)
            try:
                steps.send(None)  # type: ignore[arg-type]
            except StopIteration as stop:
                ev = stop.value
            else:
                raise AssertionError("the delegated key did not sign at once")
        else:
            ev = draft.with_signatures(
                author=author.sign(draft.author_statement(topic)),
                publisher=author.sign(draft.signing_bytes()),
            )
        frames.append(encode_frame(Event(topic=topic, event=ev.encode())))
        cids.append(cid_str(ev.cid))
        parents = (ev.cid,)
    return frames, cids


def _publish_call(driver: Driver, topic: CID, payload: bytes) -> Callable[[float], Any]:
    return lambda now: driver.node.publish(now, topic, payload)


async def run_scenario(
    scenario: str,
    *,
    events: int,
    children: int,
    payload: int = 100,
    kubo_latency: float = 0.0,
    seed: int = 1,
    profile: cProfile.Profile | None = None,
    delegate_ttl: float = DEFAULT_DELEGATE_TTL,
    received: str = "delegated",
    warm_cids: bool = False,
) -> Outcome:
    """Build the tree, then measure ``events`` events of ``scenario`` on a fresh driver.

    ``warm_cids``: keep the CIDs of the incoming events, built when they were made,
    memoised (the figures before session 9); by default they are forgotten, so the
    node builds each one when it arrives, as on a cluster.

    ``received`` (receive, forward): how the incoming events are signed, ``delegated``
    (as a sidecar signs its own, the default) or ``kubo`` (two ``key/sign``
    signatures, 2.1.0)."""
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}")
    if received not in RECEIVED:
        raise ValueError(f"unknown received signing {received!r}")
    if scenario == "receive":
        children = 0
    signers = make_signers(16, seed=seed)
    author = signers[0]
    if scenario == "publish":
        me = author
    else:  # the closest to the author of 15: children farther away are easy to find
        me = min(
            signers[1:], key=lambda s: peer_position(s.peer_id) ^ peer_position(author.peer_id)
        )
    kids = _farther_peers(me.peer_id, author.peer_id, children, seed)
    kubo = FakeKubo(me, kids if me is author else [author.peer_id, *kids], latency=kubo_latency)
    peers = FakePeers(me.peer_id, kubo)
    with tempfile.TemporaryDirectory(prefix="driver-bench-") as tmp:
        config = SidecarConfig(
            kubo_api=FAKE_KUBO_URL,
            api="127.0.0.1:0",
            state_dir=Path(tmp),
            delegate_ttl=delegate_ttl,
        )
        driver = Driver(
            config,
            kubo=kubo.client(),
            transport_factory=functools.partial(FakeTransport, peers=peers),
        )
        transport = cast(FakeTransport, driver.transport)
        api = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=build_app(driver)), base_url="http://sidecar"
        )
        async with api, running(driver) as tg:
            tg.start_soon(peers.keep_alive, kids, config.ping_interval)
            rig = _Rig(
                driver=driver,
                api=api,
                kubo=kubo,
                peers=peers,
                transport=transport,
                author=author,
                kids=kids,
            )
            outcome = await rig.measure(
                scenario,
                events=events,
                payload=payload,
                profile=profile,
                received=received,
                warm_cids=warm_cids,
            )
    return outcome


@dataclass(frozen=True, slots=True, kw_only=True)
class _Rig:
    """One running driver with its fakes."""

    driver: Driver
    api: httpx.AsyncClient
    """The driver's API handlers over an in-process ASGI transport (set-up only)."""
    kubo: FakeKubo
    peers: FakePeers
    transport: FakeTransport
    author: Ed25519Signer
    kids: list[str]

    async def measure(
        self,
        scenario: str,
        *,
        events: int,
        payload: int,
        profile: cProfile.Profile | None,
        received: str = "delegated",
        warm_cids: bool = False,
    ) -> Outcome:
        driver, api, kubo, peers = self.driver, self.api, self.kubo, self.peers
        transport, author, kids = self.transport, self.author, self.kids
        setup_wait = 30.0

        def state_of(topic: CID) -> Any:
            try:
                return driver.node.topic_state(topic)
            except UnknownTopic:
                return None

        # -- the tree, through the node's own inputs
        if scenario == "publish":
            r = await api.post("/v1/topics", json={"name": "bench"})
            assert r.status_code == 201, r.text
            topic = CID.decode(r.json()["cid"])
        else:
            peers.add_core(author, seed=7)
            topic = peers.create_topic(author.peer_id, "bench")
            r = await api.post(f"/v1/topics/{topic}/subscribe")
            assert r.status_code == 200, r.text
        root = TopicDescriptor.decode(driver.blocks.get(topic) or kubo.blocks[cid_str(topic)])
        assert root.meta is not None
        trees = (topic, root.meta)
        if scenario != "publish":
            await _until(
                lambda: all(
                    (s := state_of(t)) is not None and s.parent == author.peer_id and s.synced
                    for t in trees
                ),
                "joining the author",
                max_wait=setup_wait,
            )
        for kid in kids:  # subscribers below this node: they follow the meta topic too
            for t in trees:
                block = driver.blocks.get(t) or kubo.blocks[cid_str(t)]
                peers.send_to_node(kid, encode_frame(Join(topic=t, descriptor=block)))
        await _until(
            lambda: all(set(kids) <= set(state_of(t).children) for t in trees),
            "children joining",
            max_wait=setup_wait,
        )
        await _until(lambda: driver.store.pending == 0, "set-up blocks stored", max_wait=setup_wait)
        frames, expected = (
            ([], [])
            if scenario == "publish"
            else _signed_events(
                author,
                topic,
                events,
                payload,
                core=peers.cores[author.peer_id][0] if received == "delegated" else None,
            )
        )
        await anyio.sleep(0.2)  # let the set-up's last RPCs and records settle
        listener: Listener = driver.listen()
        calls_before, puts_before = Counter(kubo.calls), kubo.blocks_put
        kubo.watch(expected)
        frames_before, bytes_before = transport.frames_out, transport.bytes_out
        fakes_before = kubo.cpu + peers.cpu
        if not warm_cids:
            # The events were made (and their CIDs built) above; a node on a cluster
            # builds each new event's CID when it arrives: forget the memoised ones.
            _dagcbor.cid_for_digest.cache_clear()
            _dagcbor.cid_from_bytes.cache_clear()
            gc.collect()

        # -- measured: from the first event in until the last is delivered, written, pinned
        began_cpu, began = time.process_time(), time.perf_counter()
        feeding = 0.0
        if profile is not None:
            profile.enable()
        if scenario == "publish":
            for i in range(events):
                driver.known_root(topic)  # what the API handler checks first
                res = await driver.complete(
                    driver.call(_publish_call(driver, topic, _payload(i, payload)))
                )
                assert isinstance(res, PublishResult) and res.event_cid is not None
                expected.append(cid_str(res.event_cid))
                kubo.watch(expected[-1:])
        else:
            t0 = time.process_time()
            for frame in frames:
                transport.feed(author.peer_id, frame)
            feeding = time.process_time() - t0
        max_wait = 10.0 + events / 50  # what is missing then shows in Outcome.problems()
        await _until(
            lambda: len(listener.items) >= events,
            "delivering every event",
            max_wait=max_wait,
            required=False,
        )
        wall = time.perf_counter() - began
        await _until(  # the store may hold blocks back to fill a batch: count its work too
            lambda: (
                kubo.watched_stored >= events
                and kubo.watched_pinned >= events
                and driver.store.pending == 0
            ),
            "storing and pinning every event",
            max_wait=max_wait,
            required=False,
        )
        if profile is not None:
            profile.disable()
        stored_after = time.perf_counter() - began
        cpu_total = time.process_time() - began_cpu
        cpu_fakes = kubo.cpu + peers.cpu - fakes_before + feeding
        driver.unlisten(listener)

        want = set(expected)
        return Outcome(
            scenario=scenario,
            events=events,
            children=len(kids),
            wall=wall,
            stored_after=stored_after,
            cpu_total=cpu_total,
            cpu_fakes=cpu_fakes,
            frames_out=transport.frames_out - frames_before,
            bytes_out=transport.bytes_out - bytes_before,
            kubo_calls=Counter(kubo.calls) - calls_before,
            blocks_put=kubo.blocks_put - puts_before,
            expected=expected,
            delivered=[
                str(item["cid"]) for item in listener.items if item["topic_root"] == cid_str(topic)
            ],
            forwarded={kid: peers.events_to(kid, topic) for kid in kids},
            stored=want & kubo.blocks.keys(),
            pinned=want & kubo.ever_pinned,
            bad_frames=transport.bad_frames,
            unknown_endpoints=Counter(kubo.unknown),
        )


async def kubo_call_costs(calls: int = 2_000) -> dict[str, float]:
    """Process CPU (µs) of one KuboClient call against the fake, its answer taken out:
    the sidecar's side of each Kubo call a received or published event makes."""
    kubo = FakeKubo(make_signers(1, seed=3)[0])
    blocks = [_payload(i, 300) for i in range(calls)]  # any bytes: the fake does not decode
    cids = [compute_cid(b) for b in blocks]
    costs: dict[str, float] = {}
    async with kubo.client() as client:
        probes: dict[str, Callable[[int], Awaitable[object]]] = {
            "stats/bw (no CID)": lambda i: client.stats_bw(),
            "block/put, 1 block": lambda i: client.block_put_many([blocks[i]]),
            "dag/import, 1 block": lambda i: client.block_import_many([blocks[i]], cids=[cids[i]]),
            "pin/add, 1 CID": lambda i: client.pin_add_many([cids[i]], fast_provide_root=False),
            "key/sign": lambda i: client.key_sign(blocks[i]),
        }
        for name, probe in probes.items():
            fake, began = kubo.cpu, time.process_time()
            for i in range(calls):
                await probe(i)
            spent = time.process_time() - began - (kubo.cpu - fake)
            costs[name] = spent / calls * 1e6
    return costs


# -- command line --------------------------------------------------------------------------


def _table(results: list[Outcome]) -> str:
    head = (
        "scenario",
        "events",
        "K",
        "events/s",
        "CPU µs/event",
        "fakes µs/event",
        "frames out/event",
        "bytes out/event",
        "Kubo calls/event",
        "blocks/put",
    )
    rows = [head]
    for o in results:
        rows.append(
            (
                o.scenario,
                f"{o.events:,}",
                str(o.children),
                f"{o.events_per_s:,.0f}",
                f"{o.cpu_us:,.0f}",
                f"{o.fakes_us:,.0f}",
                f"{o.frames_out / o.events:.2f}",
                f"{o.bytes_out / o.events:,.0f}",
                f"{sum(o.kubo_calls.values()) / o.events:.2f}",
                f"{o.blocks_per_put:.1f}",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = [
        "  ".join(
            c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _profile_text(profile: cProfile.Profile, top: int) -> str:
    """The ``top`` functions by cumulative time, then the 15 with the most own time."""
    out = io.StringIO()
    stats = pstats.Stats(profile, stream=out).strip_dirs()
    stats.sort_stats("cumulative").print_stats(top)
    out.write("-- by own time (tottime) --\n")
    stats.sort_stats("tottime").print_stats(15)
    return out.getvalue()


async def _run_all(
    args: argparse.Namespace,
) -> tuple[list[Outcome], dict[str, str], dict[str, float]]:
    results: list[Outcome] = []
    profiles: dict[str, str] = {}
    calls = await kubo_call_costs() if args.kubo_calls else {}
    for scenario in args.scenarios:
        profile = cProfile.Profile() if args.profile else None
        results.append(
            await run_scenario(
                scenario,
                events=args.events,
                children=args.children,
                payload=args.payload,
                kubo_latency=args.kubo_latency / 1000,
                seed=args.seed,
                profile=profile,
                delegate_ttl=args.delegate_ttl,
                received=args.received,
                warm_cids=args.warm_cids,
            )
        )
        if profile is not None:
            profiles[scenario] = _profile_text(profile, 25)
    return results, profiles, calls


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--events", type=int, default=5_000, help="events per scenario (5,000)")
    p.add_argument("--children", type=int, default=8, help="K children (forward, publish)")
    p.add_argument("--payload", type=int, default=100, help="payload bytes per event (100)")
    p.add_argument(
        "--scenarios",
        type=lambda s: [x.strip() for x in s.split(",") if x.strip()],
        default=list(SCENARIOS),
        help="comma-separated subset of " + ",".join(SCENARIOS),
    )
    p.add_argument(
        "--kubo-latency",
        type=float,
        default=0.0,
        metavar="MS",
        help="each fake Kubo answer waits this long (0: at once, every event its own block/put)",
    )
    p.add_argument(
        "--delegate-ttl",
        type=float,
        default=DEFAULT_DELEGATE_TTL,
        metavar="S",
        help="the sidecar's delegated signing key (default on; 0: every event signed "
        "through the fake Kubo's key/sign, two calls per publish)",
    )
    p.add_argument(
        "--received",
        choices=RECEIVED,
        default="delegated",
        help="receive/forward: the incoming events signed as the author's core signs its "
        "own with a delegated key (default: what sidecars send), or by Kubo key/sign (2.1.0)",
    )
    p.add_argument(
        "--warm-cids",
        action="store_true",
        help="receive/forward: keep the incoming events' CIDs memoised from when the bench "
        "made them (before session 9; by default the node builds each one, as on a cluster)",
    )
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--profile", action="store_true", help="cProfile each scenario: top 25")
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")
    p.add_argument(
        "--kubo-calls",
        action="store_true",
        help="also measure the client-side CPU of single Kubo calls against the fake",
    )
    a = p.parse_args(argv)
    if a.events < 1 or a.children < 0 or a.payload < 1 or a.kubo_latency < 0:
        p.error(
            "--events and --payload must be positive, --children and --kubo-latency not negative"
        )
    if bad := [s for s in a.scenarios if s not in SCENARIOS]:
        p.error(f"unknown scenario(s): {', '.join(bad)}")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    results, profiles, calls = anyio.run(_run_all, a, backend="asyncio")
    if a.json:
        doc: dict[str, Any] = {"results": [o.as_json() for o in results]}
        if profiles:
            doc["profiles"] = profiles
        if calls:
            doc["kubo_call_cpu_us"] = {k: round(v, 1) for k, v in calls.items()}
        print(json.dumps(doc, indent=2))
    else:
        print(_table(results))
        print("CPU: process CPU per event with the fakes' own (fake Kubo, fake peers) taken out.")
        for o in results:
            for problem in o.problems():
                print(f"{o.scenario}: PROBLEM: {problem}")
        for name, us in calls.items():
            print(f"one KuboClient call, {name}: {us:,.0f} µs of sidecar CPU")
        for scenario, text in profiles.items():
            print(f"\n== profile of {scenario} (profiled run: slower than the table's) ==")
            print(text)
    return 1 if any(o.problems() for o in results) else 0


if __name__ == "__main__":
    sys.exit(main())
