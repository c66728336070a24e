"""The node's kept answers against the scans they replace, on a small Sybil run.

``get_timer()`` reads the trees' earliest deadline from ``TreeDues`` instead of
walking every tree, and ``_next_hop`` asks the keyspace component
(``Keyspace.next_hop``) with the skips the node works out. Both must give what
the scans gave, after every input of a run where trees, JOINs, refusals, suspects and
penalties all change: each call below is checked against the scan, written out here
as it was.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from pulsarcast_ipfs.core import PulsarcastNode
from pulsarcast_ipfs.core._membership import Membership
from pulsarcast_ipfs.core._tree import JoinAttempt, Tree, TreeDues
from pulsarcast_ipfs.sim import SimConfig, Simulation, parse_attack, parse_latency


def _timer_by_scan(node: Any) -> float | None:
    """``get_timer()`` as it was: the minimum over every deadline, every tree walked."""
    best: float | None = None
    if node._trees:
        best = min(node._ping_at, node._heads_at)
        for tree in node._trees.values():
            for at in (
                None if tree.join is None else tree.join.deadline,
                tree.recheck_at,
                tree.heads_due,
                tree.members_due,
                tree.summary_due,
            ):
                if at is not None and at < best:
                    best = at
    rest = [node._links.due, node._fast.due, node._guard.next_due(), node._requests.due]
    rest += [f.due for f in node._fetches.values()]
    if node._acks.waiting:
        rest.append(node._acks.due())
    for at in rest:
        if at is not None and (best is None or at < best):
            best = at
    return best


def _hop_by_scan(
    node: Any, now: float, tree: Tree, exclude: Iterable[str], suspects: bool
) -> str | None:
    """``_next_hop`` as it was (without forgetting ended entries): the known peer
    nearest the author, strictly nearer than this node, not skipped, not suspect."""
    skip = set(exclude) | set(tree.children)
    skip |= {p for p, until in node._guard._penalised.items() if until > now}
    mine = node._keyspace.position ^ tree.author_pos
    check = not suspects
    best: tuple[int, str] | None = None
    for peer, pos in node._keyspace._known.items():
        if peer in skip:
            continue
        if check and (
            node._admission._banned.get(peer, now) > now
            or node._links._suspect.get(peer, now) > now
        ):
            continue
        d = pos ^ tree.author_pos
        if d < mine and (best is None or (d, peer) < best):
            best = (d, peer)
    return None if best is None else best[1]


def test_tree_dues_follow_every_change() -> None:
    """Deadlines set, moved and cleared in any order: the kept earliest is the scan's."""
    import random

    rng = random.Random(5)
    dues = TreeDues()
    trees = [Tree.__new__(Tree) for _ in range(4)]
    for t in trees:
        for name in ("join_", "recheck_at_", "heads_due_", "members_due_", "summary_due_"):
            setattr(t, name, None)
        t.dues = dues
    names = ("join", "recheck_at", "heads_due", "members_due", "summary_due")
    for _ in range(5000):
        tree = rng.choice(trees)
        name = rng.choice(names)
        at = None if rng.random() < 0.3 else float(rng.randint(0, 40))
        if name == "join":
            value: Any = None if at is None else JoinAttempt(peer="p", deadline=at, tried=set())
        else:
            value = at
        setattr(tree, name, value)
        scan = min(
            (
                x
                for t in trees
                for x in (
                    None if t.join is None else t.join.deadline,
                    t.recheck_at,
                    t.heads_due,
                    t.members_due,
                    t.summary_due,
                )
                if x is not None
            ),
            default=float("inf"),
        )
        if rng.random() < 0.5:  # asked now and then, as get_timer() is
            assert dues.earliest(trees) == scan


@pytest.mark.slow
def test_kept_answers_equal_the_scans_in_a_sybil_run(monkeypatch: pytest.MonkeyPatch) -> None:
    checked = {"timer": 0, "hop": 0, "hop_found": 0}
    get_timer = PulsarcastNode.get_timer
    next_hop = Membership._next_hop

    def timer(self: Any) -> float | None:
        want = _timer_by_scan(self)
        got = get_timer(self)
        assert got == want
        checked["timer"] += 1
        return got

    def hop(
        self: Any, now: float, tree: Tree, exclude: Iterable[str] = (), *, suspects: bool = False
    ) -> str | None:
        exclude = set(exclude)
        want = _hop_by_scan(self, now, tree, exclude, suspects)
        got = next_hop(self, now, tree, exclude, suspects=suspects)
        assert got == want
        checked["hop"] += 1
        checked["hop_found"] += got is not None
        return got

    monkeypatch.setattr(PulsarcastNode, "get_timer", timer)
    monkeypatch.setattr(Membership, "_next_hop", hop)
    config = SimConfig(
        nodes=40,
        topics=4,
        events=60,
        seed=3,
        rate=2.0,
        grace=40.0,
        loss=0.05,
        latency=parse_latency("50ms"),
        attack=parse_attack("sybil=40"),
    )
    sim = Simulation(config)
    sim.run()
    assert len(sim.attackers) == 40
    assert checked["timer"] > 10_000
    assert checked["hop"] > 1_000 and checked["hop_found"] > 500
