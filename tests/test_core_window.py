"""The window's fingerprint index (core/_window.py) against the scan it replaces.

A DIGEST's ``(count, sum)`` over ``[lo, hi]`` comes from :class:`WindowIndex`; these
tests require it to equal :func:`fingerprint` over the CIDs of ``recent`` and
``older`` created in the window: for random adds and drops, and for the trees of a
CoreNet run whose windows overflow (``history_size`` small) out of order.
"""

from __future__ import annotations

import dataclasses
import random

from pulsarcast_ipfs.core import NodeConfig
from pulsarcast_ipfs.core._antientropy import fingerprint
from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.core._dagcbor import sha256_cid
from pulsarcast_ipfs.core._window import WindowIndex
from pulsarcast_ipfs.core.testing import CoreNet


def _scan(held: dict[CID, float], lo: float, hi: float) -> tuple[int, int]:
    return fingerprint(c for c, ts in held.items() if lo <= ts <= hi)


def test_random_adds_and_drops_match_the_scan() -> None:
    rng = random.Random(11)
    index = WindowIndex()
    held: dict[CID, float] = {}
    for step in range(3000):
        if held and rng.random() < 0.4:
            cid = rng.choice(list(held))
            index.discard(cid, held.pop(cid))
        else:
            cid = sha256_cid(step.to_bytes(4, "big"))
            held[cid] = ts = float(rng.randrange(50))  # many equal times
            index.add(cid, ts)
        if step % 50 == 0:
            assert len(index) == len(held)
            for _ in range(20):
                lo = float(rng.randrange(-5, 55))
                hi = lo + rng.choice([0.0, 1.0, 10.0, 100.0])
                assert index.fingerprint(lo, hi) == _scan(held, lo, hi)
    assert index.fingerprint(1.0, 0.0) == (0, 0)


def test_the_index_follows_every_tree_of_a_run() -> None:
    config = dataclasses.replace(NodeConfig(), heads_size=4, history_size=6)
    net = CoreNet(6, seed=5, config=config, loss=0.1)
    author = net.peers[0]
    topic = net.call(author, "create_topic", "window")
    net.run_for(0.5)
    for p in net.peers[1:]:
        net.call(p, "subscribe", topic)
    net.run_for(6)
    rng = random.Random(5)
    for i in range(40):
        net.call(rng.choice(net.peers), "publish", topic, f"{i}".encode())
        net.run_for(rng.choice([0.0, 0.2, 1.0]))
    net.run_for(30)
    checked = 0
    for peer in net.peers:
        tree = net.nodes[peer]._trees[topic]
        held = {**tree.older, **tree.recent}
        assert len(tree.window) == len(held) == len(tree.recent) + len(tree.older)
        assert len(held) == 10  # both overflowed
        times = sorted(held.values())
        for lo in (times[0], times[3], times[-1], -1.0):
            for hi in (times[-1], times[5], lo):
                assert tree.window.fingerprint(lo, hi) == _scan(held, lo, hi)
                checked += 1
    assert checked == 6 * 12
