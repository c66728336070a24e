"""Topic commands and queries: create, update, subscribe, unsubscribe, read, history.

Algorithm 1 (a topic with its meta topic, or a sub-topic), §5 Updating (a new
version published on the meta topic), subscriptions and meta-topic following,
readers (the history without a subscription) and the pages of the retained
history. Every signature an operation needs is made before it changes state.

(:class:`Topics` is a part of :class:`~._node.PulsarcastNode`: a mixin
over :class:`~._base.NodeBase`, which declares the state and methods they share.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.records import RecordKind

from ._base import NodeBase
from ._codec import JoinAck
from ._descriptors import (
    EventDescriptor,
    PeerPolicy,
    TopicDescriptor,
    TopicOptions,
    cid_str,
    format_created,
)
from ._errors import LocalProtocolError, UnknownTopic
from ._filters import MATCH_ALL, Filter, covers, render_filter
from ._io import (
    Pending,
    StoreBlock,
    TopicState,
)
from ._moves import entry_point
from ._signqueue import _Steps
from ._tree import Tree
from ._treestate import ACTING_ROOT_STATES, tree_state

__all__ = ["META_ACK_WAIT", "Topics"]

META_ACK_WAIT = 2
"""A subscriber waits this many ``join_timeout`` for the JOIN_ACK that carries the
meta-topic descriptor (wire 2.7) before it fetches the descriptor over bitswap."""


class Topics(NodeBase):
    """Topic commands and queries (a part of :class:`~._node.PulsarcastNode`)."""

    def _store_topic(self, desc: TopicDescriptor) -> None:
        self._topic_blocks.put(desc.cid, desc)
        self._emit(StoreBlock(cid=desc.cid, data=desc.encode(), own=True, announce=True))

    def create_topic(
        self,
        now: float,
        name: str,
        *,
        options: TopicOptions | None = None,
        parent: CID | None = None,
    ) -> CID | Pending:
        """Algorithm 1: create a topic (with its meta topic), or a sub-topic of ``parent``.

        Returns the topic's CID; with ``require_signatures``, :class:`Pending` (the
        CID comes in an :class:`OperationDone` once the descriptors are signed).
        """
        if not isinstance(name, str) or not name:
            raise LocalProtocolError("a topic name must be a non-empty string")
        if options is not None and not isinstance(options, TopicOptions):
            raise LocalProtocolError("options must be TopicOptions")
        if parent is not None:
            ptree = self._tree_for(parent)
            if ptree.author != self.peer_id:
                raise LocalProtocolError("only the author of a topic may create its sub-topics")
            if name == ptree.name:
                return self.update_topic(now, parent, options=options or ptree.latest.options)
            return self._signing.run(now, self._create_sub_topic(ptree.key, name, options))
        return self._signing.run(now, self._create_topic(name, options))

    def _create_topic(self, name: str, options: TopicOptions | None) -> _Steps[CID]:
        meta = yield from self._signing.signed_topic(
            TopicDescriptor.new(
                name=f"meta-{name}",
                author=self.peer_id,
                now=self._signing.now,
                options=TopicOptions(allowed_publishers=PeerPolicy(enabled=True)),  # author only
                protocol_version=self._signing.version,
            )
        )
        topic = yield from self._signing.signed_topic(
            TopicDescriptor.new(
                name=name,
                author=self.peer_id,
                now=self._signing.now,
                options=options,
                links={"meta": meta.cid},
                protocol_version=self._signing.version,
            )
        )
        announce = yield from self._signing.signed_event(
            self._meta_draft(meta.cid, ((), 0), topic), meta.cid
        )
        now = self._signing.now
        self._store_topic(meta)
        self._store_topic(topic)
        meta_tree = self._new_tree(now, meta)
        tree = self._new_tree(now, topic)
        self._subscribe_tree(now, tree)
        self._publish_event(now, meta_tree, announce, via="direct", inject_id=None)
        return topic.cid

    def _create_sub_topic(
        self, parent_key: CID, name: str, options: TopicOptions | None
    ) -> _Steps[CID]:
        ptree = self._trees.get(parent_key)
        if ptree is None:
            raise UnknownTopic(f"unknown topic {parent_key}")
        meta_cid = ptree.latest.meta
        assert meta_cid is not None
        topic = yield from self._signing.signed_topic(
            TopicDescriptor.new(
                name=name,
                author=self.peer_id,
                now=self._signing.now,
                options=options,
                parent=ptree.latest.cid,
                links={"meta": meta_cid},
                protocol_version=self._signing.version,
            )
        )
        first = yield from self._signed_announcement(meta_cid, topic, None)
        # The parent gets a new version that links the sub-topic in its "#" map.
        links = dict(ptree.latest.links)
        links[name] = topic.cid
        version = yield from self._signed_version(parent_key, ptree.latest.options, links)
        second = yield from self._signed_announcement(ptree.root.meta, version, first)
        now = self._signing.now
        self._store_topic(topic)
        tree = self._new_tree(now, topic)
        self._subscribe_tree(now, tree)
        self._announce(meta_cid, first)
        self._apply_version(parent_key, version)
        self._announce(ptree.root.meta, second)
        return topic.cid

    def _meta_draft(
        self, meta_version: CID, parents: tuple[tuple[CID, ...], int], topic: TopicDescriptor
    ) -> EventDescriptor:
        """The meta-topic event that announces ``topic`` (a new topic or version)."""
        return EventDescriptor(
            topic=meta_version,
            author=self.peer_id,
            publisher=self.peer_id,
            parents=parents[0],
            clock=parents[1],
            payload=topic.encode(),
            created=format_created(self._signing.now),
            protocol_version=self._signing.version,
        )

    def _signed_announcement(
        self, meta_key: CID | None, topic: TopicDescriptor, after: EventDescriptor | None
    ) -> _Steps[EventDescriptor | None]:
        """Sign the meta-topic event for ``topic`` (``None``: no meta tree here);
        it follows ``after`` (an announcement not yet published) or LAST_SEEN."""
        meta_tree = self._trees.get(meta_key) if meta_key is not None else None
        if meta_tree is None:
            return None
        links = (
            ((after.cid,), after.clock + 1) if after is not None else self._link_heads(meta_tree)
        )
        draft = self._meta_draft(meta_tree.latest.cid, links, topic)
        return (yield from self._signing.signed_event(draft, meta_tree.key))

    def _announce(self, meta_key: CID | None, ev: EventDescriptor | None) -> None:
        meta_tree = self._trees.get(meta_key) if meta_key is not None else None
        if ev is not None and meta_tree is not None:
            self._publish_event(self._signing.now, meta_tree, ev, via="direct", inject_id=None)

    def _signed_version(
        self, key: CID, options: TopicOptions, links: dict[str, CID]
    ) -> _Steps[TopicDescriptor]:
        tree = self._trees.get(key)
        if tree is None:
            raise UnknownTopic(f"unknown topic {key}")
        return (
            yield from self._signing.signed_topic(
                TopicDescriptor.new(
                    name=tree.name,
                    author=self.peer_id,
                    now=self._signing.now,
                    options=options,
                    parent=tree.latest.cid,
                    links=links,
                    protocol_version=self._signing.version,
                )
            )
        )

    def _apply_version(self, key: CID, desc: TopicDescriptor) -> None:
        tree = self._trees[key]
        self._store_topic(desc)
        self._learn_version(self._signing.now, tree, desc)

    def update_topic(self, now: float, topic_cid: CID, *, options: TopicOptions) -> CID | Pending:
        """§5 Updating: a new version (``parent`` = the latest), published on the meta topic.

        Returns the new version's CID, or :class:`Pending` (``require_signatures``).
        """
        tree = self._tree_for(topic_cid)
        if tree.author != self.peer_id:
            raise LocalProtocolError("only the author of a topic may update it")
        if not isinstance(options, TopicOptions):
            raise LocalProtocolError("options must be TopicOptions")
        return self._signing.run(now, self._new_update(tree.key, options))

    def _new_update(self, key: CID, options: TopicOptions) -> _Steps[CID]:
        tree = self._trees.get(key)
        if tree is None:
            raise UnknownTopic(f"unknown topic {key}")
        version = yield from self._signed_version(key, options, dict(tree.latest.links))
        announce = yield from self._signed_announcement(tree.root.meta, version, None)
        self._apply_version(key, version)
        self._announce(tree.root.meta, announce)
        return version.cid

    def subscribe(
        self,
        now: float,
        topic_cid: CID,
        *,
        since: float | None = None,
        fast: bool = False,
        filter: Filter | None = None,
        filters: Sequence[Filter] | None = None,
    ) -> None:
        """Algorithm 2: subscribe to any version of a topic (fetching it if unknown).

        ``since`` (a restarted driver resuming a subscription, given the topic's first
        version): deliver events created from then on, recovering the ones missed.
        ``filter`` (core/_filters.py): deliver only the events it matches, live and
        recovered alike; the node still relays, retains and repairs every event (the
        tree is unchanged). Subscribing again replaces the filter (None: no filter).
        ``filters`` instead of ``filter``: a disjunction (at least one), the events any
        of them matches (a sidecar's consumers' union; ``*`` among them: every event);
        the subtree summary carries each of them (docs/protocol-notes.md).
        ``fast``: also join the fast group of each publisher of the topic (its
        author, and the publisher of each event delivered): they send their events
        straight here, in two hops at most (docs/protocol-notes.md "Fast groups").
        Subscribing again with another ``fast`` changes only that.
        """
        if not isinstance(topic_cid, CID):
            raise LocalProtocolError("subscribe expects a topic CID")
        if filter is not None and not isinstance(filter, Filter):
            raise LocalProtocolError("filter must be a Filter (parse_filter) or None")
        wanted = _disjunction(filter, filters)
        if not isinstance(fast, bool):
            raise LocalProtocolError("fast must be a bool")
        if since is not None and since < now:
            self._resume_since[topic_cid] = since
        self._pending_filters[topic_cid] = wanted
        self._fast.want(topic_cid, fast)
        self._when_resolved(now, topic_cid, "subscribe", self._subscribe_tree)

    def _take_filter(self, now: float, tree: Tree) -> None:
        """Apply the filter of the subscribe call(s) that resolved to ``tree``."""
        for cid in [c for c in self._pending_filters if self._version_of.get(c) == tree.key]:
            new = self._pending_filters.pop(cid)
            old = tree.filters
            wider = (
                new != old
                and old is not None
                and (new is None or not all(any(covers(o, n) for o in old) for n in new))
            )
            if tree.subscribed and wider and self.config.tree_filters:
                # Our parent pruned by the old filter: the wider new one applies from
                # now on (events pruned before are not fetched back; docs "Filters in
                # the tree"). A narrower one changes nothing of what is on its way.
                tree.since = max(tree.since, now)
            tree.filters = new
            self._summary_changed(now, tree)

    def _subscribe_tree(self, now: float, tree: Tree) -> None:
        self._take_filter(now, tree)
        fast = self._fast.wanted(tree.versions)
        if tree.subscribed:
            self._fast.subscribe(now, tree, fast)
            return
        tree.subscribed = True
        tree.since = min(now, self._resume_since.pop(tree.key, now))
        self._update_retention(now, tree)
        self._record(now, RecordKind.SUBSCRIBED, topic=tree.name, topic_cid=cid_str(tree.key))
        meta_cid = tree.root.meta
        if meta_cid is not None:
            if meta_cid in self._trees:
                self._follow(now, self._trees[meta_cid], tree)
            else:
                self._resolving.setdefault(meta_cid, []).append(("follow", tree.key))
                if self._topic_blocks.get(meta_cid) is None:
                    # Asked for in the JOIN below (wantMeta): fetched over bitswap only
                    # if no JOIN_ACK has brought it by then (wire 2.7).
                    grace = META_ACK_WAIT * self.config.join_timeout
                    self._fetch(now, meta_cid, "topic", None, None, grace=grace)
                self._continue_resolutions(now)
        self._ensure_joined(now, tree)
        self._tree_changed(now, tree)
        self._fast.subscribe(now, tree, fast)

    # -- the meta-topic descriptor in a JOIN_ACK (wire 2.7) ----------------------------
    #
    # A subscriber follows the topic's meta topic, so it needs the meta topic's
    # descriptor as well. Fetching it over bitswap asks every connected peer
    # (want-have to each, an answer from each): ~3 KB and ~5 ms of the cluster's Kubo
    # CPU per subscription at 20 nodes. The node that accepts its JOIN holds it (it
    # follows the meta topic too), so the JOIN asks for it and the JOIN_ACK carries it,
    # checked against the CID the topic links; the bitswap fetch waits that long.

    def _meta_wanted(self, tree: Tree) -> bool:
        """Whether a JOIN of ``tree`` asks for the meta-topic descriptor: it is being
        resolved here (to be followed) and no copy is held."""
        meta = tree.root.meta
        return (
            meta is not None
            and meta in self._resolving
            and meta not in self._trees
            and self._topic_blocks.get(meta) is None
        )

    def _meta_block(self, tree: Tree) -> bytes | None:
        """The meta-topic descriptor of ``tree`` for an accepting JOIN_ACK, if held."""
        meta = tree.root.meta
        if meta is None:
            return None
        held = self._trees.get(meta)
        desc = held.root if held is not None else self._topic_blocks.get(meta)
        return desc.encode() if desc is not None else None

    def _join_ack_meta(self, now: float, peer: str, rpc: JoinAck) -> None:
        """An accepting JOIN_ACK, handled: its ``meta`` if it brought one; if it did
        not and we asked, the parent does not hold it either: fetch it now."""
        tree = self._trees.get(rpc.topic)
        if tree is None or tree.parent != peer or tree.root.meta is None:
            return  # a late acknowledgement (answered with LEAVE)
        if rpc.meta is not None:
            self._meta_received(now, tree, peer, rpc.meta)
        elif self._meta_wanted(tree):
            self._fetch_now(now, tree.root.meta)

    def _meta_received(self, now: float, tree: Tree, peer: str, data: bytes) -> None:
        """A JOIN_ACK's ``meta``: taken as the answer to the meta-topic fetch if it is
        the block ``tree``'s topic links and that is still being resolved; anything
        else changes nothing (a bad block is dropped; the fetch still runs)."""
        meta = tree.root.meta
        if meta is None or meta not in self._resolving or self._topic_blocks.get(meta):
            return
        desc = self._checked_topic(data, meta)
        if isinstance(desc, str):
            self._drop(now, desc, topic=tree.name, peer=peer, event=cid_str(meta))
            return
        self._fetches.pop(meta, None)  # a bitswap answer still on its way is ignored
        self._topic_blocks.put(meta, desc)
        self._emit(StoreBlock(cid=meta, data=data))  # kept by Kubo, as a fetch would
        self._continue_resolutions(now)

    def _follow(self, now: float, meta: Tree, tree: Tree) -> None:
        if not tree.subscribed or tree.key in meta.followers:
            return
        if not meta.followers and not meta.subscribed:
            meta.since = now
        meta.followers.add(tree.key)
        self._update_retention(now, meta)
        self._ensure_joined(now, meta)

    def unsubscribe(self, now: float, topic_cid: CID) -> None:
        """§5 Unsubscribe: stay as a relay while children remain, else leave (pruning)."""
        if isinstance(topic_cid, CID) and topic_cid in self._resolving:
            self._resolving[topic_cid] = [
                p for p in self._resolving[topic_cid] if p[0] != "subscribe"
            ]
            if not self._resolving[topic_cid]:
                del self._resolving[topic_cid]
            self._pending_filters.pop(topic_cid, None)
            return
        tree = self._tree_for(topic_cid)
        if not tree.subscribed:
            return
        tree.subscribed = False
        tree.filters = None
        self._fast.leave_all(now, tree)
        self._record(now, RecordKind.UNSUBSCRIBED, topic=tree.name, topic_cid=cid_str(tree.key))
        self._update_retention(now, tree)
        meta_cid = tree.root.meta
        if meta_cid is not None and meta_cid in self._trees:
            meta = self._trees[meta_cid]
            meta.followers.discard(tree.key)
            self._update_retention(now, meta)
            self._maybe_leave(now, meta)
        for lst in self._resolving.values():
            lst[:] = [p for p in lst if p != ("follow", tree.key)]
        self._tree_changed(now, tree)
        self._maybe_leave(now, tree)

    def read(self, now: float, topic_cid: CID, *, holders: Iterable[str] = ()) -> None:
        """Read a topic's history without subscribing (a *reader*, docs/protocol.md §5).

        The node resolves the topic (fetching its descriptor), joins its tree like a
        relay, keeps its history within the retention policy and back-fills it from
        its tree neighbours' HEADS and the events' parent links; it delivers nothing.
        It stays ``reader_ttl`` seconds after the last call, then leaves unless
        otherwise wanted. ``history`` pages through what it has gathered.

        ``holders``: peers known to hold the history (the driver found them in the
        DHT). While it only reads, the node first JOINs one of them as a *leaf*,
        whatever its distance to the author, and takes no children there: the tree's
        path towards the author may end at an acting root that holds nothing when
        the author is gone (docs/protocol-notes.md "Readers").
        """
        if not isinstance(topic_cid, CID):
            raise LocalProtocolError("read expects a topic CID")
        found: list[str] = []
        for peer in holders:
            if not isinstance(peer, str):
                raise LocalProtocolError("read: holders must be peer IDs")
            if peer != self.peer_id and peer not in found:
                found.append(peer)
        if found:
            if len(self._read_holders) >= 64:
                del self._read_holders[next(iter(self._read_holders))]
            self._read_holders[topic_cid] = tuple(found[:16])
        self._when_resolved(
            now,
            topic_cid,
            "read",
            lambda t, tree: self._read_tree(t, tree, self._read_holders.pop(topic_cid, ())),
        )

    def _when_resolved(
        self, now: float, topic_cid: CID, purpose: str, then: Callable[[float, Tree], None]
    ) -> None:
        """``then(now, tree)`` for topic ``topic_cid``'s tree, now if it is known, else
        once its descriptor chain is fetched (``purpose`` names it in the queue)."""
        key = self._version_of.get(topic_cid)
        if key is not None:
            then(now, self._trees[key])
            return
        self._resolving.setdefault(topic_cid, []).append((purpose, None))
        self._continue_resolutions(now)

    @entry_point
    def _read_tree(self, now: float, tree: Tree, holders: tuple[str, ...] = ()) -> None:
        tree.reading_until = now + self.config.reader_ttl
        if holders:
            tree.holders = holders
        self._update_retention(now, tree)
        if tree.author != self.peer_id:
            if (
                holders
                and tree.join is None
                and tree.parent not in tree.holders
                and self._leaf_hop(now, tree, set()) is not None
            ):
                self._join_next(now, tree, set())  # below a holder (make before break)
            else:
                self._ensure_joined(now, tree)
        self._tree_changed(now, tree)

    def topic_state(self, topic_cid: CID) -> TopicState:
        """This node's place in the topic's tree."""
        tree = self._tree_for(topic_cid)
        return TopicState(
            topic_cid=tree.key,
            latest_cid=tree.latest.cid,
            name=tree.name,
            author=tree.author,
            role=self._role(tree),
            parent=tree.parent,
            children=tuple(tree.children),
            subscribed=tree.subscribed,
            joined=tree.joined,
            acting_root=tree_state(tree, self.peer_id) in ACTING_ROOT_STATES,
            heads=tuple(reversed(tree.recent)),
            synced=tree.joined and (tree.parent is None or tree.parent in tree.heads_from),
            retained=len(tree.history) if tree.history is not None else 0,
            retained_bytes=tree.history.bytes if tree.history is not None else 0,
            members=self._members_known(tree),
            whole_history=self._own_filters(tree) is None,
            partial_members=self._partial_members(tree),
        )


def _disjunction(
    filter: Filter | None, filters: Sequence[Filter] | None
) -> tuple[Filter, ...] | None:
    """``subscribe``'s ``filter``/``filters`` as the tree keeps them: a sorted tuple
    without duplicates, or None for every event (no filter, or ``*`` among them)."""
    if filters is None:
        return None if filter is None or filter == MATCH_ALL else (filter,)
    if filter is not None:
        raise LocalProtocolError("give filter or filters, not both")
    if isinstance(filters, Filter) or not isinstance(filters, Sequence):
        raise LocalProtocolError("filters must be a sequence of Filter (parse_filter)")
    if not filters or not all(isinstance(f, Filter) for f in filters):
        raise LocalProtocolError("filters must be a non-empty sequence of Filter")
    if MATCH_ALL in filters:
        return None
    return tuple(sorted(set(filters), key=render_filter))
