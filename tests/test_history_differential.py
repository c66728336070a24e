"""The compact history index against the simple one it replaced.

:class:`~pulsarcast_ipfs.core.TopicHistory` keeps no Python object per event (records
in a :class:`~pulsarcast_ipfs.core._digesttable.DigestTable`, slot arrays, a heap of
parents and attributes). ``pulsarcast_ipfs.testing._history_reference`` is the
history as it was first written (a dict of records and a sorted list). Random
operations — adds in any order, of events with several parents, attributes and
disagreeing clocks, evictions by count, bytes and age, notes of events outside,
restored horizons, clears — must get the same answer from both, and every query
after each step must too."""

from __future__ import annotations

import random
from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pulsarcast_ipfs.core import (
    EventDescriptor,
    RetentionPolicy,
    TopicDescriptor,
    TopicHistory,
    _history,
    format_created,
    parse_filter,
    sort_parents,
)
from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.core._descriptors import ATTRIBUTES_VERSION, PROTOCOL_VERSION
from pulsarcast_ipfs.core._digesttable import CIDFlags, DigestTable
from pulsarcast_ipfs.core._filters import AttributeValue
from pulsarcast_ipfs.core.testing import make_peer_ids
from pulsarcast_ipfs.testing._history_reference import ReferenceHistory

T0 = 1_767_225_600.0
PEERS = make_peer_ids(3)
TOPIC = TopicDescriptor.new(name="d", author=PEERS[0], now=T0)
WHERE = [parse_filter("kind = 'a'"), parse_filter("n >= 3"), parse_filter("*")]


def dag(rng: random.Random, n: int, width: int) -> list[EventDescriptor]:
    """``n`` events of ``width`` concurrent publishers (each links 1-3 heads it
    knows), with attributes on most, and ``created`` times that disagree with the
    order (publishers' clocks)."""
    events: list[EventDescriptor] = []
    views: list[list[EventDescriptor]] = [[] for _ in range(width)]
    for i in range(n):
        w = rng.randrange(width)
        if events and rng.random() < 0.5:
            views[w].append(rng.choice(events))
        linked = {e.cid: e for e in views[w][-rng.randint(1, 3) :]} if views[w] else {}
        attrs: dict[str, AttributeValue] | None = (
            None if rng.random() < 0.3 else {"kind": rng.choice("ab"), "n": rng.randrange(6)}
        )
        ev = EventDescriptor(
            topic=TOPIC.cid,
            author=PEERS[w % 3],
            publisher=PEERS[w % 3],
            parents=sort_parents(linked),
            clock=1 + max((e.clock for e in linked.values()), default=-1),
            payload=b"x" * rng.randrange(40) + b"%d" % i,
            created=format_created(T0 + rng.uniform(0, n)),
            protocol_version=ATTRIBUTES_VERSION if attrs is not None else PROTOCOL_VERSION,
            attributes=attrs,
        )
        events.append(ev)
        views[w] = [ev]
    return events


def same(new: TopicHistory, ref: ReferenceHistory, events: list[EventDescriptor]) -> None:
    """Every query answers alike."""
    assert len(new) == len(ref) and new.bytes == ref.bytes
    assert new.heads == ref.heads and new.missing == ref.missing
    assert new.complete == ref.complete and new.horizon == ref.horizon
    assert list(new.newest()) == list(ref.newest())
    for ev in events:
        assert (ev.cid in new) == (ev.cid in ref)
        assert new.get(ev.cid) == ref.get(ev.cid)
        assert new.key_of(ev.cid) == ref.key_of(ev.cid)
    cursors = [None, *(e.order_key for e in events[:: max(1, len(events) // 7)])]
    for order in ("newest", "oldest"):
        for after in cursors:
            for limit in (1, 3, 50):
                assert new.page(order=order, after=after, limit=limit) == ref.page(
                    order=order, after=after, limit=limit
                )
                for where in WHERE:
                    kw = {"order": order, "after": after, "limit": limit, "where": where}
                    assert new.filtered_page(**kw, scan=4) == ref.filtered_page(**kw, scan=4)  # type: ignore[arg-type]
                    assert new.filtered_page(**kw) == ref.filtered_page(**kw)  # type: ignore[arg-type]


@settings(max_examples=120, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    n=st.integers(1, 70),
    width=st.integers(1, 4),
    keep=st.integers(1, 40),
    max_bytes=st.sampled_from([2**40, 900, 3000]),
    max_age=st.sampled_from([1e12, 30.0, 8.0]),
    ops=st.lists(
        st.sampled_from(["add", "add", "add", "enforce", "outside", "horizon"]), max_size=120
    ),
    clear_at=st.integers(0, 200),
)
def test_the_compact_history_answers_as_the_reference(
    seed: int,
    n: int,
    width: int,
    keep: int,
    max_bytes: int,
    max_age: float,
    ops: list[str],
    clear_at: int,
) -> None:
    rng = random.Random(seed)
    events = dag(rng, n, width)
    arrivals = events[:]
    rng.shuffle(arrivals)
    policy = RetentionPolicy(max_events=keep, max_bytes=max_bytes, max_age=max_age)
    new, ref = TopicHistory(policy=policy), ReferenceHistory(policy=policy)
    now = T0 + n / 3
    for step, op in enumerate(ops):
        if op == "add":
            ev = rng.choice(arrivals) if rng.random() < 0.2 else arrivals[step % len(arrivals)]
            assert new.add(ev.cid, ev, now) == ref.add(ev.cid, ev, now)
        elif op == "enforce":
            assert new.enforce(now) == ref.enforce(now)
        elif op == "outside":
            cids = [rng.choice(events).cid for _ in range(rng.randrange(3))]
            new.note_outside(cids)
            ref.note_outside(cids)
        else:
            key = rng.choice(events).order_key
            new.restore_horizon(key)
            ref.restore_horizon(key)
        if step == clear_at:
            assert new.clear() == ref.clear()  # the same CIDs in the same order
        now += rng.choice([0.0, 0.5, 3.0])
        same(new, ref, events)


def test_a_long_run_with_evictions_compacts_the_heap_and_answers_alike(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Hundreds of evictions by count and age (the heap is rewritten several times)."""
    monkeypatch.setattr(_history, "_HEAP_SLACK", 256)
    rng = random.Random(7)
    events = sorted(dag(rng, 900, 3), key=lambda e: e.order_key)
    policy = RetentionPolicy(max_events=120, max_age=300.0)
    new, ref = TopicHistory(policy=policy), ReferenceHistory(policy=policy)
    shrunk, size = 0, 0
    for i, ev in enumerate(events):
        now = T0 + i / 2
        assert new.add(ev.cid, ev, now) == ref.add(ev.cid, ev, now)
        assert new.enforce(now) == ref.enforce(now)
        shrunk += len(new._heap) < size
        size = len(new._heap)
    assert shrunk > 5  # compacted
    same(new, ref, events)


def test_the_differential_check_catches_a_planted_fault() -> None:
    """A history that loses one record is caught."""
    rng = random.Random(1)
    events = dag(rng, 30, 2)
    new, ref = TopicHistory(policy=RetentionPolicy()), ReferenceHistory(policy=RetentionPolicy())
    for ev in events:
        new.add(ev.cid, ev, T0)
        ref.add(ev.cid, ev, T0)
    same(new, ref, events)
    victim = next(e for e in events if e.attributes)
    new._recs.remove(new._recs.find(bytes(victim.cid)[4:]))  # planted: one record lost
    try:
        same(new, ref, events)
    except AssertionError:
        return
    raise AssertionError("the check did not notice")


# -- the digest table ---------------------------------------------------------------------


@settings(max_examples=80, deadline=None)
@given(
    ops=st.lists(st.tuples(st.booleans(), st.integers(0, 300)), max_size=600),
    width=st.sampled_from([32, 36, 64]),
)
def test_the_digest_table_is_a_dict(ops: list[tuple[bool, int]], width: int) -> None:
    """Inserts and removals in any order (probe runs shifted back on removal, the
    index grown): the table finds exactly what a dict holds, and each record keeps
    its other bytes."""
    keys = [random.Random(i).randbytes(32) for i in range(301)]
    table = DigestTable(width, key_at=width - 32)
    model: dict[bytes, int] = {}
    for insert, i in ops:
        k = keys[i]
        slot = table.find(k)
        assert (slot >= 0) == (k in model)
        if insert and k not in model:
            slot = table.insert(k)
            table.data[slot * width : slot * width + width - 32] = bytes([i % 256]) * (width - 32)
            model[k] = i
        elif not insert and k in model:
            table.remove(slot)
            del model[k]
        assert len(table) == len(model)
    for k, i in model.items():
        slot = table.find(k)
        assert slot >= 0 and table.digest(slot) == k
        assert table.data[slot * width : slot * width + width - 32] == bytes([i % 256]) * (
            width - 32
        )
    assert all(table.find(k) < 0 for k in keys if k not in model)
    live = array("I", (table.find(k) for k in model))
    assert len(set(live)) == len(model)  # one slot each


@settings(max_examples=60, deadline=None)
@given(
    ops=st.lists(
        st.tuples(st.sampled_from(["set", "pop", "get"]), st.integers(0, 40), st.booleans()),
        max_size=200,
    )
)
def test_cid_flags_are_a_dict_of_cid_bytes(ops: list[tuple[str, int, bool]]) -> None:
    """``CIDFlags`` (the sidecar's retained events, whether own) against the dict it
    replaced, for event CIDs and CIDs of other kinds."""
    events = [CID.dag_cbor_sha256(random.Random(i).randbytes(32)) for i in range(36)]
    others = [CID.decode(bytes(c)[:1] + b"\x55" + bytes(c)[2:]) for c in events[:5]]  # raw
    pool = events + others
    flags, model = CIDFlags(), dict[bytes, bool]()
    for op, i, flag in ops:
        cid = pool[i]
        if op == "set":
            flags[cid] = flag
            model[bytes(cid)] = flag
        elif op == "pop":
            assert flags.pop(cid) == model.pop(bytes(cid), None)
        assert flags.get(cid) == model.get(bytes(cid))
        assert len(flags) == len(model)
        assert all((c in flags) == (bytes(c) in model) for c in pool)
