"""The dissemination tree of one topic, as a state machine (Algorithm 2, docs/protocol.md §5-§6).

Theory of operation
-------------------
A node's place in a topic's tree is implied by the fields of its :class:`~._tree.Tree`
(``joined``, ``parent``, ``join``, ``leaf``) and whether it is the topic's author.
:func:`tree_state` is the one place that reads them as a :class:`TreeState`; the rest
of the core asks it instead of testing the fields again.

:data:`TRANSITIONS` is the transition table as data, in the manner of h11's
``_state.py``: for each state and tree input, the states the node may be in after
it, and what it does. An input has more than one possible next state when the
outcome depends on what the node knows (is a live peer closer to the author? is the
topic still wanted?). The table is the specification the membership code
(:mod:`._membership`) follows; ``tests/test_core_treestate.py`` drives seeded
networks and checks that every transition a node makes is in it, and that
docs/protocol-notes.md holds exactly :func:`render_table`'s rendering.

A node that is not in the tree keeps no state for the topic, or keeps it as
``NONE`` while it is wanted (a subscriber between two JOINs, a tree held for a
request). Dropping the tree state ("forget the topic") is a transition to ``NONE``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ._tree import Tree

__all__ = [
    "ACTING_ROOT_STATES",
    "ROOT_STATES",
    "TRANSITIONS",
    "Transition",
    "TreeInput",
    "TreeState",
    "next_states",
    "render_table",
    "tree_state",
]


class TreeState(enum.Enum):
    """Where a node stands in one topic's tree."""

    NONE = "none"
    """Not in the tree and no JOIN in flight (or no tree state kept at all)."""
    JOINING = "joining"
    """A JOIN in flight towards the author (greedy next hop), no parent yet."""
    JOINING_LEAF = "joining (leaf)"
    """A reader's leaf JOIN to a holder of the history in flight, no parent yet."""
    JOINED = "joined"
    """Acknowledged by ``parent`` (a relay or a subscriber below it)."""
    LEAF = "leaf"
    """Joined ``parent`` as a leaf (a reader below a holder): takes no children."""
    MOVING = "joined (switching)"
    """Joined, with a JOIN to another peer in flight: away from a lagging parent, or
    a reader towards a holder. The old parent stays until the new one accepts (make
    before break)."""
    ACTING_ROOT = "acting root"
    """Joined without a parent, not the author: no live peer is closer to the author
    (root failover, §6); it looks again every ``root_recheck_interval``."""
    CONVERGING = "acting root (joining)"
    """An acting root with a JOIN in flight (a closer peer appeared, or a holder to
    read from): still root until the JOIN is acknowledged."""
    ROOT = "root"
    """The topic's author: always the root of its tree."""


ROOT_STATES = frozenset({TreeState.ROOT, TreeState.ACTING_ROOT, TreeState.CONVERGING})
"""In the tree without a parent: the author or an acting root (role ``root``)."""
ACTING_ROOT_STATES = frozenset({TreeState.ACTING_ROOT, TreeState.CONVERGING})
"""Root of the tree without being its author (``TopicState.acting_root``)."""


def tree_state(tree: Tree, peer_id: str) -> TreeState:
    """The state of ``peer_id``'s node in ``tree`` (derived from its fields only)."""
    if tree.author == peer_id:
        return TreeState.ROOT
    if tree.joined:
        if tree.parent is None:
            return TreeState.ACTING_ROOT if tree.join is None else TreeState.CONVERGING
        if tree.join is not None:
            return TreeState.MOVING
        return TreeState.LEAF if tree.leaf else TreeState.JOINED
    if tree.join is not None:
        return TreeState.JOINING_LEAF if tree.join.leaf else TreeState.JOINING
    return TreeState.NONE


class TreeInput(enum.Enum):
    """What moves a tree from state to state (the membership module's entry points)."""

    NEW_TREE = "topic first known"
    WANTED = "subscribe / publish / follow / child adopted"
    READ = "read (holders given or not)"
    JOIN = "JOIN from a peer"
    JOIN_ACK_OK = "JOIN_ACK ok from the JOIN's peer"
    JOIN_ACK_REFUSED = "JOIN_ACK refused from the JOIN's peer"
    JOIN_ACK_LATE = "JOIN_ACK from another peer"
    JOIN_TIMEOUT = "`join_timeout` passed"
    JOIN_PEER_LOST = "LEAVE from / failure of the JOIN's peer"
    PARENT_LOST = "LEAVE from parent, parent silent, `peer_unreachable`, parent withholding"
    PARENT_LAGGING = "parent lagging (PINGs or probe unanswered in time)"
    ROOM_AT_ROOT = "MEMBERS from the parent: the root's list has room, we are not in it"
    CHILD_LOST = "LEAVE from child, child silent or failed, child silent in anti-entropy"
    UNWANTED = "unsubscribe / reader expired / last child gone"
    RECHECK = "`root_recheck_interval` passed"


S = TreeState
I = TreeInput  # noqa: E741


@dataclass(frozen=True, slots=True)
class Transition:
    """From ``state`` on ``input``: one of ``next``, doing ``action``."""

    state: TreeState
    input: TreeInput
    next: tuple[TreeState, ...]
    action: str


_ALL = tuple(TreeState)
_RETRY = "try the next closest peer (those tried are skipped; a reader: a holder first)"


def _t(
    states: TreeState | tuple[TreeState, ...],
    inp: TreeInput,
    nxt: TreeState | tuple[TreeState, ...] | None,
    action: str,
) -> list[Transition]:
    """Rows for each of ``states``; ``nxt=None``: the state stays. An empty ``action``:
    nothing more to say there (a row with no action at all is left out of the doc)."""
    out = []
    for s in states if isinstance(states, tuple) else (states,):
        n = (s,) if nxt is None else nxt if isinstance(nxt, tuple) else (nxt,)
        out.append(Transition(s, inp, n, action))
    return out


def _retry(inp: TreeInput, what: str) -> list[Transition]:
    """The JOIN in flight failed: the next peer (Algorithm 2), else fall back."""
    return (
        _t(
            (S.JOINING, S.JOINING_LEAF),
            inp,
            (S.JOINING, S.JOINING_LEAF, S.ACTING_ROOT),
            f"{what}: {_RETRY}; none left: act as root",
        )
        + _t(
            S.MOVING,
            inp,
            (S.MOVING, S.JOINED, S.LEAF),
            f"{what}: {_RETRY}; none left, or a move up to the root, or away from a "
            "lagging parent heard from since: stay with the parent",
        )
        + _t(
            S.CONVERGING,
            inp,
            (S.CONVERGING, S.ACTING_ROOT),
            f"{what}: {_RETRY}; none left: stay acting root",
        )
    )


def _table() -> tuple[Transition, ...]:
    joining = (S.JOINING, S.JOINING_LEAF)
    in_tree = (S.JOINED, S.LEAF, S.MOVING, S.ACTING_ROOT, S.CONVERGING)
    rows = (
        _t(S.NONE, I.NEW_TREE, (S.NONE, S.ROOT), "keep the topic's tree state; its author is root")
        + _t(_ALL, I.NEW_TREE, None, "")
        + _t(
            S.NONE,
            I.WANTED,
            (S.JOINING, S.ACTING_ROOT),
            "JOIN the known live peer closest to the author and strictly closer than us "
            "(Algorithm 2); none: act as root, recheck in `root_recheck_interval` (§6)",
        )
        + _t(_ALL[1:], I.WANTED, None, "")
        + _t(
            S.NONE,
            I.READ,
            (S.JOINING_LEAF, S.JOINING, S.ACTING_ROOT),
            "only reading, holders given: leaf JOIN to the first holder, whatever its "
            "distance; else as wanted",
        )
        + _t(
            (S.JOINED, S.LEAF),
            I.READ,
            S.MOVING,
            "only reading, parent not a holder: leaf JOIN to a holder, keep the parent",
        )
        + _t(S.ACTING_ROOT, I.READ, S.CONVERGING, "only reading: leaf JOIN to a holder")
        + _t(_ALL, I.READ, None, "")
        + _t(
            _ALL,
            I.JOIN,
            None,
            "from a farther peer (a leaf JOIN: to a holder in the tree, whatever the "
            "distance): add child, JOIN_ACK ok; not farther, our parent, or we hang (or "
            "are becoming) a leaf: JOIN_ACK refused (no cycles)",
        )
        + _t(
            S.NONE,
            I.JOIN,
            (S.JOINING, S.ACTING_ROOT, S.ROOT),
            "a child adopted outside the tree: join upward (become a relay); a JOIN for "
            "one's own topic not held: keep it, as its root",
        )
        + _t(S.JOINING, I.JOIN_ACK_OK, S.JOINED, "")
        + _t(S.JOINING_LEAF, I.JOIN_ACK_OK, S.LEAF, "")
        + _t((S.MOVING, S.CONVERGING), I.JOIN_ACK_OK, (S.JOINED, S.LEAF), "")
        + _t(
            (S.JOINING, S.JOINING_LEAF, S.MOVING, S.CONVERGING),
            I.JOIN_ACK_OK,
            (),
            "parent := sender; send what was published outside the tree, the window "
            "(HEADS); LEAVE to the old parent, if any",
        )
        + _t(_ALL, I.JOIN_ACK_LATE, None, "an ok from a peer not (or no longer) wanted: LEAVE it")
        + _retry(I.JOIN_ACK_REFUSED, "refused")
        + _retry(I.JOIN_TIMEOUT, "no answer")
        + _retry(I.JOIN_PEER_LOST, "gone")
        + _t(
            (S.JOINED, S.LEAF, S.MOVING),
            I.PARENT_LOST,
            (S.JOINING, S.JOINING_LEAF, S.ACTING_ROOT, S.NONE),
            "mark it suspect; re-join through another peer, children kept (§6); "
            "nothing wants the topic any more: forget it",
        )
        + _t(
            (S.JOINED, S.LEAF),
            I.PARENT_LAGGING,
            S.MOVING,
            "mark it suspect; a live peer closer to the author: JOIN it (one try), keeping "
            "the slow parent until JOIN_ACK ok (make before break); nobody: stay",
        )
        + _t((S.JOINED, S.LEAF, S.MOVING), I.PARENT_LAGGING, None, "")
        + _t(
            S.JOINED,
            I.ROOM_AT_ROOT,
            S.MOVING,
            "flat trees: JOIN the root, once per MEMBERS epoch, keeping the parent until "
            "JOIN_ACK ok; refused or no answer: stay with the parent",
        )
        + _t(_ALL, I.ROOM_AT_ROOT, None, "")
        + _t(
            joining + in_tree,
            I.CHILD_LOST,
            S.NONE,
            "drop the child (failed: LEAVE to it, in case the report was late and it "
            "is back); nothing wants the topic any more: as unwanted",
        )
        + _t(_ALL, I.CHILD_LOST, None, "")
        + _t(
            joining + in_tree,
            I.UNWANTED,
            S.NONE,
            "LEAVE to the parent and the JOIN's peer, forget the topic",
        )
        + _t(_ALL, I.UNWANTED, None, "")
        + _t(
            S.ACTING_ROOT,
            I.RECHECK,
            (S.CONVERGING, S.ACTING_ROOT),
            "a closer live (or recently failed) peer known: JOIN it while still acting "
            "root; none: recheck later",
        )
        + _t(
            S.CONVERGING,
            I.RECHECK,
            S.CONVERGING,
            "a JOIN in flight: left to its own timeout (the routing refresh makes every "
            "acting root recheck at once)",
        )
    )
    return tuple(rows)


TRANSITIONS: tuple[Transition, ...] = _table()
"""The transition table. A ``(state, input)`` pair may have several rows: their next
states and actions add up. Inputs a state has no row for do not occur there."""


def _next_table() -> dict[tuple[TreeState, TreeInput], frozenset[TreeState]]:
    out: dict[tuple[TreeState, TreeInput], set[TreeState]] = {}
    for t in TRANSITIONS:
        out.setdefault((t.state, t.input), set()).update(t.next)
    return {k: frozenset(v) for k, v in out.items()}


_NEXT = _next_table()


def next_states(state: TreeState, inp: TreeInput) -> frozenset[TreeState]:
    """Every state the table allows after ``inp`` in ``state`` (empty: none)."""
    return _NEXT.get((state, inp), frozenset())


def render_table() -> str:
    """The table as markdown (docs/protocol-notes.md "Tree state per topic" holds it):
    one row per state and input with an action, next states in table order; rows that
    leave the state as it is, with the same action in several states, are merged
    (``any``: in every state)."""
    rows: dict[tuple[TreeState, TreeInput], tuple[list[TreeState], list[str]]] = {}
    for t in TRANSITIONS:
        nxt, actions = rows.setdefault((t.state, t.input), ([], []))
        nxt.extend(n for n in t.next if n not in nxt)
        if t.action and t.action not in actions:
            actions.append(t.action)
    states, inputs = list(TreeState), list(TreeInput)
    merged: dict[tuple[TreeInput, str], list[TreeState]] = {}
    out: list[tuple[int, int, str]] = []
    for (s, i), (nxt, actions) in rows.items():
        if not actions:
            continue
        action = "; ".join(actions)
        if nxt == [s]:
            merged.setdefault((i, action), []).append(s)
            continue
        nexts = " / ".join(n.value for n in nxt)
        out.append(
            (states.index(s), inputs.index(i), f"| {s.value} | {i.value} | {nexts} | {action} |")
        )
    for (i, action), where in merged.items():
        name = "any" if len(where) == len(states) else " / ".join(w.value for w in where)
        first = min(states.index(w) for w in where)
        out.append((first, inputs.index(i), f"| {name} | {i.value} | (unchanged) | {action} |"))
    lines = ["| state | input | next state | action |", "|---|---|---|---|"]
    lines += [line for _, _, line in sorted(out)]
    return "\n".join(lines) + "\n"
