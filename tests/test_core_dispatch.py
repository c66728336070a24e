"""One dispatch of the core's outputs (``core.OutputDispatch``) for every driver."""

from __future__ import annotations

import typing

import pytest

from pulsarcast_ipfs.core import (
    OUTPUT_METHODS,
    FetchBlock,
    Output,
    OutputDispatch,
    ReleaseBlocks,
    SendRpc,
    compute_cid,
)
from pulsarcast_ipfs.core.testing import CoreNet


def test_every_output_type_has_its_method() -> None:
    assert set(OUTPUT_METHODS) == set(typing.get_args(Output))
    assert len(set(OUTPUT_METHODS.values())) == len(OUTPUT_METHODS)


def test_every_driver_carries_out_every_output_or_says_it_ignores_it() -> None:
    from pulsarcast_ipfs.sim._runner import Simulation
    from sidecar._driver import Driver

    for cls, ignored in ((Driver, []), (Simulation, []), (CoreNet, ["on_disconnect_peer"])):
        missing = [m for m in OUTPUT_METHODS.values() if not hasattr(cls, m)]
        assert missing == ignored, cls


class _Half:
    def __init__(self) -> None:
        self.sent: list[tuple[str, object]] = []

    def on_send_rpc(self, ctx: str, out: object) -> None:
        self.sent.append((ctx, out))


def test_a_missing_method_or_an_unknown_output_is_an_error() -> None:
    with pytest.raises(TypeError, match="has no on_store_block"):
        OutputDispatch(_Half())
    others = [t for t in OUTPUT_METHODS if t is not SendRpc]
    half = _Half()
    dispatch: OutputDispatch[str] = OutputDispatch(half, ignore=others)
    dispatch("p", [ReleaseBlocks(cids=())])  # ignored
    with pytest.raises(TypeError, match="unknown core output int"):
        dispatch("p", [3])
    with pytest.raises(TypeError, match="not core outputs"):
        OutputDispatch(half, ignore=[int])
    dispatch("p", [FetchBlock(cid=compute_cid(b"\xa0"))])
    assert half.sent == []
