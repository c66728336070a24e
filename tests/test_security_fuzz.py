"""Bounded fuzzing of network input (issue 7, "bad input"): the RPC codec, the
descriptor decoder and a node's handling of RPCs from any peer. The long runs
(≥ 1,000,000 inputs each) are ``fuzz/fuzz_codec.py`` and ``fuzz/fuzz_node.py``."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pulsarcast_ipfs.core import FrameDecoder

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


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=2, max_size=400))
def test_node_arbitrary_bytes(data: bytes) -> None:
    NodeFuzzer(WORLD, reset_every=10**9).one_input(data)


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
