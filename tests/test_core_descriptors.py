"""Descriptors (docs/protocol.md §4): round trip, canonical bytes, strict decoding."""

from __future__ import annotations

import dag_cbor
import pytest
from _mf import to_mf
from hypothesis import given, settings
from hypothesis import strategies as st
from multiformats import CID, multihash

from pulsarcast_ipfs.core import (
    PROTOCOL_VERSION,
    DescriptorError,
    EventDescriptor,
    EventLinking,
    LocalProtocolError,
    PeerPolicy,
    RemoteProtocolError,
    TopicDescriptor,
    TopicOptions,
    compute_cid,
    decode_descriptor,
    format_created,
    parse_created,
)
from pulsarcast_ipfs.core.testing import make_peer_ids

PEERS = make_peer_ids(4, seed=7)
NOW = 1_767_225_600.123456


def topic(**kw: object) -> TopicDescriptor:
    meta = TopicDescriptor.new(name="meta-t", author=PEERS[0], now=NOW)
    args: dict[str, object] = {
        "name": "t",
        "author": PEERS[0],
        "now": NOW,
        "links": {"meta": meta.cid},
        "options": TopicOptions(
            allowed_publishers=PeerPolicy(enabled=True, peers=(PEERS[1],)),
            request_to_publish=PeerPolicy(enabled=True),
            event_linking=EventLinking.CUSTOM,
        ),
    }
    args.update(kw)
    return TopicDescriptor.new(**args)  # type: ignore[arg-type]


_C1, _C2 = compute_cid(b"one"), compute_cid(b"two")


def event(t: TopicDescriptor, **kw: object) -> EventDescriptor:
    args: dict[str, object] = {
        "topic": t.cid,
        "author": PEERS[2],
        "publisher": PEERS[1],
        "payload": b"hello",
        "created": format_created(NOW),
    }
    args.update(kw)
    return EventDescriptor(**args)  # type: ignore[arg-type]


def test_topic_wire_shape_is_exactly_the_spec() -> None:
    t = topic()
    obj = dag_cbor.decode(t.encode())
    assert obj == {
        "name": "t",
        "author": PEERS[0],
        "parent": None,
        "#": {"meta": t.meta},
        "metadata": {
            "created": "2026-01-01T00:00:00.123456Z",
            "protocolVersion": PROTOCOL_VERSION,
            "allowedPublishers": {"enabled": True, "peers": [PEERS[1]]},
            "requestToPublish": {"enabled": True, "peers": []},
            "eventLinking": "CUSTOM",
        },
    }
    # the link is a real IPLD link: CBOR tag 42 (0xd8 0x2a)
    assert b"\xd8\x2a" in t.encode()
    # canonical bytes are what the reference dag_cbor encoder produces
    assert dag_cbor.encode(obj) == t.encode()


def test_event_wire_shape_and_cid() -> None:
    t = topic()
    e = event(t, parents=(compute_cid(b"x"),), clock=3)
    obj = dag_cbor.decode(e.encode())
    assert set(obj) == {"topic", "author", "publisher", "parents", "clock", "payload", "metadata"}
    assert obj["parents"] == [compute_cid(b"x")] and obj["clock"] == 3
    assert obj["metadata"] == {"created": format_created(NOW), "protocolVersion": "2.0.0"}
    expected = CID("base32", 1, "dag-cbor", multihash.digest(e.encode(), "sha2-256"))
    assert e.cid == expected
    assert str(e.cid).startswith("bafyrei")


def test_round_trip_and_cid_recomputed() -> None:
    t = topic()
    e = event(t)
    assert TopicDescriptor.decode(t.encode(), expected_cid=t.cid) == t
    assert EventDescriptor.decode(e.encode(), expected_cid=e.cid) == e
    assert decode_descriptor(e.encode()) == e
    assert decode_descriptor(t.encode()) == t
    with pytest.raises(DescriptorError, match="does not match"):
        EventDescriptor.decode(e.encode(), expected_cid=t.cid)


def _mutate(data: bytes, fn: object) -> bytes:
    obj = dag_cbor.decode(data)
    fn(obj)  # type: ignore[operator]
    out = dag_cbor.encode(to_mf(obj))
    assert isinstance(out, bytes)
    return out


@pytest.mark.parametrize(
    ("mutation", "message"),
    [
        (lambda o: o["metadata"].__setitem__("protocolVersion", "9.0"), "unsupported"),
        (lambda o: o.__setitem__("extra", 1), "unknown fields"),
        (lambda o: o.pop("author"), "missing fields"),
        (lambda o: o.__setitem__("author", "not-a-peer"), "author"),
        (lambda o: o.__setitem__("parent", "bafy"), "parent"),
        (lambda o: o["#"].__setitem__("meta", CID.decode(b"\x01\x55\x12\x20" + bytes(32))), "link"),
        (lambda o: o["metadata"].__setitem__("created", "2026-01-01 00:00:00"), "ISO-8601"),
        (lambda o: o["metadata"].__setitem__("created", "2026-01-01T00:00:00+01:00"), "ISO"),
        (lambda o: o["metadata"].__setitem__("eventLinking", "last_seen"), "eventLinking"),
        (lambda o: o["metadata"]["allowedPublishers"].__setitem__("enabled", 1), "enabled"),
        (lambda o: o.__setitem__("name", ""), "name"),
    ],
)
def test_topic_strict_decoding(mutation: object, message: str) -> None:
    bad = _mutate(topic().encode(), mutation)
    with pytest.raises(DescriptorError, match=message):
        TopicDescriptor.decode(bad)


@pytest.mark.parametrize(
    ("mutation", "message"),
    [
        (lambda o: o.__setitem__("payload", "text"), "payload"),
        (lambda o: o.__setitem__("topic", None), "topic"),
        (lambda o: o.__setitem__("publisher", PEERS[0] + "x"), "publisher"),
        (lambda o: o["metadata"].pop("created"), "missing"),
        (lambda o: o["metadata"].__setitem__("protocolVersion", 1), "protocolVersion"),
        (lambda o: o.__setitem__("parents", None), "parents"),
        (lambda o: o.__setitem__("clock", 1), "clock is 0 exactly"),
        (lambda o: o.__setitem__("clock", -1), "clock"),
        (lambda o: o.__setitem__("clock", 1.5), "clock"),
        (lambda o: o.update(parents=[_C1, _C1], clock=1), "distinct"),
        (lambda o: o.update(parents=sorted([_C1, _C2], key=bytes, reverse=True), clock=1), "order"),
        (lambda o: o.update(parents=[compute_cid(b"%d" % i) for i in range(17)], clock=1), "16"),
        (
            lambda o: o.update(parents=[CID.decode(b"\x01\x55\x12\x20" + bytes(32))], clock=1),
            "link",
        ),
        (lambda o: o.pop("clock"), "missing fields"),
    ],
)
def test_event_strict_decoding(mutation: object, message: str) -> None:
    bad = _mutate(event(topic()).encode(), mutation)
    with pytest.raises(DescriptorError, match=message):
        EventDescriptor.decode(bad)


def test_protocol_1_events_get_a_clear_error() -> None:
    """Protocol 1 events (one ``parent`` link) are refused, saying why;
    protocol 1 topic descriptors have the same shape and are still read."""
    obj = dag_cbor.decode(event(topic()).encode())
    del obj["parents"], obj["clock"]
    obj["parent"] = None
    obj["metadata"]["protocolVersion"] = "1.0.0"
    with pytest.raises(DescriptorError, match=r"protocol 1 .*upgrade the publishing node"):
        EventDescriptor.decode(dag_cbor.encode(obj))
    old = dag_cbor.decode(topic().encode())
    old["metadata"]["protocolVersion"] = "1.0.0"
    assert TopicDescriptor.decode(dag_cbor.encode(old)).protocol_version == "1.0.0"


def test_non_canonical_bytes_rejected() -> None:
    data = topic().encode()
    # a non-minimal length for the top-level map: 0xb8 0x05 instead of 0xa5
    assert data[0] == 0xA5
    with pytest.raises(DescriptorError):
        TopicDescriptor.decode(b"\xb8\x05" + data[1:])
    with pytest.raises(DescriptorError):
        TopicDescriptor.decode(data + b"\x00")  # trailing bytes


def test_garbage_is_descriptor_error() -> None:
    for data in (b"", b"\xff", b"\xa0", dag_cbor.encode([1, 2]), b"\x00" * 10):
        with pytest.raises(RemoteProtocolError):
            decode_descriptor(data)  # type: ignore[arg-type]


def test_local_construction_errors_are_local() -> None:
    with pytest.raises(LocalProtocolError):
        TopicDescriptor.new(name="", author=PEERS[0], now=NOW)
    with pytest.raises(LocalProtocolError):
        PeerPolicy(enabled=True, peers=("nope",))
    with pytest.raises(LocalProtocolError):
        format_created(float("nan"))
    assert not issubclass(LocalProtocolError, RemoteProtocolError)


def test_created_strict_parse() -> None:
    assert parse_created("2026-01-01T00:00:00Z") == 1_767_225_600.0
    assert parse_created("2026-01-01T00:00:00.5+00:00") == 1_767_225_600.5
    assert abs(parse_created(format_created(NOW)) - NOW) < 1e-6
    for bad in ("2026-01-01T00:00:00", "2026-13-01T00:00:00Z", "x", "2026-01-01T00:00:00.1234567Z"):
        with pytest.raises(ValueError):
            parse_created(bad)


def test_policies() -> None:
    t = topic()
    assert t.may_publish(PEERS[0]) and t.may_publish(PEERS[1]) and not t.may_publish(PEERS[2])
    assert t.may_request(PEERS[3])
    closed = topic(
        options=TopicOptions(request_to_publish=PeerPolicy(enabled=True, peers=(PEERS[2],)))
    )
    assert closed.may_publish(PEERS[3])  # allowedPublishers disabled: anyone
    assert closed.may_request(PEERS[2]) and not closed.may_request(PEERS[3])


names = st.text(min_size=1, max_size=40)
peers = st.sampled_from(PEERS)


@settings(max_examples=60, deadline=None)
@given(
    name=names,
    author=peers,
    now=st.floats(min_value=0, max_value=4e9),
    subs=st.dictionaries(names.filter(lambda n: n != "meta"), st.binary(max_size=8), max_size=4),
    allowed=st.lists(peers, unique=True),
    linking=st.sampled_from(list(EventLinking)),
)
def test_topic_round_trip_property(
    name: str,
    author: str,
    now: float,
    subs: dict[str, bytes],
    allowed: list[str],
    linking: EventLinking,
) -> None:
    links = {k: compute_cid(v) for k, v in subs.items()}
    t = TopicDescriptor.new(
        name=name,
        author=author,
        now=now,
        links=links,
        options=TopicOptions(
            allowed_publishers=PeerPolicy(enabled=bool(allowed), peers=tuple(allowed)),
            event_linking=linking,
        ),
    )
    again = TopicDescriptor.decode(t.encode(), expected_cid=t.cid)
    assert again.encode() == t.encode() and again.sub_topics == links
    assert dag_cbor.encode(dag_cbor.decode(t.encode())) == t.encode()


@settings(max_examples=60, deadline=None)
@given(payload=st.binary(max_size=2000), author=peers, publisher=peers, has_parent=st.booleans())
def test_event_round_trip_property(
    payload: bytes, author: str, publisher: str, has_parent: bool
) -> None:
    t = topic()
    e = event(
        t,
        payload=payload,
        author=author,
        publisher=publisher,
        parents=(compute_cid(payload),) if has_parent else (),
        clock=7 if has_parent else 0,
    )
    assert EventDescriptor.decode(e.encode(), expected_cid=e.cid) == e
    assert EventDescriptor.decode(e.encode()).payload == payload
