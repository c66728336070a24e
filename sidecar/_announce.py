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
refresh it every :data:`TOPIC_REANNOUNCE`). ``k = 0``: every
subscriber announces, as before.

Only a holder of the topic's *whole* history announces it, and only such holders are
ranked: a subscriber whose subtree's summary prunes (tree filters: it and the nodes
below it want part of the topic) keeps only the events that summary matches, so a
reader sent to it would find a history with holes. The root's list carries each
member's summary (MEMBERS), so every node leaves out the same members. A topic whose
subscribers all filter is announced by its author alone, which is also the only node
holding all its events.

:class:`TopicAnnouncer` carries the policy out: it owns which topics this node
announced and when, which wait for a member list and which it leaves to closer
announcers, pins and announces through the block store, and chooses at start
whether own blocks also need ``provide/once`` (Kubo's ``Provide.Strategy``).
"""

from __future__ import annotations

import functools
import hashlib
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from pulsarcast_ipfs.core import TopicState, cid_from_str, cid_str
from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.kubo import KuboClient, KuboError

from ._state import StateStore
from ._store import BlockStore, kubo_announces_pins

__all__ = [
    "MEMBERS_WAIT",
    "TOPIC_ANNOUNCERS",
    "TOPIC_ANNOUNCE_RETRY",
    "TOPIC_REANNOUNCE",
    "AnnounceHost",
    "TopicAnnouncer",
    "announcers",
    "should_announce",
]

log = logging.getLogger("pulsarcast.sidecar")

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


TOPIC_REANNOUNCE = 12 * 3600.0
"""A subscribed topic is announced (``provide/once``) again this often."""
TOPIC_ANNOUNCE_RETRY = 60.0
"""After a failed topic announcement (descriptor not readable), try again this soon."""


class AnnounceHost(Protocol):
    """What announcing needs of the driver."""

    @property
    def clock(self) -> Callable[[], float]: ...

    @property
    def peer_id(self) -> str: ...

    @property
    def state(self) -> StateStore:
        """The persisted subscriptions and created topics."""
        ...

    @property
    def blocks(self) -> Mapping[CID, bytes]:
        """Recently stored descriptor blocks."""
        ...

    def topic_state(self, cid: CID) -> TopicState | None:
        """This node's place in topic ``cid``'s tree (``None``: not in it)."""
        ...


class TopicAnnouncer:
    """Announces the subscribed topics this node is among the announcers of."""

    def __init__(
        self,
        host: AnnounceHost,
        *,
        store: BlockStore,
        kubo: KuboClient,
        k: int,
        fetch_timeout: float,
    ) -> None:
        self._h = host
        self._store = store
        self._kubo = kubo
        self._k = k
        self._fetch_timeout = fetch_timeout
        self.announced: dict[CID, float] = {}
        """Subscribed topics (first versions) announced, with when (the host's clock)."""
        self._waiting: dict[CID, float] = {}
        """Subscribed topics whose root's member list this node waits for, since when."""
        self.not_announcing: dict[CID, float] = {}
        """Subscribed topics this node leaves to closer announcers (since when)."""
        store.on_topic_announced = self._topic_announced

    @property
    def left_to_announcers(self) -> int:
        """Subscribed topics this node leaves to closer announcers (a gauge)."""
        return len(self.not_announcing)

    def announce(self, spawn: Callable[..., object]) -> None:
        """Announce each subscribed topic once (pin its first version, ``provide/once``),
        again every :data:`TOPIC_REANNOUNCE`: one provider record per topic per node,
        never one per event, so that a non-member can find who holds its history; and
        only if this node is among the topic's announcers (:func:`should_announce`).
        ``spawn`` starts the pinning of a topic (the driver's task group)."""
        h = self._h
        now = h.clock()
        subscriptions = h.state.state.subscriptions
        for root_s in list(subscriptions):
            try:
                root = cid_from_str(root_s)
            except ValueError:
                continue
            last = self.announced.get(root)
            if last is not None and now - last < TOPIC_REANNOUNCE:
                continue  # before building its state: warm_members builds them all
            st = h.topic_state(root)
            if st is None or st.topic_cid != root:
                continue  # not resolved yet (a resumed subscription)
            if not self._announces(now, st):
                continue
            self.announced[root] = now
            if last is not None and self._store.has_topic(root):
                self._store.announce_topic(root)
            else:  # the first time, or its descriptor could not be read last time
                spawn(self._pin_topic, root)
        for root in list(self.announced):
            if cid_str(root) not in subscriptions:
                del self.announced[root]
                if cid_str(root) not in h.state.state.created:
                    self._store.unpin_topic(root)
        for waits in (self._waiting, self.not_announcing):
            for root in list(waits):
                if cid_str(root) not in subscriptions:
                    del waits[root]

    def _announces(self, now: float, st: TopicState) -> bool:
        """Whether this node announces the topic of ``st`` now (:func:`should_announce`)."""
        root = st.topic_cid
        decided = should_announce(
            topic=root,
            me=self._h.peer_id,
            author=st.author,
            members=st.members,
            k=self._k,
            whole=st.whole_history,
            partial=st.partial_members,
        )
        if decided is None:  # no member list yet: wait for one, not for ever
            since = self._waiting.setdefault(root, now)
            if now - since < MEMBERS_WAIT:
                return False
            log.info(
                "topic %s: no member list after %.0f s, announcing", cid_str(root), now - since
            )
            decided = True
        self._waiting.pop(root, None)
        if decided:
            self.not_announcing.pop(root, None)
            return True
        if root not in self.not_announcing:
            if st.whole_history:
                log.info(
                    "topic %s: not announcing it, the %d members closest to it do",
                    cid_str(root),
                    self._k,
                )
            else:
                log.info(
                    "topic %s: not announcing it, this node keeps only the events its"
                    " filters match",
                    cid_str(root),
                )
            self.not_announcing[root] = now
        return False

    def _topic_announced(self, root: CID, ok: bool) -> None:
        if not ok and root in self.announced:  # try again soon, not in 12 h
            self.announced[root] = self._h.clock() - TOPIC_REANNOUNCE + TOPIC_ANNOUNCE_RETRY

    async def _pin_topic(self, root: CID) -> None:
        data = self._h.blocks.get(root)
        if data is None:
            try:
                data = await self._kubo.block_get(root, max_wait=self._fetch_timeout)
            except KuboError as exc:
                log.warning("cannot announce topic %s (descriptor not readable: %s)", root, exc)
                self.announced[root] = self._h.clock() - TOPIC_REANNOUNCE + TOPIC_ANNOUNCE_RETRY
                return
        log.info("announcing topic %s (pinned, provide/once)", cid_str(root))
        self._store.pin_topic(root, data)

    async def choose_mode(self, mode: str) -> None:
        """Whether own blocks also need ``provide/once`` after pinning (``announce``:
        ``pin``, ``provide-once``, or ``auto``: from Kubo's ``Provide.Strategy``)."""
        if mode == "auto":
            try:
                strategy = await self._kubo.config_get("Provide.Strategy")
            except KuboError as exc:
                log.warning("cannot read Kubo's Provide.Strategy (%s): using provide/once", exc)
                mode = "provide-once"
            else:
                mode = "pin" if kubo_announces_pins(strategy) else "provide-once"
                log.info(
                    "Kubo Provide.Strategy=%s: own blocks announced by %s",
                    "(default all)" if strategy is None else strategy,
                    "pinning" if mode == "pin" else "pinning and provide/once",
                )
        self._store.provide_once = mode == "provide-once"
