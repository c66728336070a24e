"""RPC frames (docs/protocol.md §6): round trip, incremental decoding, limits, fuzzing."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pulsarcast_ipfs.core import (
    MAX_FRAME_SIZE,
    DescriptorError,
    Event,
    FrameDecoder,
    Heads,
    Join,
    JoinAck,
    Leave,
    Members,
    Ping,
    Pong,
    RemoteProtocolError,
    RequestAck,
    RequestToPublish,
    Rpc,
    TopicDescriptor,
    _dagcbor,
    compute_cid,
    decode_rpc,
    encode_frame,
    encode_rpc,
    format_created,
)
from pulsarcast_ipfs.core.testing import make_peer_ids
from pulsarcast_ipfs.testing import to_mf

PEER = make_peer_ids(1, seed=3)[0]
TOPIC = TopicDescriptor.new(name="t", author=PEER, now=1e9)
C = TOPIC.cid

SAMPLES: list[Rpc] = [
    Join(topic=C, descriptor=TOPIC.encode()),
    JoinAck(topic=C, ok=True),
    JoinAck(topic=C, ok=False),
    Leave(topic=C),
    Event(topic=C, event=b"\xa0", topic_block=None),
    Event(topic=C, event=b"\xa0", topic_block=TOPIC.encode()),
    RequestToPublish(
        topic=C,
        descriptor=TOPIC.encode(),
        request_id="r1",
        author=PEER,
        payload=b"p",
        parent=compute_cid(b"x"),
        created=format_created(1e9),
        inject_id="i1",
    ),
    RequestAck(topic=C, request_id="r1", ok=True, event=compute_cid(b"y")),
    Ping(nonce=5),
    Pong(nonce=2**62),
    Heads(topic=C, heads=((compute_cid(b"a"), 1.5), (compute_cid(b"b"), 2.0))),
    Members(topic=C, epoch=3, members=(PEER,), offer=True),
]
STREAM = b"".join(encode_frame(r) for r in SAMPLES)


def test_round_trip_every_message() -> None:
    for rpc in SAMPLES:
        assert decode_rpc(encode_rpc(rpc)) == rpc
        assert FrameDecoder().feed(encode_frame(rpc)) == [rpc]


def test_feed_sized_gives_each_frames_size_on_the_wire() -> None:
    """The sidecar's ``rpc_received`` records take a frame's size from here, not from
    encoding the message again: it must be ``len(encode_frame(rpc))``."""
    dec = FrameDecoder()
    got = dec.feed_sized(STREAM[:5]) + dec.feed_sized(STREAM[5:])
    assert got == [(rpc, len(encode_frame(rpc))) for rpc in SAMPLES]


def test_wire_has_op_field() -> None:
    import dag_cbor

    assert dag_cbor.decode(encode_rpc(SAMPLES[0]))["op"] == "JOIN"
    assert set(dag_cbor.decode(encode_rpc(SAMPLES[6]))) == {
        "op",
        "topic",
        "descriptor",
        "requestId",
        "author",
        "payload",
        "parent",
        "created",
        "injectId",
        "signature",
    }


def test_incremental_byte_by_byte_and_arbitrary_pieces() -> None:
    dec = FrameDecoder()
    out: list[Rpc] = []
    for b in STREAM:
        out += dec.feed(bytes([b]))
    assert out == SAMPLES and dec.buffered == 0
    dec = FrameDecoder()
    assert dec.feed(STREAM[:7]) == []
    rest = dec.feed(STREAM[7:])
    assert rest == SAMPLES


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12))
def test_any_split_gives_the_same_messages(cuts: list[int]) -> None:
    points = sorted({0, len(STREAM), *cuts})
    dec = FrameDecoder()
    out: list[Rpc] = []
    for a, b in itertools.pairwise(points):
        out += dec.feed(STREAM[a:b])
    assert out == SAMPLES


def test_frame_size_limit() -> None:
    frame = encode_frame(SAMPLES[0])
    with pytest.raises(RemoteProtocolError, match="exceeds"):
        FrameDecoder(max_frame_size=10).feed(frame)
    # a huge announced length is refused before any body arrives
    with pytest.raises(RemoteProtocolError):
        FrameDecoder().feed(b"\xff\xff\xff\xff\x7f")
    assert MAX_FRAME_SIZE == 1024 * 1024


def test_decoder_refuses_input_after_an_error() -> None:
    dec = FrameDecoder()
    with pytest.raises(RemoteProtocolError):
        dec.feed(b"\x80\x00")  # non-minimal varint
    with pytest.raises(RemoteProtocolError):
        dec.feed(encode_frame(SAMPLES[3]))


@pytest.mark.parametrize(
    "body",
    [
        {"op": "JOIN", "topic": C},  # missing field
        {"op": "LEAVE", "topic": C, "x": 1},  # unknown field
        {"op": "NOPE"},
        {"op": "PING", "nonce": -1},
        {"op": "PING", "nonce": True},
        {"op": "JOIN_ACK", "topic": C, "ok": 1},
        {"op": "LEAVE", "topic": "bafy"},
        {"op": "HEADS", "topic": C, "heads": [[C]]},
        {"op": "HEADS", "topic": C, "heads": [[C, 1]]},
        {"op": "MEMBERS", "topic": C, "epoch": 1, "members": [PEER], "offer": False},
        {"op": "MEMBERS", "topic": C, "epoch": 1, "members": [PEER], "offer": None},
        {"op": "MEMBERS", "topic": C, "epoch": 2, "members": [], "base": 1, "offer": True},
        [1, 2],
    ],
)
def test_malformed_messages(body: object) -> None:
    import dag_cbor

    data = dag_cbor.encode(to_mf(body))
    with pytest.raises(RemoteProtocolError):
        decode_rpc(data)


def _only_remote_errors(data: bytes) -> None:
    try:
        FrameDecoder(max_frame_size=4096).feed(data)
    except RemoteProtocolError:
        pass
    dec = FrameDecoder(max_frame_size=4096)
    try:
        for b in data:
            dec.feed(bytes([b]))
    except RemoteProtocolError:
        pass


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=300))
def test_fuzz_garbage_only_remote_protocol_error(data: bytes) -> None:
    _only_remote_errors(data)


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_fuzz_mutated_frames_only_remote_protocol_error(data: st.DataObject) -> None:
    raw = bytearray(data.draw(st.sampled_from([encode_frame(r) for r in SAMPLES])))
    for _ in range(data.draw(st.integers(min_value=1, max_value=4))):
        i = data.draw(st.integers(min_value=0, max_value=len(raw) - 1))
        raw[i] = data.draw(st.integers(min_value=0, max_value=255))
    if data.draw(st.booleans()):
        del raw[data.draw(st.integers(min_value=0, max_value=len(raw) - 1)) :]
    _only_remote_errors(bytes(raw))


@pytest.mark.parametrize("nest", [b"\x81", b"\xa1\x61a"])  # [[[...]]] / {"a": {"a": ...}}
def test_deep_nesting_is_refused_by_the_depth_limit(nest: bytes) -> None:
    """A frame of nested arrays or maps as large as the frame limit allows is refused
    by the decoder's depth bound (``CborError`` → ``RemoteProtocolError``), long
    before Python's recursion limit; no ``RecursionError`` is caught anywhere."""
    body = nest * ((MAX_FRAME_SIZE - 1) // len(nest)) + b"\x00"
    with pytest.raises(RemoteProtocolError, match="nested too deeply") as exc:
        decode_rpc(body)
    assert isinstance(exc.value.__cause__, _dagcbor.CborError)
    with pytest.raises(DescriptorError, match="nested too deeply"):
        TopicDescriptor.decode(body[: 64 * 1024])
