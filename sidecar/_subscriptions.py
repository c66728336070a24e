"""The node's subscriptions: its explicit one and its consumers' (docs/http-api.md
"Consumers"; the consumers themselves: :mod:`._consumers`).

A topic is subscribed in the tree once, with the union of what wants it: the
*explicit* subscription (``POST /v1/topics/{cid}/subscribe``, kept until
``unsubscribe``) and every consumer of the topic. Whenever that union changes (a
consumer opens, closes or expires, the explicit subscription comes or goes) the core
is subscribed again with the new union (``subscribe(filters=)``: the tree summary
follows), or, when nothing wants the topic any more, unsubscribed. ``state.json``
keeps the explicit subscription's filter and ``fast`` (``filters``, ``fast``), the
topics held only for consumers (``consumer_only``) and the consumers.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from pulsarcast_ipfs.core import (
    MATCH_ALL,
    Filter,
    UnknownTopic,
    cid_from_str,
    cid_str,
    merge,
    parse_filter,
    render_filter,
)
from pulsarcast_ipfs.core._cid import CID

from ._consumers import Consumer, ConsumerPolicy, ConsumerRegistry
from ._host import NodeHost
from ._readers import Readers
from ._state import StateStore

__all__ = ["SubscriptionHost", "Subscriptions"]

log = logging.getLogger("pulsarcast.sidecar")


class SubscriptionHost(NodeHost, Protocol):
    """What the subscriptions need of the driver beyond feeding the core."""

    @property
    def state(self) -> StateStore: ...

    @property
    def reading(self) -> Readers: ...

    @property
    def last_seq(self) -> int:
        """The sequence number of the newest delivery in the log."""
        ...

    def subscribed_topic(self, root: CID, name: str) -> None:
        """Topic ``root`` is subscribed: persist and announce it."""
        ...

    def announce_topics(self) -> None: ...

    def persist(self) -> None: ...

    def wake_listeners(self) -> None: ...


class Subscriptions:
    """The explicit subscriptions and the consumers of one driver's node."""

    def __init__(self, host: SubscriptionHost, policy: ConsumerPolicy) -> None:
        self.d = host
        self.registry = ConsumerRegistry(policy=policy)

    # -- what the node wants ---------------------------------------------------------

    def explicit(self, root: str) -> bool:
        """Whether topic ``root`` is subscribed explicitly (not only for consumers)."""
        st = self.d.state.state
        return root in st.subscriptions and root not in st.consumer_only

    def interest(self, root: str) -> tuple[Filter, ...] | None:
        """The union the node subscribes ``root`` with (None: nothing wants it)."""
        explicit = self.explicit(root)
        text = self.d.state.state.filters.get(root) if explicit else None
        return self.registry.interest(
            root,
            explicit=parse_filter(text) if text is not None else None,
            explicit_all=explicit and text is None,
        )

    def fast(self, root: str) -> bool:
        explicit = self.explicit(root) and root in self.d.state.state.fast
        return explicit or self.registry.wants_fast(root)

    def resume(self) -> bool:
        """Re-subscribe what the persisted state says (§5 eventual delivery after a
        restart; the core was told what the delivery log holds when it was made), and
        drop the subscriptions nothing wants any more; whether the state changed."""
        st = self.d.state.state
        changed = False
        for root, since in list(st.subscriptions.items()):
            try:
                cid = cid_from_str(root)
            except ValueError:
                log.warning("skipping bad persisted topic CID %r", root)
                continue
            wanted = self.interest(root)
            if wanted is None:
                log.info("dropping subscription %s: no consumer wants it any more", root)
                del st.subscriptions[root]
                if root in st.consumer_only:
                    st.consumer_only.remove(root)
                changed = True
                continue
            log.info(
                "resuming subscription %s (since %.3f)%s",
                root,
                since,
                f" where {' | '.join(render_filter(f) for f in wanted)}"
                if wanted != (MATCH_ALL,)
                else "",
            )
            self.subscribe_node(cid, root, since=since)
        return changed

    def subscribe_node(self, cid: CID, root: str, *, since: float | None = None) -> bool:
        """Subscribe the core to ``cid`` with the union of ``root``'s interest; False if
        nothing wants it."""
        wanted = self.interest(root)
        if wanted is None:
            return False
        fast = self.fast(root)
        self.d.call(
            lambda now: self.d.node.subscribe(now, cid, since=since, fast=fast, filters=wanted)
        )
        return True

    def changed(self, root: str) -> None:
        """The interest in ``root`` changed: subscribe the core with the new union, or
        leave the topic when nothing wants it any more."""
        st = self.d.state.state
        try:
            cid = cid_from_str(root)
        except ValueError:
            return
        if self.interest(root) is not None:
            self.subscribe_node(cid, root)
        elif root in st.subscriptions:
            log.info("topic %s: its last consumer is gone, leaving it", root)
            try:
                self.d.call(lambda now: self.d.node.unsubscribe(now, cid))
            except UnknownTopic:
                pass
            st.subscriptions.pop(root, None)
            if root in st.consumer_only:
                st.consumer_only.remove(root)
            self.d.announce_topics()  # unpins the topic (unless this node created it)
        self.d.persist()

    # -- consumers -------------------------------------------------------------------

    async def open(
        self,
        cid: CID,
        *,
        root: CID,
        topic_name: str,
        filter: Filter | None,
        name: str | None,
        fast: bool,
        after: int | None,
        max_wait: float,
    ) -> tuple[Consumer, bool] | None:
        """Open (or take up the named) consumer of topic ``cid`` (first version ``root``)
        and subscribe the node with the new union; (the consumer, whether it is new), or
        None if the core did not know the topic within ``max_wait``."""
        d, st = self.d, self.d.state.state
        root_s = cid_str(root)
        cursor = after if after is not None else d.last_seq
        c, new = self.registry.open(
            d.clock(), root_s, filter=filter, cursor=cursor, name=name, fast=fast
        )
        if not new and after is not None:
            c.cursor = after  # asked for: replay (or skip) from there
        held = root_s in st.subscriptions
        if not held:
            st.consumer_only.append(root_s)
        self.subscribe_node(cid, root_s)
        if not await d.wait_for(lambda: d.known_root(cid) is not None, max_wait=max_wait):
            if new:
                self.registry.close(c.id)
            if not held and root_s in st.consumer_only and not self.registry.of_topic(root_s):
                st.consumer_only.remove(root_s)
                try:
                    d.call(lambda now: d.node.unsubscribe(now, cid))
                except UnknownTopic:
                    pass
            return None
        d.reading.forget(root)
        d.subscribed_topic(root, topic_name)  # persists
        log.info(
            "consumer %s of %s opened%s",
            c.id,
            root_s,
            f" where {render_filter(c.filter)}" if c.filter is not None else "",
        )
        return c, new

    def close(self, consumer_id: str) -> Consumer | None:
        """Close a consumer (None: no such consumer); its streams end."""
        c = self.registry.close(consumer_id)
        if c is None:
            return None
        log.info("consumer %s of %s closed", c.id, c.topic)
        self.changed(c.topic)
        self.d.wake_listeners()
        return c

    def expire(self, now: float) -> None:
        """Close the consumers idle past their grace (housekeeping)."""
        gone = self.registry.expire(now)
        for c in gone:
            log.info("consumer %s of %s idle past its grace: closed", c.id, c.topic)
        for root in {c.topic for c in gone}:
            self.changed(root)
        if gone:
            self.d.wake_listeners()

    # -- the explicit subscription ---------------------------------------------------

    def subscribe_explicit(self, cid: CID, root: str, *, fast: bool, filter: Filter | None) -> None:
        """Subscribe the core for ``POST …/subscribe``: that filter and ``fast`` joined
        with the consumers' (recorded by :meth:`explicit_done` once the topic is known)."""
        wanted = self.registry.interest(
            root, explicit=filter, explicit_all=filter is None or filter == MATCH_ALL
        )
        fast = fast or self.registry.wants_fast(root)
        self.d.call(lambda now: self.d.node.subscribe(now, cid, fast=fast, filters=wanted))

    def explicit_done(self, root: str, *, fast: bool, filter: Filter | None) -> None:
        st = self.d.state.state
        if filter is None or filter == MATCH_ALL:
            st.filters.pop(root, None)
        else:
            st.filters[root] = render_filter(filter)
        if fast and root not in st.fast:
            st.fast.append(root)
        elif not fast and root in st.fast:
            st.fast.remove(root)
        if root in st.consumer_only:
            st.consumer_only.remove(root)

    def unsubscribe_explicit(self, cid: CID, root: str) -> bool:
        """``POST …/unsubscribe``: drop the explicit subscription; the node stays
        subscribed (with their union) while consumers remain. Whether it still is."""
        st = self.d.state.state
        st.filters.pop(root, None)
        if root in st.fast:
            st.fast.remove(root)
        if self.registry.of_topic(root):
            if root in st.subscriptions and root not in st.consumer_only:
                st.consumer_only.append(root)
            self.subscribe_node(cid, root)
            self.d.persist()
            return True
        self.d.call(lambda now: self.d.node.unsubscribe(now, cid))
        st.subscriptions.pop(root, None)
        if root in st.consumer_only:
            st.consumer_only.remove(root)
        self.d.persist()
        self.d.announce_topics()  # unpins the topic (unless this node created it)
        return False

    # -- restart and status ----------------------------------------------------------

    def load(self, now: float) -> None:
        """Take the persisted consumers up (idle from ``now``); a consumer's topic that
        the state does not list as subscribed is subscribed for it."""
        st = self.d.state.state
        self.registry.load(now, st.consumers)
        for root in self.registry.topics():
            if root not in st.subscriptions:
                st.subscriptions[root] = now
                st.consumer_only.append(root)

    def save(self) -> None:
        self.d.state.state.consumers = self.registry.to_state()

    def subscribed(self, root: str) -> bool:
        """Whether the node is subscribed to topic ``root`` (explicitly or for consumers)."""
        return root in self.d.state.state.subscriptions

    def status(self, root: CID, *, subscribed: bool) -> dict[str, Any]:
        """A topic's subscription fields of ``/v1/status`` (docs/http-api.md): the
        union the node subscribes with (``filters``; ``filter``: merged into one), and
        the subtree summary it tells its parent (``summary``)."""
        root_s = cid_str(root)
        summary = list(self.d.node.subtree_summary(root))
        children = {p: list(t) for p, t in self.d.node.child_summaries(root).items()}
        if not subscribed:
            return {
                "filter": None,
                "filters": None,
                "explicit": False,
                "consumers": 0,
                "summary": summary,
                "child_summaries": children,
            }
        wanted = self.interest(root_s)
        everything = wanted is None or MATCH_ALL in wanted
        one: str | None = None
        if wanted is not None and not everything:
            merged = merge(wanted, 1) or wanted
            one = None if merged[0] == MATCH_ALL else render_filter(merged[0])
        return {
            "filter": one,
            "filters": None if everything or wanted is None else [render_filter(f) for f in wanted],
            "explicit": self.explicit(root_s),
            "consumers": len(self.registry.of_topic(root_s)),
            "summary": summary,
            "child_summaries": children,
        }


def consumer_json(c: Consumer, policy: ConsumerPolicy) -> dict[str, Any]:
    """The Consumer object of docs/http-api.md."""
    return {
        "id": c.id,
        "name": c.name,
        "durable": c.name is not None,
        "topic": c.topic,
        "filter": render_filter(c.filter) if c.filter is not None else None,
        "fast": c.fast,
        "cursor": c.cursor,
        "streams": c.streams,
        "idle_since": c.idle_since,
        "expires": c.expires_at(policy),
    }
