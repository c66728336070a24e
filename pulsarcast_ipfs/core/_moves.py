"""The transition table enforced: every tree input is checked against :data:`TRANSITIONS`.

Theory of operation
-------------------
A node's place in a topic's tree changes only in the membership entry points: the
methods that are one :class:`~._treestate.TreeInput` for the trees they touch (a JOIN
for its topic, a peer's failure for every tree it was in, the recheck of an acting
root...). Each is wrapped by :func:`tree_input`, which names the input per tree before
the call, reads each named tree's :func:`~._treestate.tree_state` before and after,
and raises :class:`~._errors.LocalProtocolError` when the move is not in the table: a
bug in the node, never something a peer can cause. A tree dropped by the call is in
state ``NONE`` after it.

The check works per input, not per field write, in the manner of h11's
``ConnectionState.process_event``: one input may write several fields on its way (a
lost parent clears the parent, then the next JOIN is sent), and only where it ends
must be in the table. An entry point called from inside another (a JOIN adopting a
child outside the tree joins upward: ``WANTED`` inside ``JOIN``) is part of the
outer input and is not checked on its own; the outer one is.

The per-tree labels live here, beside the wrapper, so that the table, the code that
follows it, and the test that drives it (``tests/test_core_treestate.py``, which also
checks that no tree moves outside the entry points) name the inputs alike.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from ._cid import CID
from ._errors import LocalProtocolError
from ._treestate import TreeInput, TreeState, next_states, tree_state

if TYPE_CHECKING:
    from ._tree import Tree

__all__ = ["ENTRY_POINTS", "Labels", "check_move", "entry_point", "tree_input"]

Labels = Mapping[CID, TreeInput]
"""Tree key -> the input a call is, for that tree."""

F = TypeVar("F", bound=Callable[..., Any])


def check_move(where: str, key: CID, old: TreeState, inp: TreeInput, new: TreeState) -> None:
    """Raise :class:`LocalProtocolError` unless ``(old, inp) -> new`` is in the table."""
    if new not in next_states(old, inp):
        raise LocalProtocolError(
            f"{where}: tree {key!r} moved {old.value!r} -> {new.value!r} on "
            f"{inp.value!r}, which the transition table does not allow"
        )


def _states(node: Any, keys: Any) -> dict[CID, TreeState]:
    trees: dict[CID, Tree] = node._trees
    out = {}
    for key in keys:
        tree = trees.get(key)
        out[key] = TreeState.NONE if tree is None else tree_state(tree, node.peer_id)
    return out


def tree_input(labels: Callable[..., Labels]) -> Callable[[F], F]:
    """Wrap a membership entry point: ``labels(node, *args)`` names, per tree, the
    input the call is; the call's outcome for each is checked against the table."""

    def wrap(method: F) -> F:
        name = method.__name__

        @functools.wraps(method)
        def checked(node: Any, *args: Any, **kwargs: Any) -> Any:
            if node._in_tree_input:
                return method(node, *args, **kwargs)
            label = labels(node, *args, **kwargs)
            before = _states(node, label)
            node._in_tree_input = True
            try:
                result = method(node, *args, **kwargs)
            finally:
                node._in_tree_input = False
            for key, new in _states(node, label).items():
                check_move(name, key, before[key], label[key], new)
            return result

        checked.tree_input = labels  # type: ignore[attr-defined]
        return checked  # type: ignore[return-value]

    return wrap


def _one(inp: TreeInput) -> Callable[..., Labels]:
    """The call is ``inp`` for the tree it is given (its second argument)."""
    return lambda node, now, tree, *args, **kwargs: {tree.key: inp}


def _by_peer(node: Any, peer: str, *, child_first: bool) -> dict[CID, TreeInput]:
    """Per tree: what losing ``peer`` is there (parent, JOIN's peer, child), in the
    order the code looks (a LEAVE: child first; a failure: child last)."""
    out: dict[CID, TreeInput] = {}
    for key, tree in node._trees.items():
        if child_first and peer in tree.children:
            out[key] = TreeInput.CHILD_LOST
        elif tree.parent == peer:
            out[key] = TreeInput.PARENT_LOST
        elif tree.join is not None and tree.join.peer == peer:
            out[key] = TreeInput.JOIN_PEER_LOST
        elif peer in tree.children:
            out[key] = TreeInput.CHILD_LOST
    return out


def _leave(node: Any, now: float, peer: str, rpc: Any) -> Labels:
    tree = node._trees.get(rpc.topic)
    if tree is None:
        return {}
    return {k: v for k, v in _by_peer(node, peer, child_first=True).items() if k == rpc.topic}


def _join_ack(node: Any, now: float, peer: str, rpc: Any) -> Labels:
    tree = node._trees.get(rpc.topic)
    if tree is None or tree.join is None or tree.join.peer != peer:
        return {rpc.topic: TreeInput.JOIN_ACK_LATE}
    return {rpc.topic: TreeInput.JOIN_ACK_OK if rpc.ok else TreeInput.JOIN_ACK_REFUSED}


def _lagging(node: Any, now: float, peer: str) -> Labels:
    return {k: TreeInput.PARENT_LAGGING for k, t in node._trees.items() if t.parent == peer}


ENTRY_POINTS: dict[str, Callable[..., Labels]] = {
    "_new_tree": lambda node, now, root: {root.cid: TreeInput.NEW_TREE},
    "_ensure_joined": _one(TreeInput.WANTED),
    "_read_tree": _one(TreeInput.READ),
    "_on_join": lambda node, now, peer, rpc: {rpc.topic: TreeInput.JOIN},
    "_on_join_ack": _join_ack,
    "_join_timed_out": _one(TreeInput.JOIN_TIMEOUT),
    "_on_leave": _leave,
    "_peer_failed": lambda node, now, peer: _by_peer(node, peer, child_first=False),
    "_parent_lagging": _lagging,
    "_maybe_leave": _one(TreeInput.UNWANTED),
    "_recheck_root": _one(TreeInput.RECHECK),
    "_room_at_root": _one(TreeInput.ROOM_AT_ROOT),
    # relays that lie (._guard): a withholding parent left, a silent child dropped
    "_leave_bad_parent": _one(TreeInput.PARENT_LOST),
    "_evict_silent": _one(TreeInput.CHILD_LOST),
}
"""The membership entry points (by method name) and what each is, per tree. Each is
decorated with ``@tree_input(ENTRY_POINTS[name])`` where it is defined; a test checks
that every one is."""


def entry_point(method: F) -> F:
    """``@tree_input`` with the labels :data:`ENTRY_POINTS` gives the method's name."""
    return tree_input(ENTRY_POINTS[method.__name__])(method)
