"""The tree state machine (core/_treestate.py): the node follows its table, and the
documentation's table is the table's rendering."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pulsarcast_ipfs.core import PulsarcastNode
from pulsarcast_ipfs.core._errors import LocalProtocolError
from pulsarcast_ipfs.core._moves import ENTRY_POINTS, Labels
from pulsarcast_ipfs.core._tree import Tree
from pulsarcast_ipfs.core._treestate import (
    TRANSITIONS,
    TreeInput,
    TreeState,
    next_states,
    render_table,
    tree_state,
)
from pulsarcast_ipfs.core.testing import CoreNet
from pulsarcast_ipfs.testing import GOLDEN_SCENARIOS, below_a_relay

DOC = Path(__file__).resolve().parent.parent / "docs" / "protocol-notes.md"
BEGIN = "<!-- tree state table: generated from core/_treestate.py, do not edit -->\n"
END = "<!-- end of tree state table -->\n"


def _states(node: PulsarcastNode) -> dict[Any, TreeState]:
    return {k: tree_state(t, node.peer_id) for k, t in node._trees.items()}


class Observer:
    """Every (state, input, next state) a node goes through, from the entry points."""

    def __init__(self) -> None:
        self.seen: set[tuple[TreeState, TreeInput, TreeState]] = set()
        self.bad: list[str] = []
        self._depth: dict[int, int] = {}
        self._last: dict[int, dict[Any, TreeState]] = {}
        # Keyed by id(): the nodes are kept alive, or a later scenario's node could get
        # the id of a collected one (and its topics the same CIDs: CoreNet is
        # deterministic) and be compared with that node's last states.
        self._alive: list[PulsarcastNode] = []

    def wrap(self, name: str, labels: Callable[..., Labels]) -> Callable[..., Any]:
        method = getattr(PulsarcastNode, name)

        @functools.wraps(method)
        def observed(node: PulsarcastNode, *args: Any, **kwargs: Any) -> Any:
            nid = id(node)
            if self._depth.get(nid):
                return method(node, *args, **kwargs)
            if nid not in self._last:
                self._alive.append(node)
            before = _states(node)
            last = self._last.get(nid, {})
            for key in before.keys() | last.keys():
                was, now = last.get(key, TreeState.NONE), before.get(key, TreeState.NONE)
                if was is not now:
                    self.bad.append(f"{was} -> {now} outside the entry points (before {name})")
            label = labels(node, *args, **kwargs)
            self._depth[nid] = 1
            try:
                return method(node, *args, **kwargs)
            finally:
                self._depth[nid] = 0
                after = self._last[nid] = _states(node)
                for key in before.keys() | after.keys():
                    old = before.get(key, TreeState.NONE)
                    new = after.get(key, TreeState.NONE)
                    inp = label.get(key)
                    if inp is None:
                        if old is not new:
                            self.bad.append(f"{name}: {old} -> {new} for an unnamed tree")
                        continue
                    self.seen.add((old, inp, new))
                    if new not in next_states(old, inp):
                        self.bad.append(f"{name}: ({old}, {inp}) -> {new} is not in the table")

        return observed


@pytest.fixture
def observer(monkeypatch: pytest.MonkeyPatch) -> Iterator[Observer]:
    obs = Observer()
    for name, labels in ENTRY_POINTS.items():
        monkeypatch.setattr(PulsarcastNode, name, obs.wrap(name, labels))
    yield obs


def _lone_joiner() -> CoreNet:
    """The author is down when the only other node subscribes: its JOIN's peer (the
    author) is lost and nobody else is closer, so it acts as the root (this used to
    happen by chance in the orphan scenario, with CoreNet's earlier peer IDs)."""
    net = CoreNet(2, seed=1)
    author, member = net.peers
    topic = net.call(author, "create_topic", "alone")
    net.run_for(0.5)
    net.crash(author)
    net.call(member, "subscribe", topic)
    net.run_for(5)
    return net


def _lagging_relay() -> CoreNet:
    """A member below a relay (flat trees off) whose links slow down: it moves to a
    closer peer (made sure of here, whatever the split-identity scenarios do)."""
    net, topic, _, _, child, slow = below_a_relay()
    net.extra_delay = lambda a, b: 1.5 if slow in (a, b) else 0.0
    net.run_for(8)
    assert net.nodes[child].topic_state(topic).parent not in (None, slow)
    return net


def test_every_transition_the_node_makes_is_in_the_table(observer: Observer) -> None:
    for run in [*GOLDEN_SCENARIOS.values(), _lone_joiner, _lagging_relay]:
        run()
    assert sorted(set(observer.bad)) == []
    S, I = TreeState, TreeInput  # noqa: E741
    # The scenarios do reach the states the code used to leave implicit.
    for triple in [
        (S.NONE, I.NEW_TREE, S.ROOT),
        (S.NONE, I.WANTED, S.JOINING),
        (S.JOINING, I.JOIN_ACK_OK, S.JOINED),
        (S.NONE, I.JOIN, S.JOINING),
        (S.JOINED, I.PARENT_LOST, S.JOINING),
        (S.JOINING, I.JOIN_PEER_LOST, S.ACTING_ROOT),
        (S.ACTING_ROOT, I.RECHECK, S.CONVERGING),
        (S.CONVERGING, I.JOIN_ACK_OK, S.JOINED),
        (S.NONE, I.READ, S.JOINING_LEAF),
        (S.JOINING_LEAF, I.JOIN_ACK_OK, S.LEAF),
        (S.JOINED, I.PARENT_LAGGING, S.MOVING),
        (S.MOVING, I.JOIN_ACK_OK, S.JOINED),
        (S.JOINED, I.UNWANTED, S.NONE),
    ]:
        assert triple in observer.seen, triple


def test_every_entry_point_is_checked_at_run_time() -> None:
    for name in ENTRY_POINTS:
        assert getattr(getattr(PulsarcastNode, name), "tree_input", None) is ENTRY_POINTS[name], (
            name
        )


def test_an_illegal_move_is_a_local_protocol_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A planted bug: a JOIN that fails makes the node a leaf of the peer that did not
    take it (joining -> leaf on the JOIN's peer lost is in no row of the table)."""
    from pulsarcast_ipfs.core._membership import Membership

    join_next = Membership._join_next

    def bad_join_next(self: PulsarcastNode, now: float, tree: Tree, tried: set[str]) -> None:
        if tree.join is None:
            return join_next(self, now, tree, tried)
        tree.parent, tree.joined, tree.leaf, tree.join = tree.join.peer, True, True, None

    monkeypatch.setattr(Membership, "_join_next", bad_join_next)
    net = CoreNet(2, seed=1)
    author, member = net.peers
    topic = net.call(author, "create_topic", "alone")
    net.run_for(0.5)
    net.crash(author)
    net.call(member, "subscribe", topic)
    with pytest.raises(Exception, match="'joining' -> 'leaf' on \"LEAVE from / failure of") as err:
        net.run_for(30)
    assert isinstance(err.value.__cause__, LocalProtocolError)


def test_tree_fields_are_written_by_membership_only() -> None:
    """The state fields change in core/_membership.py alone (the checked entry points
    reach them there), never in another part of the node."""
    import re

    core = Path(__file__).resolve().parent.parent / "pulsarcast_ipfs" / "core"
    write = re.compile(r"\.(joined|parent|join|leaf)\s*(=|\+=)[^=]")
    found = [
        f"{path.name}:{i}"
        for path in sorted(core.glob("*.py"))
        if path.name not in ("_membership.py", "_tree.py", "testing.py")
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if write.search(line.split("#")[0]) and "tree" in line
    ]
    assert found == []


def test_tree_state_reads_the_fields() -> None:
    from pulsarcast_ipfs.core import TopicDescriptor
    from pulsarcast_ipfs.core._tree import JoinAttempt
    from pulsarcast_ipfs.core.testing import make_peer_ids

    me, author, other = make_peer_ids(3, seed=9)
    root = TopicDescriptor.new(name="t", author=author, now=1e9)
    tree = Tree(root=root, author_pos=0, latest=root)
    assert tree_state(tree, author) is TreeState.ROOT
    assert tree_state(tree, me) is TreeState.NONE
    tree.join = JoinAttempt(peer=other, deadline=0.0, tried={other}, leaf=True)
    assert tree_state(tree, me) is TreeState.JOINING_LEAF
    tree.join.leaf = False
    assert tree_state(tree, me) is TreeState.JOINING
    tree.joined = True
    assert tree_state(tree, me) is TreeState.CONVERGING
    tree.join = None
    assert tree_state(tree, me) is TreeState.ACTING_ROOT
    tree.parent = other
    assert tree_state(tree, me) is TreeState.JOINED
    tree.leaf = True
    assert tree_state(tree, me) is TreeState.LEAF
    tree.join = JoinAttempt(peer=author, deadline=0.0, tried={author})
    assert tree_state(tree, me) is TreeState.MOVING


def test_every_state_and_input_has_a_row() -> None:
    assert {t.state for t in TRANSITIONS} == set(TreeState)
    assert {t.input for t in TRANSITIONS} == set(TreeInput)
    assert all(t.next or t.action for t in TRANSITIONS)


def test_the_protocol_notes_hold_the_rendered_table() -> None:
    text = DOC.read_text()
    assert text.count(BEGIN) == 1 and text.count(END) == 1
    table = text[text.index(BEGIN) + len(BEGIN) : text.index(END)]
    assert table == render_table(), "regenerate: PYTHONPATH=. python tests/test_core_treestate.py"


def write_doc() -> None:
    """Put the rendered table between the markers of docs/protocol-notes.md."""
    text = DOC.read_text()
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    DOC.write_text(text[:start] + render_table() + text[end:])


if __name__ == "__main__":
    write_doc()
