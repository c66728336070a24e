"""When ``state.json`` is saved, and with what (sidecar/_persistence.py)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pulsarcast_ipfs.core import cid_str, compute_cid
from pulsarcast_ipfs.core._cid import CID
from sidecar._persistence import HEADS_KEPT, Persistence
from sidecar._state import StateStore

PEER = "12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN"
KNOWN = compute_cid(b"known topic")
UNKNOWN = compute_cid(b"a topic the core forgot")
HEADS = [compute_cid(b"head %d" % i) for i in range(HEADS_KEPT + 4)]


def _persistence(tmp_path: Path) -> tuple[Persistence, StateStore, list[str]]:
    state = StateStore(tmp_path, log_max=10)
    state.load(PEER)
    state.state.subscriptions[cid_str(KNOWN)] = 1.0
    state.state.subscriptions["not a CID"] = 1.0
    state.state.created.append(cid_str(UNKNOWN))
    saved: list[str] = []

    def topic_state(cid: CID) -> Any:
        return SimpleNamespace(heads=tuple(HEADS)) if cid == KNOWN else None

    return (
        Persistence(state, topic_state=topic_state, save_consumers=lambda: saved.append("c")),
        state,
        saved,
    )


def _heads_on_disk(tmp_path: Path) -> dict[str, list[str]]:
    heads: dict[str, list[str]] = json.loads((tmp_path / "state.json").read_text())["heads"]
    return heads


def test_a_save_writes_fresh_heads_and_the_consumers_and_clears_dirty(tmp_path: Path) -> None:
    p, _, saved = _persistence(tmp_path)
    p.mark_dirty()
    assert p.dirty
    p.save()
    assert not p.dirty and saved == ["c"]
    # the first HEADS_KEPT heads of each topic the core knows; the others left out
    assert _heads_on_disk(tmp_path) == {cid_str(KNOWN): [cid_str(c) for c in HEADS[:HEADS_KEPT]]}


@pytest.mark.anyio
async def test_a_save_in_a_thread_writes_the_same(tmp_path: Path) -> None:
    p, _, saved = _persistence(tmp_path)
    p.mark_dirty()
    await p.save_in_thread()
    assert not p.dirty and saved == ["c"]
    assert list(_heads_on_disk(tmp_path)) == [cid_str(KNOWN)]
