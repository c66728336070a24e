"""Shared pieces of the fuzz harnesses: a small world of real descriptors and frames,
one fuzz step for the codec and one for a node, and the invariants checked after each.

Property (docs/protocol.md §6, docs/core-api.md "Errors"): bytes from the network may only
ever raise :class:`RemoteProtocolError` from the codec, and a node fed any decoded
RPC from any peer raises nothing (it drops what is wrong and records
``event_dropped``), and its bounded structures and tree state stay consistent.

The harness reads a few private attributes of the node (``_trees``, ``_waiting``)
to check invariants that the public API cannot show; that is its purpose.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

from multiformats import CID

from pulsarcast_ipfs.core import (
    DescriptorError,
    DisconnectPeer,
    Ed25519Signer,
    Event,
    FetchBlock,
    FrameDecoder,
    Heads,
    Join,
    JoinAck,
    Leave,
    Members,
    MembersWant,
    NodeConfig,
    OperationDone,
    PeerPolicy,
    Pending,
    Ping,
    Pong,
    PulsarcastNode,
    RemoteProtocolError,
    RequestAck,
    RequestToPublish,
    Rpc,
    SendRpc,
    SignRequest,
    StoreBlock,
    TopicDescriptor,
    TopicOptions,
    author_statement,
    compute_cid,
    decode_descriptor,
    decode_rpc,
    encode_frame,
    format_created,
)
from pulsarcast_ipfs.core.testing import make_signers
from pulsarcast_ipfs.records import MetricRecord, RecordKind

__all__ = [
    "FUZZ_CONFIG",
    "FuzzFailure",
    "NodeFuzzer",
    "World",
    "build_world",
    "codec_one_input",
    "mutate",
    "random_frames",
]

T0 = 1_800_000_000.0

FUZZ_CONFIG = NodeConfig(
    seen_cache_size=64,
    delivered_cache_size=64,
    event_cache_size=32,
    max_pending_fetches=16,
    max_waiting_events=16,
    request_cache_size=16,
    heads_size=8,
    max_frame_size=64 * 1024,
    join_rate=1.0,
    join_burst=5.0,
    event_rate=5.0,
    event_burst=15.0,
    request_rate=1.0,
    request_burst=3.0,
    abuse_limit=20,
    abuse_window=30.0,
    require_signatures=True,
    ban_time=60.0,
    rate_limit_peers=4,
    max_topics=12,
)
SIGNED = NodeConfig(require_signatures=True)
"""Small bounds and rate limits, so that a fuzz run reaches every eviction path, rate
limit and disconnection quickly."""


class FuzzFailure(AssertionError):
    """A property of the harness does not hold (the input is a finding)."""


@dataclass(slots=True)
class World:
    """Peers, real topic and event blocks, and valid frames built by real nodes."""

    peers: list[str]
    keys: dict[str, Ed25519Signer] = field(default_factory=dict)
    """Ed25519 identities of the peers: every descriptor is signed (1.1.0)."""
    done: dict[str, OperationDone] = field(default_factory=dict)
    store: dict[CID, bytes] = field(default_factory=dict)
    topics: list[CID] = field(default_factory=list)
    events: list[CID] = field(default_factory=list)
    frames: list[bytes] = field(default_factory=list)


def _drain(node: PulsarcastNode, world: World) -> list[SendRpc]:
    sent: list[SendRpc] = []
    outs = node.take_outputs()
    while outs:
        for out in outs:
            if isinstance(out, StoreBlock):
                world.store[out.cid] = out.data
            elif isinstance(out, SendRpc):
                sent.append(out)
            elif isinstance(out, SignRequest):
                key = world.keys[node.peer_id]
                node.signed(T0, out.request_id, key.sign(out.data))
            elif isinstance(out, OperationDone):
                world.done[out.op] = out
        outs = node.take_outputs()
    return sent


def _result(world: World, value: Any) -> Any:
    """What an API command returned, once its signatures were answered by ``_drain``."""
    if isinstance(value, Pending):
        done = world.done[value.op]
        assert done.error is None, done.error
        return done.result
    return value


def _meta_of(topic_block: bytes) -> CID:
    meta = TopicDescriptor.decode(topic_block).meta
    assert meta is not None
    return meta


def build_world(seed: int = 0) -> World:
    """Topics by a foreign author (open, restricted, CUSTOM), events, and seed frames."""
    keys = make_signers(10, seed=seed)
    peers = [k.peer_id for k in keys]
    world = World(peers=peers, keys={k.peer_id: k for k in keys})
    author = PulsarcastNode(peer_id=peers[1], config=SIGNED, rng=random.Random(seed), now=T0)
    author.set_known_peers(T0, peers[2:])
    pending = author.create_topic(T0, "open")
    _drain(author, world)
    opened = _result(world, pending)
    pending = author.create_topic(
        T0 + 1,
        "restricted",
        options=TopicOptions(
            allowed_publishers=PeerPolicy(enabled=True, peers=(peers[2],)),
            request_to_publish=PeerPolicy(enabled=True, peers=(peers[3],)),
        ),
    )
    _drain(author, world)
    restricted = _result(world, pending)
    pending = author.create_topic(T0 + 2, "custom", options=TopicOptions(event_linking="CUSTOM"))  # type: ignore[arg-type]
    _drain(author, world)
    custom = _result(world, pending)
    world.topics += [opened, restricted, custom]
    # Children below the author, so that its events are sent (and captured as frames).
    for topic in (opened, restricted, custom):
        desc = world.store[topic]
        author.receive_rpc(T0 + 3, peers[0], Join(topic=topic, descriptor=desc))
        author.receive_rpc(T0 + 3, peers[5], Join(topic=topic, descriptor=desc))
    _drain(author, world)
    sent: list[SendRpc] = []
    for i in range(6):
        for topic in (opened, restricted):
            pub = author.publish(T0 + 4 + i, topic, f"event {i}".encode())
            sent += _drain(author, world)
            res = _result(world, pub)
            assert res.event_cid is not None
            world.events.append(res.event_cid)
    pub = author.publish(T0 + 11, custom, b"custom root")
    sent += _drain(author, world)
    last = _result(world, pub)
    assert last.event_cid is not None
    author.publish(T0 + 12, custom, b"custom child", parent=last.event_cid)
    author.update_topic(T0 + 13, opened, options=TopicOptions(event_linking="CUSTOM"))  # type: ignore[arg-type]
    author.publish(T0 + 14, opened, b"after update")
    sent += _drain(author, world)
    world.frames += sorted({s.data for s in sent})
    # An event naming a non-first topic version, with its topicBlock, as a forwarder sends it.
    for s in sent:
        if isinstance(s.rpc, Event) and s.rpc.topic_block is not None:
            world.frames.append(s.data)
    # Frames of every other kind.
    t = world.store[opened]
    r = world.store[restricted]
    ev = world.events[0]
    world.frames += [
        encode_frame(Join(topic=opened, descriptor=t)),
        encode_frame(JoinAck(topic=opened, ok=True)),
        # the meta-topic descriptor asked for and carried (wire 2.7)
        encode_frame(Join(topic=opened, descriptor=t, want_meta=True)),
        encode_frame(JoinAck(topic=opened, ok=True, meta=world.store[_meta_of(t)])),
        encode_frame(JoinAck(topic=restricted, ok=False)),
        encode_frame(Leave(topic=opened)),
        encode_frame(Ping(nonce=7)),
        encode_frame(Pong(nonce=7)),
        encode_frame(Heads(topic=opened, heads=((ev, T0 + 4.0),))),
        encode_frame(Heads(topic=restricted, heads=tuple((e, T0 + 5.0) for e in world.events))),
        encode_frame(
            RequestToPublish(
                topic=restricted,
                descriptor=r,
                request_id=f"{peers[3]}/0001",
                author=peers[3],
                payload=b"please",
                parent=None,
                created=format_created(T0 + 20),
                inject_id="inj-1",
                signature=keys[3].sign(
                    author_statement(
                        tree=restricted,
                        author=peers[3],
                        created=format_created(T0 + 20),
                        payload=b"please",
                    )
                ),
            )
        ),
        encode_frame(
            RequestAck(topic=restricted, request_id=f"{peers[0]}/0001", ok=True, event=ev)
        ),
        # MEMBERS, whole and as a delta of it (wire 2.6), and MEMBERS_WANT
        encode_frame(Members(topic=opened, epoch=5, members=(peers[0], peers[1], peers[2]))),
        encode_frame(
            Members(topic=opened, epoch=6, members=(peers[3],), base=5, removed=(peers[1],))
        ),
        encode_frame(MembersWant(topic=opened)),
    ]
    return world


def mutate(data: bytes, rng: random.Random, pool: list[bytes]) -> bytes:
    """A few random edits: flip, set, insert, delete, truncate, splice, duplicate."""
    buf = bytearray(data)
    for _ in range(rng.randint(1, 6)):
        op = rng.randrange(8)
        n = len(buf)
        if op == 0 and n:
            i = rng.randrange(n)
            buf[i] ^= 1 << rng.randrange(8)
        elif op == 1 and n:
            buf[rng.randrange(n)] = rng.choice((0, 0x7F, 0x80, 0xFF, 0x18, 0x2A, 0xD8, 0xF6))
        elif op == 2:
            i = rng.randint(0, n)
            buf[i:i] = rng.randbytes(rng.randint(1, 8))
        elif op == 3 and n:
            i = rng.randrange(n)
            del buf[i : i + rng.randint(1, 16)]
        elif op == 4 and n:
            del buf[rng.randrange(n) :]
        elif op == 5:
            other = rng.choice(pool)
            i, j = rng.randint(0, n), rng.randrange(len(other))
            buf[i:] = other[j:]
        elif op == 6 and n:
            i = rng.randrange(n)
            buf[i:i] = buf[i : i + rng.randint(1, 32)]
        elif op == 7:
            buf += rng.choice(pool)
    return bytes(buf)


def random_frames(rng: random.Random, world: World) -> bytes:
    """One fuzz input for the fallback runner: valid frames, mutated or not, or garbage."""
    kind = rng.random()
    if kind < 0.05:
        return rng.randbytes(rng.randint(0, 64))
    if kind < 0.12:
        return rng.choice(world.frames) * rng.randint(5, 40)  # a flood from one peer
    chunk = b"".join(rng.choice(world.frames) for _ in range(rng.randint(1, 3)))
    if kind < 0.25:
        return chunk  # valid frames: reach deep node paths
    return mutate(chunk, rng, world.frames)


# ------------------------------------------------------------------------ the codec


def codec_one_input(data: bytes) -> int:
    """Feed ``data`` whole and byte by byte; also as a descriptor. Return RPCs decoded.

    Only ``RemoteProtocolError`` may come out of the codec; both ways of feeding
    must agree on the messages decoded before any error.
    """
    whole: list[Rpc] = []
    whole_err = False
    dec = FrameDecoder(max_frame_size=64 * 1024)
    try:
        whole = dec.feed(data)
    except RemoteProtocolError:
        whole_err = True
    except Exception as exc:
        raise FuzzFailure(f"FrameDecoder.feed raised {exc!r}") from exc
    pieces: list[Rpc] = []
    dec = FrameDecoder(max_frame_size=64 * 1024)
    piece_err = False
    for b in data:
        try:
            pieces += dec.feed(bytes((b,)))
        except RemoteProtocolError:
            piece_err = True
            break
        except Exception as exc:
            raise FuzzFailure(f"byte-by-byte feed raised {exc!r}") from exc
    if not whole_err and (piece_err or pieces != whole):
        raise FuzzFailure("whole and byte-by-byte decoding disagree")
    if whole_err and not piece_err and len(pieces) > 0 and dec.buffered == 0:
        raise FuzzFailure("whole decoding failed where byte-by-byte succeeded")
    for rpc in whole:  # every decoded message re-encodes to a decodable frame
        again = decode_rpc(encode_frame(rpc)[_varint_len(encode_frame(rpc)) :])
        if again != rpc:
            raise FuzzFailure(f"round trip changed {rpc.op}")
    try:
        desc = decode_descriptor(data)
    except DescriptorError:
        pass
    except Exception as exc:
        raise FuzzFailure(f"decode_descriptor raised {exc!r}") from exc
    else:
        if desc.encode() != data or compute_cid(data) != desc.cid:
            raise FuzzFailure("a decoded descriptor is not canonical")
    return len(whole)


def _varint_len(frame: bytes) -> int:
    i = 0
    while frame[i] & 0x80:
        i += 1
    return i + 1


# ------------------------------------------------------------------------- the node


class NodeFuzzer:
    """A node beside the world, fed one input at a time; invariants checked after each."""

    def __init__(self, world: World, *, seed: int = 0, reset_every: int = 5000) -> None:
        self.world = world
        self.seed = seed
        self.reset_every = reset_every
        self.inputs = 0
        self.rpcs = 0
        self.remote_errors = 0
        self.dropped: dict[str, int] = {}
        self.disconnects = 0
        self._reset()

    def _reset(self) -> None:
        w = self.world
        self.now = T0 + 100.0
        self.me = w.peers[0]
        self.node = PulsarcastNode(
            peer_id=self.me, config=FUZZ_CONFIG, rng=random.Random(self.seed), now=self.now
        )
        self.key = w.keys[self.me]
        self.node.set_known_peers(self.now, w.peers[1:])
        self.node.create_topic(self.now, "mine")
        for topic in w.topics:
            self.node.subscribe(self.now, topic)
        self._pump()
        self.fed = 0

    def _pump(self) -> None:
        """Carry out outputs: answer fetches from the world store, check every output."""
        for _ in range(64):
            outs = self.node.take_outputs()
            if not outs:
                return
            for out in outs:
                if isinstance(out, FetchBlock):
                    self.node.block_fetched(self.now, out.cid, self.world.store.get(out.cid))
                elif isinstance(out, SignRequest):
                    self.node.signed(self.now, out.request_id, self.key.sign(out.data))
                elif isinstance(out, OperationDone):
                    if out.error is not None:
                        raise FuzzFailure(f"an operation of the node failed: {out.error}")
                elif isinstance(out, SendRpc):
                    if out.peer == self.me or out.data != encode_frame(out.rpc):
                        raise FuzzFailure(f"bad SendRpc to {out.peer}: {out.rpc.op}")
                elif isinstance(out, StoreBlock):
                    if compute_cid(out.data) != out.cid:
                        raise FuzzFailure("StoreBlock with a CID that does not match its bytes")
                elif isinstance(out, DisconnectPeer):
                    if out.peer == self.me or out.until <= self.now:
                        raise FuzzFailure(f"bad DisconnectPeer {out}")
                    self.disconnects += 1
                elif isinstance(out, MetricRecord) and out.kind == RecordKind.EVENT_DROPPED:
                    reason = str(out.fields.get("reason"))
                    self.dropped[reason] = self.dropped.get(reason, 0) + 1
        raise FuzzFailure("outputs did not settle within 64 rounds")

    def one_input(self, data: bytes) -> None:
        """Byte 0: sending peer; byte 1: time step (0.1 s units); the rest: the stream."""
        if self.fed >= self.reset_every:
            self._reset()
        self.fed += 1
        self.inputs += 1
        if len(data) < 2:
            return
        w = self.world
        peer = w.peers[1 + data[0] % (len(w.peers) - 1)]
        self.now += data[1] / 10.0
        dec = FrameDecoder(max_frame_size=self.node.config.max_frame_size)
        try:
            rpcs = dec.feed(data[2:])
        except RemoteProtocolError:
            self.remote_errors += 1
            rpcs = []
        except Exception as exc:
            raise FuzzFailure(f"FrameDecoder raised {exc!r}") from exc
        for rpc in rpcs:
            self.rpcs += 1
            try:
                self.node.receive_rpc(self.now, peer, rpc)
            except Exception as exc:
                raise FuzzFailure(f"receive_rpc({rpc.op}) raised {exc!r}") from exc
        timer = self.node.get_timer()
        if timer is not None and timer <= self.now:
            try:
                self.node.handle_timer(self.now)
            except Exception as exc:
                raise FuzzFailure(f"handle_timer raised {exc!r}") from exc
        self._pump()
        self.check_invariants()

    def check_invariants(self) -> None:
        node, c = self.node, self.node.config
        mem = node.memory_usage
        bounds = {
            "seen": c.seen_cache_size,
            "delivered": c.delivered_cache_size,
            "events": c.event_cache_size,
            "fetches": c.max_pending_fetches,
            "waiting": c.max_waiting_events,
        }
        for name, bound in bounds.items():
            if not 0 <= mem[name] <= bound:
                raise FuzzFailure(f"memory_usage[{name}] = {mem[name]} outside [0, {bound}]")
        waiting = sum(len(v) for v in node._waiting.values())
        if waiting != mem["waiting"]:
            raise FuzzFailure(f"waiting count {mem['waiting']} != {waiting} parked events")
        timer = node.get_timer()
        if timer is not None and not math.isfinite(timer):
            raise FuzzFailure(f"timer {timer!r}")
        if len(node._trees) > c.max_topics:
            raise FuzzFailure(f"{len(node._trees)} trees over max_topics")
        banned = {p for p, until in node.banned_peers.items() if until > self.now}
        for key, tree in node._trees.items():
            if banned & set(tree.neighbours()):
                raise FuzzFailure(f"tree {key}: a banned peer is still a neighbour")
            st = node.topic_state(key)
            if st.topic_cid != key or self.me in st.children or st.parent == self.me:
                raise FuzzFailure(f"tree {key}: self among its neighbours")
            if st.parent is not None and st.parent in st.children:
                raise FuzzFailure(f"tree {key}: parent {st.parent} is also a child")
            if st.parent is not None and not st.joined:
                raise FuzzFailure(f"tree {key}: a parent but not joined")
            if len(st.heads) > c.heads_size:
                raise FuzzFailure(f"tree {key}: {len(st.heads)} heads")
            if tree.author == self.me and st.role != "root":
                raise FuzzFailure(f"tree {key}: the author is not root")
            for v in tree.versions:
                if node._version_of.get(v) != key:
                    raise FuzzFailure(f"tree {key}: version {v} not mapped to it")


def _self_check() -> None:  # pragma: no cover - a quick manual smoke run
    world = build_world()
    rng = random.Random(1)
    fz = NodeFuzzer(world)
    for _ in range(2000):
        data = random_frames(rng, world)
        codec_one_input(data)
        fz.one_input(bytes((rng.randrange(256), rng.randrange(40))) + data)
    print(fz.inputs, fz.rpcs, fz.remote_errors, fz.dropped)


if __name__ == "__main__":  # pragma: no cover
    _self_check()
