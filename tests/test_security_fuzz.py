"""Bounded fuzzing of network input ("bad input"): the RPC codec, the
descriptor decoder and a node's handling of RPCs from any peer. The long runs
(≥ 1,000,000 inputs each) are ``fuzz/fuzz_codec.py`` and ``fuzz/fuzz_node.py``."""

from __future__ import annotations

import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from multiformats import CID

from pulsarcast_ipfs.core import (
    Digest,
    FrameDecoder,
    GroupAck,
    GroupAssign,
    GroupEvent,
    GroupJoin,
    GroupLeave,
    Join,
    JoinAck,
    Members,
    MembersWant,
    RemoteProtocolError,
    Stored,
    Summary,
    Watch,
    _codec,
    _dagcbor,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fuzz._harness import (
    FuzzFailure,
    NodeFuzzer,
    build_world,
    codec_one_input,
    random_frames,
)
from fuzz._runner import main as fuzz_main

WORLD = build_world(0)


def test_world_frames_are_valid_and_reach_the_node() -> None:
    """The seeds are real frames: each decodes, and valid events get delivered."""
    assert sum(codec_one_input(f) for f in WORLD.frames) >= len(WORLD.frames)
    fz = NodeFuzzer(WORLD)
    for i, frame in enumerate(WORLD.frames):
        fz.one_input(bytes((i, 1)) + frame)
    assert fz.remote_errors == 0 and fz.rpcs == len(WORLD.frames)
    assert fz.dropped.get("duplicate", 0) > 0  # events reached the forwarding check


@pytest.mark.slow
def test_codec_random_mutation_3000_inputs() -> None:
    rng = random.Random(11)
    decoded = sum(codec_one_input(random_frames(rng, WORLD)) for _ in range(3000))
    assert decoded > 300  # a fair share of inputs stayed valid enough to decode


def test_node_random_mutation_3000_inputs() -> None:
    rng = random.Random(12)
    fz = NodeFuzzer(WORLD, seed=12, reset_every=1000)
    for _ in range(3000):
        step = rng.choice((0, 1, 5, 20, 60, 255))
        fz.one_input(bytes((rng.randrange(256), step)) + random_frames(rng, WORLD))
    assert fz.inputs == 3000 and fz.rpcs > 300 and fz.remote_errors > 300
    assert {"invalid", "duplicate"} <= set(fz.dropped)


def _body(frame: bytes) -> bytes:
    i = 0
    while frame[i] & 0x80:
        i += 1
    return frame[i + 1 :]


def _seed_messages() -> list[dict[str, Any]]:
    """One real message of each op: the world's frames, plus JOIN and JOIN_ACK with
    their wire-2.7 fields, MEMBERS (a delta),
    MEMBERS_WANT and DIGEST."""
    by_op: dict[str, dict[str, Any]] = {}
    for frame in WORLD.frames:
        obj = _dagcbor.decode(_body(frame))
        by_op.setdefault(obj["op"], obj)
    topic, ev = WORLD.topics[0], WORLD.events[0]
    # a delta (wire 2.6): every optional field of MEMBERS set
    by_op["MEMBERS"] = Members(
        topic=topic,
        epoch=3,
        members=tuple(WORLD.peers[2:4]),
        summaries=(("ups >= 10",), ("*",)),
        base=2,
        removed=(WORLD.peers[4],),
    ).to_ipld()
    by_op["MEMBERS_WANT"] = MembersWant(topic=topic).to_ipld()
    # the meta-topic descriptor asked for and carried (wire 2.7)
    by_op["JOIN"] = Join(
        topic=topic, descriptor=WORLD.store[topic], summary=("ups >= 10",), want_meta=True
    ).to_ipld()
    by_op["JOIN_ACK"] = JoinAck(topic=topic, ok=True, meta=WORLD.store[topic]).to_ipld()
    by_op["DIGEST"] = Digest(
        topic=topic,
        lo=1.0,
        hi=9.0,
        count=1,
        sum=5,
        ranges=((4.0, 1, 5), (9.0, 0, 0)),
        have=((ev, 2.0),),
    ).to_ipld()
    by_op["SUMMARY"] = Summary(
        topic=topic, filters=('ups >= 10 and user in ["a", "b"]', "x between 1 and 2.5")
    ).to_ipld()
    # a witness asked for announcements (wire 2.8)
    by_op["WATCH"] = Watch(topic=topic, ttl=60, filters=("ups >= 10",)).to_ipld()
    # fast groups
    by_op["GROUP_JOIN"] = GroupJoin(topic=topic, spare=4).to_ipld()
    by_op["GROUP_ACK"] = GroupAck(topic=topic, ok=True, helper=WORLD.peers[2], ttl=30.0).to_ipld()
    by_op["GROUP_LEAVE"] = GroupLeave(topic=topic).to_ipld()
    by_op["GROUP_ASSIGN"] = GroupAssign(
        topic=topic, epoch=2, members=tuple(WORLD.peers[2:4]), ttl=30.0
    ).to_ipld()
    frame_ev = next(v for v in by_op.values() if v["op"] == "EVENT")
    # a publisher waiting for holders, and a holder's answer (wire 2.9)
    by_op["EVENT"] = {**frame_ev, "ack": True}
    by_op["STORED"] = Stored(topic=topic, event=ev).to_ipld()
    by_op["GROUP_EVENT"] = GroupEvent(topic=topic, event=frame_ev["event"]).to_ipld()
    assert len(by_op) == len(_codec._BY_OP)
    return [by_op[op] for op in sorted(by_op)]


SEED_MESSAGES = _seed_messages()
IPLD_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**64), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
    | st.binary(max_size=40)
    | st.sampled_from(WORLD.events + WORLD.topics)
    | st.just(CID("base32", 1, "raw", b"\x12\x20" + bytes(32))),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=8,
)


@st.composite
def reshaped_frames(draw: st.DrawFn) -> bytes:
    """A real message with up to three fields (``op`` included) given any IPLD value,
    or removed, or one added: valid dag-cbor that reaches the message validators."""
    obj = dict(draw(st.sampled_from(SEED_MESSAGES)))
    for key in draw(st.lists(st.sampled_from(sorted(obj)), max_size=3, unique=True)):
        if draw(st.integers(0, 9)) == 0:
            del obj[key]
        else:
            obj[key] = draw(IPLD_VALUES)
    if draw(st.integers(0, 9)) == 0:
        obj[draw(st.text(max_size=6))] = draw(IPLD_VALUES)
    body = _dagcbor.encode(obj)
    return _codec._varint(len(body)) + body


FUZZ_INPUTS = st.one_of(
    st.binary(max_size=400),
    st.integers(0, 2**32 - 1).map(lambda seed: random_frames(random.Random(seed), WORLD)),
    reshaped_frames(),
    reshaped_frames(),
)
"""Garbage; the world's frames mutated by the fuzzers' own byte mutator (most fail in
the dag-cbor decoder); or real messages with fields of any type (the validators)."""


def check_property(one_input: Callable[[bytes], object], *, examples: int) -> None:
    """Hypothesis feeds ``examples`` inputs to a harness's ``one_input`` (derandomized).

    The harness states the property: a ``FuzzFailure`` (an exception other than
    ``RemoteProtocolError`` came out of the codec, or the node raised) or any
    exception escaping it fails the run, reported without shrinking.
    """

    @settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        phases=(Phase.generate,),
        report_multiple_bugs=False,
        suppress_health_check=list(HealthCheck),
    )
    @given(FUZZ_INPUTS)
    def prop(data: bytes) -> None:
        one_input(data)

    prop()


def test_codec_arbitrary_and_mutated_bytes() -> None:
    check_property(codec_one_input, examples=600)


def test_finding_an_unhashable_created() -> None:
    """Found by ``reshaped_frames`` once the decoders stopped catching everything:
    ``created`` as a list reached the memo of ``parse_created`` (``TypeError:
    unhashable type``), which a catch-all had turned into a RemoteProtocolError."""
    rtp = next(m for m in SEED_MESSAGES if m["op"] == "REQUEST_TO_PUBLISH")
    for created in ([], {}, [rtp["created"]]):
        body = _dagcbor.encode({**rtp, "created": created})
        with pytest.raises(RemoteProtocolError, match="created must be a string"):
            FrameDecoder().feed(_codec._varint(len(body)) + body)


def test_node_arbitrary_and_mutated_bytes() -> None:
    fz = NodeFuzzer(WORLD, reset_every=10**9)
    check_property(lambda data: fz.one_input(b"\x01\x05" + data), examples=300)


def _planted_in_the_cbor_decoder(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug on the slow path of link decoding (any CID but dag-cbor sha2-256)."""
    real = _dagcbor.cid_from_bytes

    def buggy(raw: bytes) -> CID:
        if len(raw) != 36 or not raw.startswith(b"\x01\x71\x12\x20"):
            raise IndexError("planted: the slow path indexes past the end")
        return real(raw)

    monkeypatch.setattr(_dagcbor, "cid_from_bytes", buggy)


def _planted_in_a_validator(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug on the error path of the RPC validators' link check."""
    real = _codec._cid

    def buggy(value: object, where: str) -> CID:
        if not _dagcbor.is_dag_cbor_sha256_link(value):
            raise TypeError("planted: the error message is built from the wrong type")
        return real(value, where)

    monkeypatch.setattr(_codec, "_cid", buggy)


@pytest.mark.parametrize("plant", [_planted_in_the_cbor_decoder, _planted_in_a_validator])
def test_the_fuzzers_find_a_planted_decoder_bug(
    monkeypatch: pytest.MonkeyPatch, plant: Callable[[pytest.MonkeyPatch], None]
) -> None:
    """The property can fail from the inside: a bug in a decoder is a finding.

    The decoders translate only the errors they expect (``CborError``, the
    validators' ``LocalProtocolError``, multiformats' documented ``ValueError`` /
    ``KeyError``) into ``RemoteProtocolError``; a planted ``IndexError`` or
    ``TypeError`` escapes as itself and the harness reports it. With a catch-all
    ``except Exception`` in the decoders this test fails: the bug would be
    laundered into a ``RemoteProtocolError``, which the property allows.
    """
    plant(monkeypatch)
    with pytest.raises(FuzzFailure) as failure:
        check_property(codec_one_input, examples=300)
    assert isinstance(failure.value.__cause__, IndexError | TypeError)
    assert "planted" in str(failure.value.__cause__)


def test_harness_reports_a_violation(monkeypatch: pytest.MonkeyPatch) -> None:
    """The property can fail: an error other than RemoteProtocolError is a finding."""

    def broken(self: object, data: bytes) -> list[object]:
        raise ValueError("boom")

    monkeypatch.setattr(FrameDecoder, "feed", broken)
    with pytest.raises(FuzzFailure):
        codec_one_input(WORLD.frames[0])
    with pytest.raises(FuzzFailure):
        NodeFuzzer(WORLD).one_input(b"\x01\x01" + WORLD.frames[0])


def test_runner_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert fuzz_main("node", ["--runs", "200", "--seed", "5", "--out", str(tmp_path)]) == 0
    assert "node: 200 inputs, 0 failures" in capsys.readouterr().out
    assert fuzz_main("codec", ["--runs", "0"]) == 2
    with pytest.raises(SystemExit) as exc:
        fuzz_main("codec", ["--engine", "nope"])
    assert exc.value.code == 2
