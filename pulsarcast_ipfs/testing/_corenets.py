"""Small pure-core networks (:class:`CoreNet`) set up the way several core tests need them.

:class:`SigningWorld`: six signing nodes and two topics, one open, one restricted, with a
MALLORY that sends attacks straight to a subscriber. :func:`delegate` and
:func:`delegated_event`: delegated signing keys and events signed with them.
:func:`subscribed_tree` and :func:`below_a_relay`: a topic's tree, and a member whose parent
is a relay. :func:`orphaned_topic`: a topic whose author crashed for good, with its holders.
:data:`GOLDEN_SCENARIOS`: the seeded scenarios whose emitted bytes the core's refactors must
keep. :class:`FetchLog`: a CoreNet that remembers every block fetch.
"""

from __future__ import annotations

from collections.abc import Callable

from pulsarcast_ipfs.core import (
    DELEGATED_VERSION,
    SIGNED_VERSION,
    DelegateKey,
    Delegation,
    Ed25519Signer,
    Event,
    EventDescriptor,
    FetchBlock,
    NodeConfig,
    PeerPolicy,
    TopicOptions,
    cid_str,
    format_created,
)
from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.core.testing import CoreNet
from pulsarcast_ipfs.kademlia import peer_position
from pulsarcast_ipfs.records import RecordKind

__all__ = [
    "DELEGATE_SEED_A",
    "DELEGATE_SEED_B",
    "GOLDEN_SCENARIOS",
    "ORPHAN_EVENTS",
    "FetchLog",
    "SigningWorld",
    "below_a_relay",
    "delegate",
    "delegated_event",
    "orphaned_topic",
    "relay_below_author",
    "subscribed_tree",
    "xor_distance",
]


class SigningWorld:
    """Six signing nodes: author, allowed publisher, requester, two subscribers, MALLORY."""

    def __init__(self) -> None:
        self.net = CoreNet(6, seed=21, signatures=True)
        p = self.net.peers
        self.author, self.allowed, self.requester, self.sub, self.other, self.mallory = p
        self.open: CID = self.net.call(self.author, "create_topic", "open")
        self.restricted: CID = self.net.call(
            self.author,
            "create_topic",
            "restricted",
            options=TopicOptions(
                allowed_publishers=PeerPolicy(enabled=True, peers=(self.allowed,)),
                request_to_publish=PeerPolicy(enabled=True, peers=(self.requester,)),
            ),
        )
        for peer in (self.allowed, self.requester, self.sub, self.other):
            self.net.call(peer, "subscribe", self.open)
            self.net.call(peer, "subscribe", self.restricted)
        self.net.run_for(5)
        assert self.net.nodes[self.sub].topic_state(self.restricted).joined

    def key(self, peer: str) -> Ed25519Signer:
        return self.net.signers[peer]

    def event(
        self,
        topic: CID,
        *,
        author: str,
        publisher: str,
        payload: bytes,
        author_key: Ed25519Signer | None = None,
        publisher_key: Ed25519Signer | None = None,
        version: CID | None = None,
    ) -> EventDescriptor:
        draft = EventDescriptor(
            topic=version if version is not None else topic,
            author=author,
            publisher=publisher,
            payload=payload,
            created=format_created(self.net.now),
            protocol_version=SIGNED_VERSION,
        )
        akey = author_key or self.key(author)
        pkey = publisher_key or self.key(publisher)
        return draft.with_signatures(
            author=akey.sign(draft.author_statement(topic)),
            publisher=pkey.sign(draft.signing_bytes()),
        )

    def attack(self, topic: CID, ev: EventDescriptor, block: bytes | None = None) -> list[str]:
        """MALLORY sends ``ev`` straight to SUB; the reasons SUB dropped it for."""
        before = len(self.net.logs[self.sub].sent)
        self.net.inject(
            self.mallory, self.sub, Event(topic=topic, event=ev.encode(), topic_block=block)
        )
        self.net.run_for(3)
        forwarded = [
            s
            for s in self.net.logs[self.sub].sent[before:]
            if isinstance(s.rpc, Event) and s.rpc.event == ev.encode()
        ]
        assert forwarded == [], "a refused event was forwarded"
        for peer in self.net.peers:
            assert ev.cid not in self.net.delivered(peer), f"{peer} delivered a refused event"
        return [
            str(r.fields["reason"])
            for r in self.net.records(self.sub, RecordKind.EVENT_DROPPED)
            if r.fields.get("event") == cid_str(ev.cid)
        ]


DELEGATE_SEED_A = bytes(range(32))


DELEGATE_SEED_B = bytes(range(1, 33))


def delegate(
    net: CoreNet, peer: str, *, seed: bytes = DELEGATE_SEED_A, ttl: float = 3600
) -> DelegateKey:
    """``peer``'s Kubo key (its test signer) delegates to a key made from ``seed``."""
    key = DelegateKey(seed)
    expires = int(net.now + ttl)
    sig = net.signers[peer].sign(key.statement(peer, expires))
    return key.with_delegation(Delegation(key=key.public_key, expires=expires, signature=sig))


def delegated_event(
    w: SigningWorld,
    publisher: str,
    key: DelegateKey,
    *,
    payload: bytes,
    created: float | None = None,
) -> EventDescriptor:
    draft = EventDescriptor(
        topic=w.open,
        author=publisher,
        publisher=publisher,
        payload=payload,
        created=format_created(w.net.now if created is None else created),
        protocol_version=DELEGATED_VERSION,
    )
    return draft.with_signatures(
        author=key.sign(draft.author_statement(w.open)),
        publisher=key.sign(draft.signing_bytes()),
        delegation=key.delegation,
    )


ORPHAN_EVENTS = 10


def orphaned_topic(
    seed: int, *, flat: bool = True
) -> tuple[CoreNet, CID, list[str], list[str], list[CID]]:
    """12 nodes with one peer per k-bucket (the cluster's ``routing_k=1``); the two
    nodes farthest from the author subscribe, get 10 events, then the author crashes
    for good and the tree re-forms without it. Returns the net, the topic, the holders,
    the other live nodes (farthest from the author last) and the events. ``flat``
    False: no flat trees (``flat_fanout=0``), relays stay between holders and root."""
    config = NodeConfig() if flat else NodeConfig(flat_fanout=0)
    net = CoreNet(12, seed=seed, bucket_size=1, config=config)
    author = net.peers[0]
    topic = net.call(author, "create_topic", "orphan")
    net.run_for(0.5)
    apos = peer_position(author)
    others = sorted(net.peers[1:], key=lambda p: peer_position(p) ^ apos)
    holders = others[-2:]
    for h in holders:
        net.call(h, "subscribe", topic)
    net.run_for(3)
    cids = [net.call(author, "publish", topic, b"%d" % i).event_cid for i in range(ORPHAN_EVENTS)]
    net.run_for(3)
    net.crash(author)
    net.run_for(30)
    return net, topic, holders, others[:-2], cids


def xor_distance(peer: str, author: str) -> int:
    return peer_position(peer) ^ peer_position(author)


def subscribed_tree(
    n: int = 12,
    *,
    seed: int = 1,
    options: TopicOptions | None = None,
    subs: int | None = None,
    **kw: object,
) -> tuple[CoreNet, CID, str, list[str]]:
    net = CoreNet(n, seed=seed, **kw)  # type: ignore[arg-type]
    author = net.peers[0]
    topic = net.call(author, "create_topic", "news", options=options)
    net.run_for(0.5)
    members = net.peers[1 : (subs or n)]
    for p in members:
        net.call(p, "subscribe", topic)
    net.run_for(3)
    return net, topic, author, members


def relay_below_author(net: CoreNet, topic: CID, author: str, members: list[str]) -> str:
    """A member whose parent is a relay (not the author) that has a closer alternative."""
    return next(
        p
        for p in members
        if (parent := net.nodes[p].topic_state(topic).parent) not in (None, author)
        and any(
            xor_distance(q, author) < xor_distance(p, author)
            for q in net.peers
            if q not in (p, parent)
        )
    )


def below_a_relay(*, ping_interval: float = 1.0) -> tuple[CoreNet, CID, str, list[str], str, str]:
    """A 30-node tree, a member ``child`` and its relay parent ``slow`` (not the author;
    ``child`` has another peer closer to the author). ``dead_after=10``: within the
    few seconds these tests run, only lag (not silence) can move anyone. Flat trees
    off (``flat_fanout=0``): the relay must stay between the child and the root."""
    cfg = NodeConfig(
        ping_interval=ping_interval, dead_after=10, slow_parent_after=0.5, flat_fanout=0
    )
    net, topic, author, members = subscribed_tree(30, config=cfg, bucket_size=4)
    child = relay_below_author(net, topic, author, members)
    slow = net.nodes[child].topic_state(topic).parent
    assert slow is not None
    return net, topic, author, members, child, slow


def _busy() -> CoreNet:
    """Two topics with subscribers, a sub-topic, updates, requests to publish, loss, a
    lagging link, crashes (a relay, then the author) and restarts, a reader."""
    net = CoreNet(24, seed=11, loss=0.02, bucket_size=3)
    author, other = net.peers[0], net.peers[1]
    opts = TopicOptions(
        allowed_publishers=PeerPolicy(enabled=True), request_to_publish=PeerPolicy(enabled=True)
    )
    open_topic = net.call(author, "create_topic", "open")
    closed = net.call(other, "create_topic", "closed", options=opts)
    sub = net.call(author, "create_topic", "open-sub", parent=open_topic)
    net.run_for(1)
    closed_subs = []
    for i, p in enumerate(net.peers[2:]):
        net.call(p, "subscribe", open_topic)
        if i % 2:
            net.call(p, "subscribe", closed)
            closed_subs.append(p)
        if i % 5 == 0:
            net.call(p, "subscribe", sub)
    net.run_for(5)
    slow = net.peers[5]
    net.extra_delay = lambda a, b: 1.5 if slow in (a, b) else 0.0
    for i in range(30):
        p = net.peers[2 + (i * 7) % 22]
        net.call(p, "publish", open_topic, b"open %d" % i)
        if i % 3 == 0:
            q = closed_subs[i % len(closed_subs)]
            net.call(q, "publish", closed, b"closed %d" % i)
        net.run_for(0.3)
    net.call(author, "update_topic", open_topic, options=TopicOptions())
    net.call(author, "publish", sub, b"sub")
    net.run_for(5)
    net.extra_delay = None
    net.crash(net.peers[7])
    for i in range(10):
        net.call(net.peers[3 + i], "publish", open_topic, b"after crash %d" % i)
        net.run_for(0.5)
    net.run_for(10)
    net.revive(net.peers[7])
    net.call(net.peers[4], "unsubscribe", open_topic)
    net.call(closed_subs[3], "unsubscribe", closed)
    net.crash(author)
    net.run_for(40)
    net.call(net.peers[12], "publish", open_topic, b"orphaned")
    net.run_for(5)
    holders = [p for p in net.peers[2:] if p != net.peers[4]][:3]
    reader = net.peers[4]
    net.call(reader, "read", open_topic, holders=holders)
    net.run_for(20)
    net.revive(author)
    net.call(author, "publish", open_topic, b"back")
    net.run_for(40)
    return net


def _signed() -> CoreNet:
    """Signatures on: topics, publish, a request to publish, an update."""
    net = CoreNet(8, seed=4, signatures=True)
    author = net.peers[0]
    opts = TopicOptions(
        allowed_publishers=PeerPolicy(enabled=True), request_to_publish=PeerPolicy(enabled=True)
    )
    topic = net.call(author, "create_topic", "signed", options=opts)
    net.run_for(1)
    for p in net.peers[1:]:
        net.call(p, "subscribe", topic)
    net.run_for(3)
    for i in range(6):
        net.call(net.peers[i % 8], "publish", topic, b"s %d" % i)
        net.run_for(0.5)
    net.call(author, "update_topic", topic, options=TopicOptions())
    net.run_for(2)
    net.call(net.peers[3], "publish", topic, b"after update")
    net.run_for(10)
    return net


def _orphan() -> CoreNet:
    """One peer per k-bucket, the author gone for good, a stranger reads below a
    holder then subscribes (tests/test_core_readers.py)."""
    net, topic, holders, rest, _ = orphaned_topic(3)
    others = rest + holders  # the live nodes, farthest from the author last
    stranger = others[len(others) // 2 - 2]
    net.call(stranger, "read", topic, holders=holders)
    net.run_for(10)
    net.call(stranger, "subscribe", topic)
    net.run_for(NodeConfig().root_recheck_interval + 5)
    net.call(holders[0], "publish", topic, b"live")
    net.run_for(5)
    return net


GOLDEN_SCENARIOS: dict[str, Callable[[], CoreNet]] = {
    "busy": _busy,
    "signed": _signed,
    "orphan": _orphan,
}


class FetchLog(CoreNet):
    """CoreNet that remembers every block fetch: (peer, CID)."""

    def __init__(self, *args: object, **kw: object) -> None:
        self.fetched: list[tuple[str, CID]] = []
        super().__init__(*args, **kw)  # type: ignore[arg-type]

    def on_fetch_block(self, i: int, out: FetchBlock) -> None:
        self.fetched.append((self.peers[i], out.cid))
        super().on_fetch_block(i, out)
