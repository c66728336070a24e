"""Which subscribers announce a topic (docs/sidecar.md "Providing").

A subscriber makes itself findable as a holder of a topic's history with one
provider record per topic (``provide/once`` of the topic's first version), never
one per event (docs/protocol.md §5). Every subscriber doing so made a topic's DHT cost
grow with its audience: in a 20-node cluster each announcement moved ~30 KB of
LAN-DHT traffic, and the 265 subscriptions of the benchmark workload ~8 MB, about
half of Pulsarcast's bytes in a run. A reader looks up at most
:data:`~sidecar._readers.FINDPROVS_NUM` (8) holders anyway.

So a topic is announced by its author, and by the ``k`` subscribers whose peer IDs
are closest to the topic among the members its tree's root lists (MEMBERS: the root
and its children, ``TopicState.members``), each node deciding alone from the same
list: ``sha256(peer ID)`` XOR ``sha256`` digest of the topic's first version,
smallest first, the author left out (it announces anyway). A node outside the list
(below a relay of a topic whose root has many children) ranks itself among the
listed ones. While a node holds no list yet (not joined, or its parent has not
passed one on) it waits, at most :data:`MEMBERS_WAIT` seconds after it first
wanted to announce, then announces: not knowing is no reason to stay unfindable.
Membership changes are followed: a node that moves into the ``k`` closest announces
at the next housekeeping tick, one that moves out lets its record expire (it does not
refresh it every :data:`~sidecar._driver.TOPIC_REANNOUNCE`). ``k = 0``: every
subscriber announces, as before.

Only a holder of the topic's *whole* history announces it, and only such holders are
ranked: a subscriber whose subtree's summary prunes (tree filters: it and the nodes
below it want part of the topic) keeps only the events that summary matches, so a
reader sent to it would find a history with holes. The root's list carries each
member's summary (MEMBERS), so every node leaves out the same members. A topic whose
subscribers all filter is announced by its author alone, which is also the only node
holding all its events.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable

from pulsarcast_ipfs.core._cid import CID

__all__ = ["MEMBERS_WAIT", "TOPIC_ANNOUNCERS", "announcers", "should_announce"]

TOPIC_ANNOUNCERS = 4
"""Subscribers per topic that announce it besides its author (the default ``k``).

Was 8. Each announcement is a DHT ``provide``: a closest-peers query and an
ADD_PROVIDER to each of the closest, ~18 KB of LAN-DHT traffic and a share of every
Kubo's CPU at 20 nodes. 253 subscriptions to 23 topics on a 20-node cluster, Kubo's
CPU while subscribing and 8 s after (two runs each): k = 8 8.4 and 7.7 s, k = 4 6.9
and 8.3 s, k = 2 6.0 and 6.8 s; in the 20 events/s benchmark k = 2 moved 3.6 MB of
LAN DHT against 6.1 (session 17). Four announcers and the author are five live
holders a reader can find while a topic has five subscribers; an announcer that
leaves is replaced by the next closest at the next housekeeping tick."""
MEMBERS_WAIT = 30.0
"""Seconds a subscriber without the root's member list waits before it announces."""


# Cached: every housekeeping tick ranks every subscribed topic's members, and
# multiformats' ``raw_digest`` (run-time type checks) was 2.5 % of a sidecar's busy
# CPU at 20 events/s (py-spy); the answers never change.
@functools.lru_cache(maxsize=4096)
def _peer_digest(peer: str) -> int:
    return int.from_bytes(hashlib.sha256(peer.encode()).digest(), "big")


@functools.lru_cache(maxsize=1024)
def _topic_digest(topic: CID) -> int:
    return int.from_bytes(topic.raw_digest, "big")


def _distance(topic_digest: int, peer: str) -> int:
    return topic_digest ^ _peer_digest(peer)


def announcers(topic: CID, members: Iterable[str], author: str, k: int) -> list[str]:
    """The ``k`` peers of ``members`` (the author left out) closest to ``topic``."""
    digest = _topic_digest(topic)
    ranked = sorted(set(members) - {author}, key=lambda p: (_distance(digest, p), p))
    return ranked[:k]


def should_announce(
    *,
    topic: CID,
    me: str,
    author: str,
    members: Iterable[str],
    k: int,
    whole: bool = True,
    partial: Iterable[str] = (),
) -> bool | None:
    """Whether node ``me`` announces ``topic``; ``None``: it cannot tell yet (no list).

    ``whole``: ``me`` keeps the topic's whole history; ``partial``: the ``members``
    that keep part of it (tree filters). Only holders of the whole history announce
    and are ranked: a provider record says "the topic's history is here"."""
    if me == author:
        return True
    if not whole:
        return False
    if k == 0:
        return True
    listed = set(members)
    if not listed:
        return None
    return me in announcers(topic, (listed - set(partial)) | {me}, author, k)
