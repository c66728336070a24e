"""Attributes on events: in the descriptor, signed and content-addressed.

protocolVersion 2.0.1 (unsigned) / 2.1.1 (signed) carry an ``attributes`` map; an
event without attributes is written exactly as before (2.0.0 / 2.1.0, same bytes,
same CID). Bad attributes from the network are a ``DescriptorError`` (or a
``RemoteProtocolError`` in a REQUEST_TO_PUBLISH) saying what is wrong.
"""

from __future__ import annotations

from typing import Any

import dag_cbor
import pytest

from pulsarcast_ipfs.core import (
    ATTRIBUTES_VERSION,
    PROTOCOL_VERSION,
    SIGNED_ATTRIBUTES_VERSION,
    SIGNED_VERSION,
    DescriptorError,
    EventDescriptor,
    InvalidAttributes,
    LocalProtocolError,
    PeerPolicy,
    PublishResult,
    RemoteProtocolError,
    RequestToPublish,
    TopicDescriptor,
    TopicOptions,
    cid_str,
    decode_descriptor,
    decode_rpc,
    encode_rpc,
    event_version,
    format_created,
)
from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.core.testing import CoreNet, make_peer_ids
from pulsarcast_ipfs.records import RecordKind

P = make_peer_ids(3, seed=15)
TOPIC = TopicDescriptor.new(name="t", author=P[0], now=1_767_225_600.0)
BASE: dict[str, Any] = {
    "topic": TOPIC.cid,
    "author": P[1],
    "publisher": P[2],
    "payload": b"hello",
    "created": format_created(1_767_225_600.5),
}
SIGS: dict[str, Any] = {"author_signature": b"a" * 64, "publisher_signature": b"p" * 64}
ATTRS = {"ups": 12, "downs": 0, "score": -0.5, "user": "alice"}


def test_events_without_attributes_keep_their_bytes_and_cids() -> None:
    """CIDs computed by the code before attributes existed (same inputs; main at the
    merge of the delegated keys and the one peer-ID generator)."""
    e0 = EventDescriptor(**BASE)
    e1 = EventDescriptor(**BASE, parents=(e0.cid,), clock=1)
    e2 = EventDescriptor(**BASE, protocol_version=SIGNED_VERSION, **SIGS)
    assert cid_str(e0.cid) == "bafyreiciw75cqlx7kc342qsndipsnt57usadnssn3pxd5dfk6c52kk72km"
    assert cid_str(e1.cid) == "bafyreiasbnzvmqwitxakhuakfbuva6uofa2qoyica4tilxx2lvagcmcjea"
    assert cid_str(e2.cid) == "bafyreifn3cpmrqb6okehmx6zvgrcm6bb22gqmlbm6clx3efhne2xaazote"
    for e in (e0, e1, e2):
        assert "attributes" not in dag_cbor.decode(e.encode())
        assert e.attributes is None


@pytest.mark.parametrize(("signed", "version"), [(False, "2.0.1"), (True, "2.1.1")])
def test_attributes_are_in_the_block_and_round_trip(signed: bool, version: str) -> None:
    assert event_version(signed=signed, attributes=True) == version
    sigs = SIGS if signed else {}
    ev = EventDescriptor(**BASE, protocol_version=version, attributes=ATTRS, **sigs)
    raw = dag_cbor.decode(ev.encode())
    assert isinstance(raw, dict) and raw["attributes"] == ATTRS
    back = decode_descriptor(ev.encode(), expected_cid=ev.cid)
    assert isinstance(back, EventDescriptor) and dict(back.attributes or {}) == ATTRS
    assert isinstance(back.attributes["score"], float)  # type: ignore[index]
    assert back.cid == ev.cid
    other = EventDescriptor(
        **BASE, protocol_version=version, attributes={**ATTRS, "ups": 13}, **sigs
    )
    assert other.cid != ev.cid  # content-addressed
    assert other.signing_bytes() != ev.signing_bytes()  # the publisher signs them
    assert other.author_statement(TOPIC.cid) != ev.author_statement(TOPIC.cid)  # the author too
    with pytest.raises(TypeError):
        ev.attributes["ups"] = 1  # type: ignore[index]  # read-only: the CID is of these


def test_the_author_statement_without_attributes_is_unchanged() -> None:
    plain = EventDescriptor(**BASE)
    assert dag_cbor.decode(plain.author_statement(TOPIC.cid)) == {
        "tree": TOPIC.cid,
        "author": BASE["author"],
        "created": BASE["created"],
        "payload": b"hello",
    }


def _tampered(version: str, attributes: object, *, drop: bool = False) -> bytes:
    ev = EventDescriptor(**BASE, protocol_version=ATTRIBUTES_VERSION, attributes={"a": 1})
    obj = dag_cbor.decode(ev.encode())
    assert isinstance(obj, dict)
    obj["metadata"]["protocolVersion"] = version  # type: ignore[index]
    if drop:
        del obj["attributes"]
    else:
        obj["attributes"] = attributes
    return dag_cbor.encode(obj)


def _inf() -> bytes:
    """An attribute of +infinity (dag-cbor itself forbids it; so does the decoder)."""
    data = _tampered(ATTRIBUTES_VERSION, {"a": 1.5})
    one_and_a_half = b"\xfb\x3f\xf8\x00\x00\x00\x00\x00\x00"
    assert data.count(one_and_a_half) == 1
    return data.replace(one_and_a_half, b"\xfb\x7f\xf0\x00\x00\x00\x00\x00\x00")


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (_tampered(PROTOCOL_VERSION, {"a": 1}), "unknown fields ['attributes']"),
        (_tampered(ATTRIBUTES_VERSION, None, drop=True), "missing fields ['attributes']"),
        (_tampered(ATTRIBUTES_VERSION, {}), "an event without attributes has no map"),
        (_tampered(ATTRIBUTES_VERSION, [["a", 1]]), "attributes: expected a map"),
        (_tampered(ATTRIBUTES_VERSION, {"a": True}), "a bool is not a number"),
        (_inf(), "forbids NaN and infinities"),
        (_tampered(ATTRIBUTES_VERSION, {"a": {"b": 1}}), "string or a finite number"),
        (_tampered(ATTRIBUTES_VERSION, {"a": None}), "string or a finite number"),
        (_tampered(ATTRIBUTES_VERSION, {"a": 2**60}), "2**53"),
        (_tampered(ATTRIBUTES_VERSION, {"1a": 1}), "attribute name '1a'"),
        (_tampered(ATTRIBUTES_VERSION, {"in": 1}), "keyword"),
        (_tampered(ATTRIBUTES_VERSION, {f"a{i}": i for i in range(17)}), "at most 16"),
        (_tampered(ATTRIBUTES_VERSION, {"a": "x" * 300}), "longer than 256"),
        (_tampered(SIGNED_ATTRIBUTES_VERSION, {"a": 1}), "missing fields ['signatures']"),
        (_tampered("2.4.0", {"a": 1}), "unsupported protocolVersion '2.4.0'"),
    ],
)
def test_bad_attributes_from_the_network_are_descriptor_errors(data: bytes, says: str) -> None:
    with pytest.raises(DescriptorError) as info:
        decode_descriptor(data)
    assert says in str(info.value)


def test_topics_do_not_take_the_attribute_versions() -> None:
    obj = dag_cbor.decode(TOPIC.encode())
    assert isinstance(obj, dict)
    obj["metadata"]["protocolVersion"] = ATTRIBUTES_VERSION  # type: ignore[index]
    with pytest.raises(DescriptorError, match=r"unsupported protocolVersion '2\.0\.1'"):
        decode_descriptor(dag_cbor.encode(obj))


def test_local_misuse_is_local() -> None:
    with pytest.raises(LocalProtocolError, match="exactly by protocolVersion"):
        EventDescriptor(**BASE, attributes={"a": 1})  # 2.0.0 with attributes
    with pytest.raises(LocalProtocolError, match="exactly by protocolVersion"):
        EventDescriptor(**BASE, protocol_version=ATTRIBUTES_VERSION)  # without
    with pytest.raises(LocalProtocolError, match="bool is not a number"):
        EventDescriptor(**BASE, protocol_version=ATTRIBUTES_VERSION, attributes={"a": False})


# -- REQUEST_TO_PUBLISH ---------------------------------------------------------------------


def _request(attributes: dict[str, Any] | None) -> RequestToPublish:
    return RequestToPublish(
        topic=TOPIC.cid,
        descriptor=TOPIC.encode(),
        request_id="r/1",
        author=P[1],
        payload=b"x",
        created=BASE["created"],
        attributes=attributes,
    )


def test_a_request_without_attributes_keeps_the_old_shape() -> None:
    body = encode_rpc(_request(None))
    obj = dag_cbor.decode(body)
    assert isinstance(obj, dict) and "attributes" not in obj
    assert body == dag_cbor.encode(obj)  # the fast plan and the general encoder agree
    assert decode_rpc(body) == _request(None)
    with_attrs = encode_rpc(_request(ATTRS))
    back = decode_rpc(with_attrs)
    assert isinstance(back, RequestToPublish) and dict(back.attributes or {}) == ATTRS


@pytest.mark.parametrize(
    ("value", "says"),
    [(None, "left out, not null"), ({}, "empty map"), ({"a": True}, "bool is not")],
)
def test_bad_attributes_in_a_request_are_remote_errors(value: object, says: str) -> None:
    obj = dag_cbor.decode(encode_rpc(_request({"a": 1})))
    assert isinstance(obj, dict)
    obj["attributes"] = value
    with pytest.raises(RemoteProtocolError) as info:
        decode_rpc(dag_cbor.encode(obj))
    assert says in str(info.value)


# -- the node -------------------------------------------------------------------------------


@pytest.mark.parametrize("signatures", [False, True])
def test_published_attributes_reach_every_subscriber(signatures: bool) -> None:
    net = CoreNet(8, seed=4, signatures=signatures)
    author = net.peers[0]
    topic: CID = net.call(author, "create_topic", "reddit")
    for peer in net.peers:
        net.call(peer, "subscribe", topic)
    net.run_for(5)
    res = net.call(net.peers[3], "publish", topic, b"post", attributes=ATTRS)
    plain = net.call(net.peers[3], "publish", topic, b"plain", attributes={})
    assert isinstance(res, PublishResult) and res.event_cid is not None
    net.run_for(5)
    ev = decode_descriptor(net.store[res.event_cid])
    assert isinstance(ev, EventDescriptor)
    assert ev.protocol_version == event_version(signed=signatures, attributes=True)
    assert dict(ev.attributes or {}) == ATTRS
    ev_plain = decode_descriptor(net.store[plain.event_cid])
    assert ev_plain.protocol_version == event_version(signed=signatures, attributes=False)
    for peer in net.peers:
        got = [d for d in net.logs[peer].delivered if d[1] == res.event_cid]
        assert len(got) == 1, peer
    with pytest.raises(InvalidAttributes, match="bool"):
        net.call(author, "publish", topic, b"x", attributes={"a": True})


def test_a_request_to_publish_carries_attributes_signed_by_the_author() -> None:
    net = CoreNet(6, seed=21, signatures=True)
    author, allowed, requester = net.peers[:3]
    topic: CID = net.call(
        author,
        "create_topic",
        "restricted",
        options=TopicOptions(
            allowed_publishers=PeerPolicy(enabled=True, peers=(allowed,)),
            request_to_publish=PeerPolicy(enabled=True, peers=(requester,)),
        ),
    )
    for peer in net.peers:
        net.call(peer, "subscribe", topic)
    net.run_for(5)
    res = net.call(requester, "publish", topic, b"please", attributes={"ups": 3})
    assert res.status == "requested"
    net.run_for(5)
    published = [
        r
        for peer in net.peers
        for r in net.records(peer, RecordKind.EVENT_PUBLISHED)
        if r.fields.get("inject_id") == res.inject_id
    ]
    assert len(published) == 1
    ev = decode_descriptor(net.store[CID.decode(str(published[0].fields["event"]))])
    assert isinstance(ev, EventDescriptor) and ev.author == requester
    assert ev.protocol_version == SIGNED_ATTRIBUTES_VERSION
    assert dict(ev.attributes or {}) == {"ups": 3}
    for peer in net.peers:
        assert ev.cid in net.delivered(peer, topic), peer


def test_a_delegated_event_with_attributes_is_2_2_1() -> None:
    """Delegated signing keys (2.2.0) with attributes: 2.2.1, the delegation and the
    attributes both in the block; the decoder reads it back."""
    from pulsarcast_ipfs.core import DELEGATED_ATTRIBUTES_VERSION, Delegation

    assert event_version(signed=True, attributes=True, delegated=True) == "2.2.1"
    assert event_version(signed=True, attributes=False, delegated=True) == "2.2.0"
    base = {**BASE, "publisher": BASE["author"]}
    d = Delegation(key=b"k" * 32, expires=2_000_000_000, signature=b"s" * 64)
    ev = EventDescriptor(
        **base,
        protocol_version=DELEGATED_ATTRIBUTES_VERSION,
        attributes=ATTRS,
        delegation=d,
        **SIGS,
    )
    back = decode_descriptor(ev.encode(), expected_cid=ev.cid)
    assert isinstance(back, EventDescriptor)
    assert dict(back.attributes or {}) == ATTRS and back.delegation == d
