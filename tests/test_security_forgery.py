"""Forged, tampered, unauthorised and replayed events are refused at the first hop
with the reason counted in ``event_dropped`` records, and never stored,
forwarded or delivered. Pure core; the real-network version of the unauthorised
case is ``tests/test_e2e_sidecar.py::test_allowed_publishers_and_request_to_publish``.

These pure tests run unsigned (2.0.0) nodes; what signatures add (forged author or
publisher, tampered payload, unsigned events) is in ``tests/test_core_signatures.py``
and, over real Kubo daemons and sidecars, in ``test_signed_cluster_*`` below."""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator, Sequence

import anyio
import pytest

from pulsarcast_ipfs.cluster import LocalSidecarCluster
from pulsarcast_ipfs.core import (
    ONE_SIGNATURE_VERSION,
    SIGNED_VERSION,
    Deliver,
    Event,
    EventDescriptor,
    FetchBlock,
    Join,
    JoinAck,
    PeerPolicy,
    PulsarcastNode,
    SendRpc,
    StoreBlock,
    TopicDescriptor,
    TopicOptions,
    author_statement,
    cid_str,
    encode_frame,
    format_created,
)
from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.core.testing import make_peer_ids
from pulsarcast_ipfs.kubo import KuboClient, KuboConfig
from pulsarcast_ipfs.records import MetricRecord, RecordKind
from pulsarcast_ipfs.testing import Scrape, wait_until

T0 = 1_800_000_000.0
AUTHOR, ME, ALLOWED, MALLORY, CHILD = make_peer_ids(5, seed=77)
TOPIC = TopicDescriptor.new(
    name="restricted",
    author=AUTHOR,
    now=T0,
    options=TopicOptions(allowed_publishers=PeerPolicy(enabled=True, peers=(ALLOWED,))),
)


def _subscribed_node() -> PulsarcastNode:
    """ME subscribed to TOPIC with AUTHOR as parent and CHILD below it."""
    node = PulsarcastNode(peer_id=ME, rng=random.Random(1), now=T0)
    node.set_known_peers(T0, [AUTHOR, ALLOWED, MALLORY, CHILD])
    node.subscribe(T0, TOPIC.cid)
    for _ in range(4):
        for out in node.take_outputs():
            if isinstance(out, FetchBlock) and out.cid == TOPIC.cid:
                node.block_fetched(T0, out.cid, TOPIC.encode())
            elif isinstance(out, FetchBlock):
                node.block_fetched(T0, out.cid, None)
            elif isinstance(out, SendRpc) and isinstance(out.rpc, Join):
                node.receive_rpc(T0, out.peer, JoinAck(topic=TOPIC.cid, ok=True))
    node.receive_rpc(T0, CHILD, Join(topic=TOPIC.cid, descriptor=TOPIC.encode()))
    node.take_outputs()
    return node


def _event(publisher: str, payload: bytes, *, topic: TopicDescriptor = TOPIC) -> EventDescriptor:
    return EventDescriptor(
        topic=topic.cid,
        author=publisher,
        publisher=publisher,
        payload=payload,
        created=format_created(T0 + 1),
    )


def _outcome(outs: Sequence[object]) -> tuple[list[str], bool]:
    """(drop reasons, whether anything was stored, forwarded or delivered)."""
    reasons = [
        str(o.fields["reason"])
        for o in outs
        if isinstance(o, MetricRecord) and o.kind == RecordKind.EVENT_DROPPED
    ]
    acted = any(
        isinstance(o, StoreBlock | Deliver) or (isinstance(o, SendRpc) and isinstance(o.rpc, Event))
        for o in outs
    )
    return reasons, acted


def test_control_an_allowed_event_is_accepted_forwarded_and_delivered() -> None:
    node = _subscribed_node()
    node.receive_rpc(T0 + 1, AUTHOR, Event(topic=TOPIC.cid, event=_event(ALLOWED, b"ok").encode()))
    reasons, acted = _outcome(node.take_outputs())
    assert reasons == [] and acted


def test_unauthorised_publisher_refused() -> None:
    node = _subscribed_node()
    rpc = Event(topic=TOPIC.cid, event=_event(MALLORY, b"spam").encode())
    node.receive_rpc(T0 + 1, MALLORY, rpc)  # straight from the attacker
    node.receive_rpc(T0 + 1, AUTHOR, rpc)  # or relayed by a careless parent
    assert _outcome(node.take_outputs()) == (["not_allowed", "not_allowed"], False)


def test_forged_topic_version_refused() -> None:
    """A 'new version' of the topic by MALLORY that allows MALLORY to publish."""
    forged = TopicDescriptor.new(
        name="restricted",
        author=MALLORY,
        now=T0 + 1,
        parent=TOPIC.cid,
        options=TopicOptions(allowed_publishers=PeerPolicy(enabled=True, peers=(MALLORY,))),
    )
    node = _subscribed_node()
    ev = _event(MALLORY, b"spam", topic=forged)
    node.receive_rpc(
        T0 + 1, AUTHOR, Event(topic=TOPIC.cid, event=ev.encode(), topic_block=forged.encode())
    )
    assert _outcome(node.take_outputs()) == (["wrong_topic"], False)


@pytest.mark.parametrize("where", ["encoding", "publisher", "topic_block"])
def test_tampered_bytes_refused(where: str) -> None:
    node = _subscribed_node()
    good = _event(ALLOWED, b"original").encode()
    if where == "encoding":
        # Bytes changed so that the block is no longer a canonical event descriptor.
        rpc = Event(topic=TOPIC.cid, event=good[:-3] + b"\xff\xff\xff")
        expected = "invalid"
    elif where == "publisher":
        data = good.replace(ALLOWED.encode(), MALLORY.encode())
        rpc = Event(topic=TOPIC.cid, event=data)
        expected = "not_allowed"
    else:
        v2 = TopicDescriptor.new(
            name="restricted",
            author=AUTHOR,
            now=T0 + 1,
            parent=TOPIC.cid,
            options=TopicOptions(allowed_publishers=PeerPolicy(enabled=True, peers=(ALLOWED,))),
        )
        # The event names version v2, but the block sent as v2 is altered (CID mismatch).
        tampered = v2.encode().replace(ALLOWED.encode(), MALLORY.encode())
        ev = _event(MALLORY, b"spam", topic=v2)
        rpc = Event(topic=TOPIC.cid, event=ev.encode(), topic_block=tampered)
        expected = "wrong_topic"
    node.receive_rpc(T0 + 1, AUTHOR, rpc)
    assert _outcome(node.take_outputs()) == ([expected], False)


def test_replayed_event_is_a_duplicate() -> None:
    node = _subscribed_node()
    rpc = Event(topic=TOPIC.cid, event=_event(ALLOWED, b"once").encode())
    node.receive_rpc(T0 + 1, AUTHOR, rpc)
    assert _outcome(node.take_outputs())[1]
    for t in (T0 + 2, T0 + 3600):
        node.receive_rpc(t, AUTHOR, rpc)
        node.receive_rpc(t, CHILD, rpc)
        assert _outcome(node.take_outputs()) == (["duplicate", "duplicate"], False)


# -- over real Kubo daemons and sidecars (signatures on by default) ------------------------

PROTOCOL = "/x/pulsarcast/2.12.0"


@pytest.fixture(scope="module")
async def signed_cluster(anyio_backend: str) -> AsyncIterator[LocalSidecarCluster]:
    """Sidecars on Kubo 0 and 1; Kubo 2 is a bare attacker with its own key."""
    async with LocalSidecarCluster(nodes=3, sidecars=[0, 1], run="signatures") as cluster:
        yield cluster


def _dropped(metrics: str) -> dict[str, float]:
    scrape = Scrape.parse(metrics)
    return {
        s.labels["reason"]: s.value
        for s in scrape.family("pulsarcast_events_dropped_total").samples
    }


@pytest.mark.cluster
@pytest.mark.kubo
@pytest.mark.anyio
async def test_signed_cluster_delivers_signed_and_refuses_forged_at_the_first_hop(
    signed_cluster: LocalSidecarCluster,
) -> None:
    sc = signed_cluster
    attacker = sc.cluster[2]
    async with sc.client(0) as api0, sc.client(1) as api1:
        r = await api0.post("/v1/topics", json={"name": "signed"})
        assert r.status_code == 201, r.text
        topic = r.json()["cid"]
        assert (await api1.post(f"/v1/topics/{topic}/subscribe")).status_code == 200

        async def joined() -> bool:
            st = (await api1.get("/v1/status")).json()
            return any(t["root_cid"] == topic and t["parent"] for t in st["topics"])

        await wait_until(joined, deadline=60, what="sidecar 1 to join", interval=0.2)
        r = await api0.post(
            f"/v1/topics/{topic}/publish", json={"ack": "local", "text": "signed hello"}
        )
        assert r.status_code == 200 and r.json()["status"] == "published", r.text
        good = r.json()["event"]

        async def deliveries() -> list[dict[str, object]]:
            r = await api1.get("/v1/deliveries", params={"after": 0, "follow": "false"})
            return [json.loads(x) for x in r.text.splitlines() if x.strip()]

        async def delivered() -> bool:
            return any(d["cid"] == good for d in await deliveries())

        await wait_until(delivered, deadline=30, what="the signed event", interval=0.2)
        (got,) = [d for d in await deliveries() if d["cid"] == good]
        # Signed by the sidecar's delegated key (Kubo signed its delegation once), one
        # signature for author and publisher.
        assert got["protocol_version"] == ONE_SIGNATURE_VERSION

        # The attacker: its own valid key (Kubo key/sign), straight to sidecar 1 over p2p.
        async with KuboClient(config=KuboConfig(base_url=attacker.api_url)) as kubo:
            real = EventDescriptor.decode(await kubo.block_get(good, max_wait=30))
            root = CID.decode(topic)
            author = sc.cluster[0].peer_id
            unsigned = EventDescriptor(
                topic=root,
                author=attacker.peer_id,
                publisher=attacker.peer_id,
                payload=b"unsigned",
                created=real.created,
            )
            tampered = EventDescriptor(
                topic=real.topic,
                author=real.author,
                publisher=real.publisher,
                parents=real.parents,
                clock=real.clock,
                payload=b"tampered",
                created=real.created,
                protocol_version=ONE_SIGNATURE_VERSION,
                author_signature=real.author_signature,
                publisher_signature=real.publisher_signature,
                delegation=real.delegation,
            )
            draft = EventDescriptor(
                topic=root,
                author=author,
                publisher=attacker.peer_id,
                payload=b"in the author's name",
                created=real.created,
                protocol_version=SIGNED_VERSION,
            )
            statement = author_statement(
                tree=root, author=author, created=draft.created, payload=draft.payload
            )
            forged = draft.with_signatures(
                author=(await kubo.key_sign(statement)).signature,  # the attacker's key
                publisher=(await kubo.key_sign(draft.signing_bytes())).signature,
            )
            attacks = [unsigned, tampered, forged]
            frames = b"".join(encode_frame(Event(topic=root, event=ev.encode())) for ev in attacks)
            port = _free_port()
            await kubo.p2p_forward(PROTOCOL, f"/ip4/127.0.0.1/tcp/{port}", sc.cluster[1].peer_id)
            async with await anyio.connect_tcp("127.0.0.1", port) as s:
                await s.send(frames)

                async def counted() -> bool:
                    d = _dropped((await api1.get("/metrics")).text)
                    return d.get("unsigned", 0) >= 1 and d.get("bad_signature", 0) >= 2

                await wait_until(counted, deadline=30, what="the refusals counted", interval=0.2)
        cids = {cid_str(ev.cid) for ev in attacks}
        assert not cids & {str(d["cid"]) for d in await deliveries()}
        # Never forwarded: sidecar 0 (the root, sidecar 1's only neighbour) did not
        # hear of them either.
        m0 = (await api0.get("/metrics")).text
        d0 = _dropped(m0)
        assert d0.get("unsigned", 0) == 0 and d0.get("bad_signature", 0) == 0
        # sidecar 0 signed the topic and its delegation through Kubo key/sign
        counters = Scrape.parse(m0)
        assert counters.value("pulsarcast_signatures_total") >= 2
        assert counters.value("pulsarcast_delegations_total") == 1
        assert counters.value("pulsarcast_sign_failures_total") == 0


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
