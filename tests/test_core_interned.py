"""Values shared by the nodes of one process (core/_interned.py, ``parse_summary``).

Each shared value must equal what a node would build for itself (the differential
half: against ``(tree key, descriptor)``, :func:`cid_term`, ``parse_filter``), and
the nodes of a run must really share them (the memory half: one object for all).
"""

from __future__ import annotations

import random

import pytest

from pulsarcast_ipfs.core import _interned
from pulsarcast_ipfs.core._dagcbor import sha256_cid
from pulsarcast_ipfs.core._filters import FilterSyntaxError, parse_filter, parse_summary
from pulsarcast_ipfs.core._interned import event_entry, shared_term
from pulsarcast_ipfs.core._window import cid_term
from pulsarcast_ipfs.core.testing import CoreNet


def _net_with_events() -> tuple[CoreNet, object, list[object]]:
    net = CoreNet(5, seed=3)
    topic = net.call(net.peers[0], "create_topic", "shared")
    net.run_for(0.5)
    for p in net.peers[1:]:
        net.call(p, "subscribe", topic)
    net.run_for(6)
    for i in range(8):
        net.call(net.peers[i % 5], "publish", topic, f"{i}".encode())
        net.run_for(0.3)
    net.run_for(10)
    cids = net.delivered(net.peers[1], topic)
    assert len(cids) == 8
    return net, topic, cids


def test_every_node_holds_the_same_entry_and_terms() -> None:
    net, topic, cids = _net_with_events()
    for cid in cids:
        entries = [net.nodes[p]._events.get(cid) for p in net.peers]
        assert all(e is not None and e[0] == topic and e[1].cid == cid for e in entries)
        # The receivers decoded the one descriptor (decode_cached) and share its
        # entry; the publisher holds the descriptor it built.
        got = [e for p, e in zip(net.peers, entries, strict=True) if p != e[1].publisher]
        assert len(got) == 4
        assert all(e is got[0] for e in got)  # one tuple, not four
    terms = [net.nodes[p]._trees[topic].window._terms for p in net.peers]
    assert sorted(terms[0]) == sorted(cid_term(c) for c in cids)
    for i in range(len(terms[0])):
        assert all(t[i] is terms[0][i] for t in terms[1:])  # one int per CID


def test_an_entry_is_the_pair_asked_for() -> None:
    net2, topic2, cids2 = _net_with_events()
    topic = sha256_cid(b"another tree")
    ev = net2.nodes[net2.peers[0]]._events.get(cids2[0])[1]
    a = event_entry(topic2, ev)
    assert a == (topic2, ev)
    b = event_entry(topic, ev)  # another tree key: its own pair, not the memo's
    assert b == (topic, ev) and b[0] == topic != topic2
    assert event_entry(topic, ev) is b


def test_terms_equal_the_scan_s_terms() -> None:
    rng = random.Random(7)
    for _ in range(2000):
        cid = sha256_cid(rng.randbytes(40))
        assert shared_term(cid) == cid_term(cid)
        assert shared_term(cid) is shared_term(cid)


def test_full_memos_are_emptied_and_stay_right(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_interned, "MEMO_SIZE", 8)
    cids = [sha256_cid(i.to_bytes(4, "big")) for i in range(50)]
    for cid in cids:
        assert shared_term(cid) == cid_term(cid)
    assert len(_interned._terms) <= 8
    assert [shared_term(c) for c in cids] == [cid_term(c) for c in cids]


def test_summaries_parse_as_their_filters_and_bad_text_raises_each_time() -> None:
    texts = ("ups > 3", "*", 'user in ["a", "b"]')
    parsed = parse_summary(texts)
    assert parsed == tuple(parse_filter(t) for t in texts)
    assert parse_summary(tuple(texts)) is parsed
    for _ in range(2):
        with pytest.raises(FilterSyntaxError):
            parse_summary(("ups >",))
