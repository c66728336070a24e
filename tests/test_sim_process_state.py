"""Same seed, same records, byte for byte, whatever the process did before the run.

The core shares immutable values between the nodes of one process (decoded
descriptors, checked signatures, DIGEST terms, parsed summaries, encoded HEADS
entries, CIDs): a memo hit hands a node the object another node built, a miss a
fresh equal one. Nothing a node does may depend on which of the two it got, nor
on object addresses (``id()``, the default hash) or on when the garbage collector
runs. Three runs of one configuration in one process, each in another state of
the process, must write the same bytes: memos emptied first; memos full of that
very run's values and the collector running often; memos off, the collector off
and 100,000 live objects allocated first (every address moves).
"""

from __future__ import annotations

import functools
import gc
import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from pulsarcast_ipfs.core import (
    _codec,
    _dagcbor,
    _delegation,
    _descriptors,
    _filters,
    _interned,
    _signing,
    _signqueue,
)
from pulsarcast_ipfs.core._tree import LRU
from pulsarcast_ipfs.sim import AttackSpec, CrashSpec, SimConfig, Simulation
from pulsarcast_ipfs.workload import Workload, load_workload

pytestmark = pytest.mark.slow

_MEMO_MODULES: tuple[ModuleType, ...] = (
    _codec,
    _dagcbor,
    _delegation,
    _descriptors,
    _filters,
    _interned,
    _signing,
)
"""Core modules with a process-wide memo (a dict of their own or ``lru_cache``)."""

_CONFIG: dict[str, Any] = {
    "nodes": 40,
    "events": 200,
    "seed": 5,
    "loss": 0.05,
    "filters": ("ups > 3", "*"),
    "crashes": (CrashSpec(at=20.0, fraction=0.1),),
    "restart": 10.0,
    "grace": 30.0,
    "byzantine": 0.1,
    "attack": AttackSpec(kind="silent"),
    "flat_fanout": 3,
}
"""Loss, filters, a crash and restarts, relays (a flat fan-out of 3), silent attackers
and the witnesses that find them: most of what a node decides."""


@pytest.fixture(scope="module")
def workload() -> Workload:
    return load_workload()


def _empty_memos(monkeypatch: pytest.MonkeyPatch, limit: int = 16_384) -> None:
    monkeypatch.setattr(_signqueue, "_CHECKED_EVENTS", LRU(limit))
    _descriptors._decoded.clear()
    _interned._entries.clear()
    _interned._terms.clear()
    _filters._summaries.clear()
    _codec._heads_memo.clear()
    for module in _MEMO_MODULES:
        for value in vars(module).values():
            if isinstance(value, functools._lru_cache_wrapper):
                value.cache_clear()


@contextmanager
def _starved(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The core's own memos off (one entry at most; the ``lru_cache`` ones emptied),
    the collector off, 100,000 live objects allocated first. The collector and the
    decode memo's bound are restored on leaving, the rest by ``monkeypatch``."""
    size = _descriptors._DECODE_CACHE_SIZE
    _empty_memos(monkeypatch, limit=1)
    _descriptors.set_decode_cache_size(0)
    monkeypatch.setattr(_interned, "MEMO_SIZE", 1)
    monkeypatch.setattr(_filters, "_SUMMARY_MEMO_SIZE", 1)
    monkeypatch.setattr(_codec, "_HEADS_MEMO_SIZE", 1)
    ballast = [object() for _ in range(100_000)]
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
        del ballast
        _descriptors.set_decode_cache_size(size)


@contextmanager
def _collect_often() -> Iterator[None]:
    before = gc.get_threshold()
    gc.set_threshold(50, 5, 5)
    try:
        yield
    finally:
        gc.set_threshold(*before)


def _run(workload: Workload, out: Path) -> tuple[bytes, dict[str, Any]]:
    Simulation(SimConfig(**_CONFIG), out=out, workload=workload).run()
    summary = json.loads((out / "summary.json").read_text())
    summary.pop("wall_seconds")
    return (out / "records.jsonl").read_bytes(), summary


def test_the_same_records_whatever_the_memos_the_collector_and_the_addresses(
    workload: Workload, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _empty_memos(monkeypatch)
    cold, cold_summary = _run(workload, tmp_path / "cold")
    with _collect_often():
        warm, warm_summary = _run(workload, tmp_path / "warm")
    with _starved(monkeypatch):
        starved, starved_summary = _run(workload, tmp_path / "starved")
    digests = {
        name: hashlib.sha256(data).hexdigest()[:16]
        for name, data in (("cold", cold), ("warm", warm), ("starved", starved))
    }
    assert len(set(digests.values())) == 1, digests  # (the records are large to show)
    assert cold_summary == warm_summary == starved_summary
    # A run in which much could differ: deliveries, pruned forwards, crashes, and
    # silent relays found out.
    s = cold_summary
    assert s["deliveries"] > 1000 and s["forwards_pruned"] > 0 and s["crashed"] > 0, s
    assert s["penalties_withheld"] > 0, s
