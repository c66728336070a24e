"""Immutable values shared by every node of one process (the simulator, CoreNet).

A simulation runs hundreds of :class:`~._node.PulsarcastNode` objects in one process,
and each keeps, per event it has seen, a few small values that are functions of the
event alone: its entry in the event cache (tree key and descriptor) and its term in
the DIGEST fingerprints. Built once, every node holds a reference to the same object;
with the parsed summaries (``_filters.parse_summary``) that took 62 MiB off the 754 MiB
peak of a 300-node, 1,500-call simulation (docs/simulator.md "Memory per node"). The
values are immutable (tuples, ints) and exactly those the node would build, so sharing
them changes nothing a node does.

Each memo is bounded and emptied when full (no ordering to keep, and a full clear
costs nothing per call): a value then built again is equal, only no longer shared.
A sidecar runs one node; there each memo holds what its own node holds anyway. Pure:
no clock, no I/O.
"""

from __future__ import annotations

from typing import Any, Final

from pulsarcast_ipfs.core._cid import CID

from ._descriptors import EventDescriptor

__all__ = ["MEMO_SIZE", "cid_term", "event_entry", "shared_term"]

MEMO_SIZE: Final = 16384
"""Entries each memo holds before it is emptied."""

_entries: dict[CID, tuple[CID, EventDescriptor]] = {}
_terms: dict[CID, int] = {}


def event_entry(tree_key: CID, ev: EventDescriptor) -> tuple[CID, EventDescriptor]:
    """``(tree_key, ev)``, the one tuple of the process for that pair when it can."""
    entry = _entries.get(ev.cid)
    if entry is not None and entry[1] is ev and entry[0] == tree_key:
        return entry
    entry = (tree_key, ev)
    if len(_entries) >= MEMO_SIZE:
        _entries.clear()
    _entries[ev.cid] = entry
    return entry


def cid_term(cid: Any) -> int:
    """A CID's term in a DIGEST fingerprint sum (:mod:`._window`): its last eight
    bytes (the end of its sha2-256 digest), big-endian."""
    raw = cid._raw if type(cid) is CID else bytes(cid)
    return int.from_bytes(raw[-8:], "big")


def shared_term(cid: Any) -> int:
    """:func:`cid_term`, one int object per CID for the whole process."""
    term = _terms.get(cid)
    if term is None:
        term = cid_term(cid)
        if len(_terms) >= MEMO_SIZE:
            _terms.clear()
        _terms[cid] = term
    return term
