"""The one place joining the protocol core, anyio and Kubo.

The core (:class:`~pulsarcast_ipfs.core.PulsarcastNode`) is pure; this driver
feeds it every input — tree RPCs from the transport, API commands, timer expiries
and Kubo results — and carries out its outputs (docs/core-api.md, "Outputs").
Everything runs on one event loop thread and every call into the node is
synchronous (:meth:`Driver.call`: feed, then drain and dispatch the outputs,
then re-arm the timer), so no lock is needed: an input is always handled
completely before the next one.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, Protocol, TypeVar

import anyio
import anyio.abc

from pulsarcast_ipfs.core import (
    Deliver,
    DescriptorError,
    DisconnectPeer,
    EventDescriptor,
    FastGroupState,
    FetchBlock,
    Filter,
    HistoryOrder,
    HistoryPage,
    NodeConfig,
    OperationDone,
    OutputDispatch,
    Pending,
    PublishResult,
    PulsarcastNode,
    ReleaseBlocks,
    RetentionPolicy,
    Rpc,
    SendRpc,
    SignRequest,
    StoreBlock,
    TopicDescriptor,
    TopicOptions,
    TopicState,
    TopicUpdated,
    UnknownTopic,
    cid_from_str,
    cid_str,
)
from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.kubo import KuboClient, KuboConfig, KuboError
from pulsarcast_ipfs.records import MetricRecord, RecordKind
from pulsarcast_ipfs.testing._misbehave import verdict

from ._acklevels import AckLevels, Published
from ._announce import TopicAnnouncer
from ._config import SidecarConfig
from ._consumers import ConsumerPolicy
from ._deliveries import Deliveries
from ._persistence import Persistence
from ._readers import Readers
from ._routing import RoutingView, topic_cid
from ._signing import KuboSigner
from ._state import StateError, StateStore
from ._store import BlockStore
from ._subscriptions import Subscriptions
from ._telemetry import Telemetry
from ._transport import Transport

__all__ = ["Driver", "Service"]

log = logging.getLogger("pulsarcast.sidecar")
T = TypeVar("T")


class Service(Protocol):
    """Something that runs beside a driver (the HTTP API): started with
    ``tg.start(service, driver)``, it ends on its own once ``driver.stopping`` is set."""

    def __call__(
        self, driver: Driver, *, task_status: anyio.abc.TaskStatus[None]
    ) -> Awaitable[None]: ...


WARM_MAX = 64
"""Connections at most, tree neighbours included, beyond which the members of a
topic's root list are no longer connected ahead of need (:meth:`Driver.warm_members`)."""


class Driver:
    """Runs a :class:`PulsarcastNode` beside one Kubo daemon."""

    def __init__(
        self,
        config: SidecarConfig,
        *,
        kubo: KuboClient | None = None,
        transport_factory: Callable[..., Transport] = Transport,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``kubo`` and ``transport_factory`` replace the Kubo client and the p2p
        transport (in-process fakes: benchmarks/driver_bench.py, tests/test_api_fake.py);
        the factory is called with :class:`Transport`'s keyword arguments. By default
        both come from ``config``. ``clock`` gives the wall-clock time (seconds since
        the epoch) of every input to the core and of the persisted state."""
        self.config = config
        self.clock = clock
        self.kubo = (
            kubo if kubo is not None else KuboClient(config=KuboConfig(base_url=config.kubo_api))
        )
        self.state = StateStore(config.state_path, log_max=config.delivery_log_max)
        self.telemetry = Telemetry(
            source=self,
            clock=clock,
            metrics_path=config.metrics_path,
            run=config.run,
            system=config.system,
            topic_limit=config.metrics_topics,
            kubo_pid=config.kubo_pid,
            resource_interval=config.resource_interval,
        )
        """Metric records, ``/metrics`` and resource samples (:mod:`._telemetry`)."""
        self.store = BlockStore(
            kubo=self.kubo, fetch_timeout=config.fetch_timeout, retain_pin=config.retain_pin
        )
        self.store.on_held = self._on_held
        self.announcer = TopicAnnouncer(
            self,
            store=self.store,
            kubo=self.kubo,
            k=config.topic_announcers,
            fetch_timeout=config.fetch_timeout,
        )
        """Which subscribed topics this node announces, and when (:mod:`._announce`)."""
        self.acks = AckLevels(self, state_path=config.state_path)
        """Publishes at acknowledgement levels and the persisted outbox (:mod:`._acklevels`)."""
        self.node_config = NodeConfig(
            ping_interval=config.ping_interval,
            heads_interval=config.heads_interval,
            join_timeout=config.join_timeout,
            slow_parent_after=config.slow_parent_after,
            fetch_timeout=config.fetch_timeout + 5.0,
            require_signatures=config.require_signatures,
            group_capacity=config.group_capacity,
            flat_fanout=config.flat_fanout,
            witnesses=config.witnesses,
            penalty_ttl=config.penalty_ttl,
            tree_filters=config.tree_filters,
            group_spare=config.group_spare,
            group_refresh=config.group_refresh,
            retention=RetentionPolicy(
                max_events=config.retain_events,
                max_age=config.retain_age,
                max_bytes=config.retain_bytes,
            ),
        )
        self.transport = transport_factory(
            kubo=self.kubo,
            port=config.p2p_port,
            on_rpc=self._on_rpc,
            on_unreachable=self._on_unreachable,
            max_frame_size=self.node_config.max_frame_size,
            attempts=config.connect_attempts,
            backoff=config.connect_backoff,
        )
        self.peer_id = ""
        self.kubo_version = ""
        self._node: PulsarcastNode | None = None
        self._timer_wake = anyio.Event()
        self._timer_at = -math.inf
        """The deadline the timer task sleeps until (``inf``: none; ``-inf``: it is
        not asleep): an input wakes it only if the core's next timer is earlier."""
        self._progress = anyio.Event()
        self._progress_waiters = 0
        """Tasks in :meth:`wait_for`: an input replaces (and sets) ``_progress`` only
        when someone waits on it (an ``anyio.Event`` per input was ~2 % of a received
        event's CPU)."""
        self._dispatch: OutputDispatch[None] = OutputDispatch(self)
        self._misbehaviour = config.misbehaviour
        """Test only (``--misbehave``): the send filter of a relay that lies
        (:mod:`pulsarcast_ipfs.testing._misbehave`); None: honest."""
        if self._misbehaviour is not None:
            log.warning("misbehaving on purpose (test only): %s", self._misbehaviour)
        self._topics: dict[str, str] = {}
        """Root topic CID → name, for every tree this node has been in."""
        self.blocks: OrderedDict[CID, bytes] = OrderedDict()
        """Recently stored descriptor blocks (answer the API before block/put is done)."""
        self.stopping = anyio.Event()
        self.ready = anyio.Event()
        self._services_done: list[anyio.Event] = []
        self._tg: anyio.abc.TaskGroup | None = None
        self.signer = KuboSigner(self, kubo=self.kubo)
        """Signatures through Kubo ``key/sign`` and the delegated key (:mod:`._signing`)."""
        self.fatal: str | None = None
        """Why the sidecar stopped on its own (state directory unwritable, disk full)."""
        self.reading = Readers(self)
        """History reads of topics this node keeps no history of (:mod:`._readers`)."""
        self.subs = Subscriptions(
            self,
            ConsumerPolicy(grace=config.consumer_grace, retention=config.consumer_retention),
        )
        """The explicit subscriptions and the consumers (:mod:`._subscriptions`)."""
        self.persistence = Persistence(
            self.state, topic_state=self.topic_state, save_consumers=self.subs.save
        )
        """When ``state.json`` is saved, and with what (:mod:`._persistence`)."""
        self.deliveries = Deliveries(
            state=self.state,
            stats=self.telemetry.stats,
            persistence=self.persistence,
            fail=self.fail,
            misbehaviour=self._misbehaviour,
        )
        """The delivery log's writer and the live delivery streams (:mod:`._deliveries`)."""

    @property
    def node(self) -> PulsarcastNode:
        assert self._node is not None, "the driver is not running"
        return self._node

    # -- feeding the core ------------------------------------------------------------

    def call(self, fn: Callable[[float], T]) -> T:
        """Run one input on the node with ``now =`` :attr:`clock`, then carry out its outputs.

        Exceptions from the node (``LocalProtocolError``) propagate after the outputs
        it queued before raising were carried out.
        """
        try:
            return fn(self.clock())
        finally:
            self._pump()

    async def complete(self, value: T | Pending) -> T:
        """The result of an API command, once signed (:meth:`._signing.KuboSigner.complete`)."""
        return await self.signer.complete(value)

    def on_sign_request(self, _: None, out: SignRequest) -> None:
        self.signer.request(out, self._tg.start_soon if self._tg is not None else None)

    async def wait_for(self, predicate: Callable[[], bool], *, max_wait: float) -> bool:
        """Wait until ``predicate()`` holds after some input to the node; False on timeout."""
        with anyio.move_on_after(max_wait):
            while not predicate():
                self._progress_waiters += 1
                try:
                    await self._progress.wait()
                finally:
                    self._progress_waiters -= 1
        return predicate()

    def _pump(self) -> None:
        if self._progress_waiters:
            progress, self._progress = self._progress, anyio.Event()
            progress.set()
        self._dispatch(None, self.node.take_outputs())
        # Waking the timer task costs a task switch and a cancel scope; most inputs
        # (an event in, forwarded) leave the next deadline where it was.
        t = self.node.get_timer()
        if t is not None and t < self._timer_at:
            self._timer_wake.set()

    # -- the core's outputs (one method each: core.OutputDispatch) -------------------

    def on_send_rpc(self, _: None, out: SendRpc) -> None:
        if self._misbehaviour is not None:  # test only: a relay that lies
            v = verdict(self._misbehaviour, out.rpc)
            if v == "drop":
                return
            if v == "hold" and self._tg is not None:
                self._tg.start_soon(self._send_late, out, self._misbehaviour.delay)
                return
        self.transport.send(out.peer, out.data)

    async def _send_late(self, out: SendRpc, delay: float) -> None:
        await anyio.sleep(delay)
        self.transport.send(out.peer, out.data)

    def on_store_block(self, _: None, out: StoreBlock) -> None:
        self.blocks[out.cid] = out.data
        if len(self.blocks) > 4096:
            self.blocks.popitem(last=False)
        # the core says whose block it is, whether to announce it and whether its
        # history is kept: own blocks and retained events are pinned, only own topic
        # versions announced (docs/sidecar.md "Providing")
        self.store.store(
            out.cid,
            out.data,
            own=out.own,
            announce=out.announce,
            retain=out.retain,
            urgent=out.urgent,
        )

    def _on_held(self, cids: list[CID]) -> None:
        """The store: these retained events are stored and pinned (STORED to the
        publishers that wait for it)."""
        try:
            self.call(lambda now: self.node.blocks_held(now, cids))
        except Exception:
            log.exception("blocks_held failed")

    def on_release_blocks(self, _: None, out: ReleaseBlocks) -> None:
        self.store.release(out.cids)

    def on_fetch_block(self, _: None, out: FetchBlock) -> None:
        self.telemetry.stats.fetching(out.cid)  # a gap repair's start (pulsarcast_repair_seconds)
        self.store.fetch(out.cid, self._on_fetched)

    def on_topic_updated(self, _: None, out: TopicUpdated) -> None:
        log.info("topic %s updated: %s -> %s", out.topic.name, out.old_cid, out.new_cid)

    def on_disconnect_peer(self, _: None, out: DisconnectPeer) -> None:
        log.warning("disconnecting %s (%s) until %.0f", out.peer, out.reason, out.until)
        self.transport.disconnect(out.peer, out.until)

    def on_operation_done(self, _: None, out: OperationDone) -> None:
        self.signer.operation_done(out)

    def on_metric_record(self, _: None, rec: MetricRecord) -> None:
        if rec.kind is RecordKind.TREE_CHANGED:
            root = rec.fields.get("topic_cid")
            if isinstance(root, str):
                self._topics[root] = str(rec.fields.get("topic", ""))
            log.debug("tree %s: %s", rec.fields.get("topic"), dict(rec.fields))
        elif rec.kind is RecordKind.EVENT_DROPPED:
            log.info("dropped: %s", dict(rec.fields))
        self.telemetry.write(rec)

    def on_deliver(self, _: None, out: Deliver) -> None:
        self.deliveries.deliver(
            out,
            topic_name=self._topics.get(cid_str(out.topic_cid), ""),
            now=self.clock(),
            stopped=self.fatal is not None,
        )

    def _on_rpc(self, peer: str, rpc: Rpc, size: int) -> None:
        try:
            self.call(lambda now: self.node.receive_rpc(now, peer, rpc, size=size))
        except Exception:  # a core bug must not kill the connection task group
            log.exception("receive_rpc(%s, %s) failed", peer, rpc.op)

    def _on_unreachable(self, peer: str) -> None:
        log.info("peer %s unreachable: dropped from every tree", peer)
        self.call(lambda now: self.node.peer_unreachable(now, peer))

    def _on_fetched(self, cid: CID, data: bytes | None) -> None:
        try:
            self.call(lambda now: self.node.block_fetched(now, cid, data))
        except Exception:
            log.exception("block_fetched(%s) failed", cid)

    # -- delivery streams and the state ----------------------------------------------

    def wake_listeners(self) -> None:
        """Wake every delivery stream (a consumer closed: its streams end)."""
        self.deliveries.wake_all()

    def mark_dirty(self) -> None:
        """Something of ``state.json`` changed (a consumer's cursor): saved within 2 s."""
        self.persistence.mark_dirty()

    # -- topics ------------------------------------------------------------------------

    @property
    def topic_roots(self) -> list[str]:
        return list(self._topics)

    def remember_topic(self, root: str, name: str) -> None:
        self._topics.setdefault(root, name)

    def local_topic(self, cid: CID) -> TopicDescriptor | None:
        data = self.blocks.get(cid)
        if data is None:
            return None
        try:
            return TopicDescriptor.decode(data, expected_cid=cid)
        except DescriptorError:
            return None

    def topic_state(self, cid: CID) -> TopicState | None:
        """This node's place in topic ``cid``'s tree (``None``: not in it)."""
        try:
            return self.node.topic_state(cid)
        except UnknownTopic:
            return None

    def known_root(self, cid: CID) -> CID | None:
        """The first version of topic ``cid`` if the node has it in a tree."""
        st = self.topic_state(cid)
        return st.topic_cid if st is not None else None

    # -- operations of the HTTP API (sidecar/_api.py calls these, nothing else) -------

    @property
    def is_stopping(self) -> bool:
        return self.stopping.is_set()

    @property
    def last_seq(self) -> int:
        """The sequence number of the newest delivery in the log."""
        return self.state.last_seq

    def replay(self, after: int, topic: str | None = None) -> Iterator[dict[str, Any]]:
        """Logged deliveries after ``after`` (of the topic whose first version is
        ``topic``, if given)."""
        return self.state.replay(after, topic)

    async def kubo_alive(self, max_wait: float = 3.0) -> bool:
        """Whether Kubo's API answers ``id`` within ``max_wait``."""
        try:
            with anyio.fail_after(max_wait):
                await self.kubo.id()
        except (KuboError, TimeoutError):
            return False
        return True

    def topic_states(self) -> list[TopicState]:
        """This node's place in every tree it has been in and still is."""
        states = (self.topic_state(cid_from_str(root)) for root in self.topic_roots)
        return [st for st in states if st is not None]

    def latest_version(self, cid: CID) -> CID | None:
        """The newest version of topic ``cid`` the node knows, if it is in its tree."""
        st = self.topic_state(cid)
        return st.latest_cid if st is not None else None

    async def block(self, cid: CID, max_wait: float) -> bytes:
        """A block: from the descriptors just stored, else through Kubo (raises
        ``KuboTimeout``, ``KuboNotFound``)."""
        data = self.blocks.get(cid)
        if data is not None:
            return data
        return await self.store.get(cid, max_wait)

    def subscribed_topic(self, root: CID, name: str) -> None:
        """Topic ``root`` is subscribed (explicitly or for a consumer): persist it and
        announce it."""
        root_s = cid_str(root)
        self.remember_topic(root_s, name)
        self.state.state.subscriptions.setdefault(root_s, self.clock())
        self.persist()
        self.announce_topics()  # one provider record for the topic (docs/sidecar.md)

    async def create_topic(self, name: str, *, options: TopicOptions, parent: CID | None) -> CID:
        """Create (sign, store) a topic; this node is subscribed to it."""
        cid = await self.complete(
            self.call(lambda now: self.node.create_topic(now, name, options=options, parent=parent))
        )
        root = self.known_root(cid) or cid
        if cid_str(root) not in self.state.state.created:
            self.state.state.created.append(cid_str(root))
        self.subscribed_topic(root, name)
        return cid

    async def update_topic(self, cid: CID, *, options: TopicOptions) -> CID:
        """A new version of topic ``cid`` with ``options`` (this node is its author)."""
        new = await self.complete(
            self.call(lambda now: self.node.update_topic(now, cid, options=options))
        )
        self.persist()
        return new

    async def subscribe(
        self,
        cid: CID,
        *,
        root: CID,
        name: str,
        max_wait: float,
        fast: bool = False,
        filter: Filter | None = None,
    ) -> bool:
        """Subscribe the node explicitly to topic ``cid`` (first version ``root``) and
        persist it, with its ``filter`` (replacing the explicit subscription's earlier
        one; the node subscribes in the tree with the union of it and its consumers'
        filters: :mod:`._subscriptions`); whether the core knew the topic within
        ``max_wait`` (it may fetch its descriptor and meta topic first), so that a
        publish right after this finds it. ``fast``: join the fast groups of the
        topic's publishers (docs/protocol-notes.md)."""
        root_s = cid_str(root)
        self.subs.subscribe_explicit(cid, root_s, fast=fast, filter=filter)
        if not await self.wait_for(lambda: self.known_root(cid) is not None, max_wait=max_wait):
            return False
        self.subs.explicit_done(root_s, fast=fast, filter=filter)
        self.reading.forget(root)
        self.subscribed_topic(root, name)
        return True

    def unsubscribe(self, cid: CID, root: CID) -> bool:
        """Drop the explicit subscription of topic ``cid`` (first version ``root``) and
        persist it; the node leaves the topic unless consumers still want it (whether
        it is still subscribed)."""
        return self.subs.unsubscribe_explicit(cid, cid_str(root))

    async def publish(
        self,
        cid: CID,
        payload: bytes,
        *,
        parent: CID | None,
        inject_id: str | None,
        attributes: dict[str, Any] | None = None,
        ack: int = 0,
        ack_timeout: float = 10.0,
        key: str | None = None,
    ) -> Published:
        """Publish (or request to publish) ``payload`` in topic ``cid``; with ``ack``
        other nodes holding it, at most ``ack_timeout`` later; ``key``: an idempotency
        key (:mod:`._acklevels`)."""
        return await self.acks.publish(
            cid,
            payload,
            parent=parent,
            inject_id=inject_id,
            attributes=attributes,
            ack=ack,
            ack_timeout=ack_timeout,
            key=key,
        )

    async def publish_now(
        self,
        cid: CID,
        payload: bytes,
        *,
        parent: CID | None,
        inject_id: str | None,
        attributes: dict[str, Any] | None = None,
        ack: int = 0,
    ) -> PublishResult:
        """The core's publish: the event exists and is on its way (not waiting for
        holders)."""
        t0 = time.perf_counter()
        ok = False
        try:
            res = await self.complete(
                self.call(
                    lambda now: self.node.publish(
                        now,
                        cid,
                        payload,
                        parent=parent,
                        inject_id=inject_id,
                        attributes=attributes,
                        ack=ack,
                    )
                )
            )
            ok = True
            return res
        finally:
            root = self.known_root(cid) if self._node is not None else None
            root_s = cid_str(root) if root is not None else None
            name = self._topics.get(root_s, "") if root_s is not None else ""
            self.telemetry.stats.publish_call(root_s, name, time.perf_counter() - t0, ok=ok)

    def history(
        self,
        cid: CID,
        *,
        order: HistoryOrder,
        after: CID | EventDescriptor | None,
        limit: int,
        where: Filter | None = None,
        read: Callable[[CID], EventDescriptor | None] | None = None,
    ) -> HistoryPage:
        """One page of the retained history of topic ``cid`` (``node.history``)."""
        return self.node.history(cid, order=order, after=after, limit=limit, where=where, read=read)

    def fast_state(self, cid: CID) -> FastGroupState | None:
        """This node's fast groups of topic ``cid`` (``None``: not in its tree)."""
        try:
            return self.node.fast_state(cid)
        except UnknownTopic:
            return None

    @property
    def running(self) -> bool:
        """Whether the core node exists (the driver started)."""
        return self._node is not None

    @property
    def duplicates_suppressed(self) -> int:
        """Deliveries found again by repair after a restart (:mod:`._deliveries`)."""
        return self.deliveries.duplicates_suppressed

    @property
    def topics_left_to_announcers(self) -> int:
        """Subscribed topics this node leaves to closer announcers (:mod:`._announce`)."""
        return self.announcer.left_to_announcers

    # -- topic announcement and readers (docs/sidecar.md "History") --------------------

    def announce_topics(self) -> None:
        """Announce the subscribed topics this node is among the announcers of
        (:class:`._announce.TopicAnnouncer`), and let readers whose time ran out go."""
        if self._tg is None:
            return
        self.announcer.announce(self._tg.start_soon)
        self.reading.expire(self.clock(), self.node_config.reader_ttl)

    def warm_members(self) -> None:
        """Connect to the members of each topic's root list (MEMBERS: the root and its
        children) ahead of need: a publisher's first hop goes straight to them (§6),
        and a first frame to a peer waited for a ``p2p forward`` and a new stream
        (168 of the 186 deliveries over 200 ms in the first 3 s of a 20
        events/s run were carried by the first EVENT from that peer). At most
        :data:`WARM_MAX` connections in all; a member that cannot be reached is
        given up as any neighbour is (bounded retries, ``peer_unreachable``)."""
        have = len(self.transport.neighbours)
        for st in self.topic_states():
            for peer in st.members:
                if have >= WARM_MAX:
                    return
                if peer != self.peer_id and self.transport.connect(peer):
                    have += 1

    def persist(self) -> None:
        """Save ``state.json`` now (:mod:`._persistence`)."""
        self.persistence.save()

    # -- running -----------------------------------------------------------------------

    async def run(
        self,
        *,
        services: Sequence[Service] = (),
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Start everything, serve until :meth:`stop`, then shut down gracefully.

        ``services`` (e.g. :func:`sidecar._api.serve_api`) are started with the driver,
        once it runs, each as ``await tg.start(service, driver)``; they watch
        :attr:`stopping` and end on their own, and the driver waits (at most 5 s) for
        them before it closes its connections. The driver knows nothing more of them."""
        async with self.kubo:
            ident = await self.kubo.id()
            self.peer_id = ident.peer_id
            try:
                self.kubo_version = (await self.kubo.version()).version
            except KuboError:
                self.kubo_version = ""
            # One sidecar per Kubo: refused here, before anything changes in Kubo or
            # in the state directory (sidecar/_preflight.py).
            await self.transport.claim()
            await self.announcer.choose_mode(self.config.announce)
            self.state.load(self.peer_id)
            waiting = self.acks.load()
            self.subs.load(self.clock())
            self.telemetry.open(self.peer_id)
            self._node = PulsarcastNode(
                peer_id=self.peer_id,
                config=self.node_config,
                rng=random.Random(),
                now=self.clock(),
            )
            # What the log says was delivered: the restart's gap repair stops there.
            restored = self.state.delivered_cids(self.node_config.delivered_cache_size)
            self._node.restore_delivered(self.clock(), restored)
            log.info(
                "peer %s, Kubo %s at %s", self.peer_id, self.kubo_version, self.config.kubo_api
            )
            if self.config.require_signatures and self.config.delegate_ttl > 0:
                await self.signer.start_delegating(ttl=self.config.delegate_ttl)
            try:
                async with anyio.create_task_group() as tg:
                    self._tg = tg
                    await tg.start(self.transport.run, tg)
                    await tg.start(self.store.run, tg)  # before _resume may fetch
                    await self.refresh_routing()
                    tg.start_soon(self._routing_loop)
                    tg.start_soon(self._timer_loop)
                    tg.start_soon(self._housekeeping_loop)
                    if self.telemetry.samples_resources:
                        tg.start_soon(self.telemetry.resource_loop, self.kubo)
                    if self.subs.resume():
                        self.persistence.mark_dirty()
                    if waiting:
                        tg.start_soon(self.acks.resume, waiting)
                    for service in services:
                        await tg.start(self._run_service, service)
                    self.ready.set()
                    task_status.started()
                    await self.stopping.wait()
                    log.info("shutting down")
                    with anyio.move_on_after(5):
                        for done in self._services_done:
                            await done.wait()
                    tg.cancel_scope.cancel()
            finally:
                with anyio.CancelScope(shield=True):
                    await self.transport.close()
                    if self.fatal is None:
                        try:
                            self.persist()
                        except StateError as exc:
                            self.fatal = str(exc)
                            log.error("could not save the state: %s", exc)
                        except Exception:
                            log.exception("could not save the state")
                    self.telemetry.close()
                    self.state.close()
                    self.acks.close()
                    log.info("stopped")

    async def _run_service(
        self,
        service: Service,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        done = anyio.Event()
        self._services_done.append(done)
        try:
            await service(self, task_status=task_status)
        finally:
            done.set()

    def fail(self, why: str) -> None:
        """Stop because the state cannot be written (a clear error, no
        corruption); ``pulsarcast-sidecar`` exits non-zero with ``why``."""
        if self.fatal is None:
            log.error("stopping: %s", why)
            self.fatal = why
        self.stop()

    def stop(self) -> None:
        self.stopping.set()
        self.deliveries.wake_all()

    _routing: RoutingView | None = None
    """Known peers read from Kubo (made at the first refresh, once the peer ID is known)."""

    async def refresh_routing(self) -> None:
        """Give the node its known peers (``swarm/peers`` each time, ``stats/dht`` every
        30 s: :class:`RoutingView`); the node is told only when they changed or a tree
        acts as root."""
        if self._routing is None:
            self._routing = RoutingView(self_id=self.peer_id, k=self.config.routing_k)
        view = self._routing
        try:
            peers = await view.refresh(self.kubo, time.monotonic())
        except KuboError as exc:
            log.warning("routing table unavailable: %s", exc)
            return
        if view.subnets_changed:
            subnets = view.subnets
            self.call(lambda now: self.node.set_peer_subnets(now, subnets))
        # A tree where this node acts as root although it is not the author (no known
        # peer closer to the author, e.g. a sparse routing table): add the author, whom
        # `p2p forward` can reach by peer ID through the DHT (§5: "if the author itself
        # is reachable, go straight to it").
        acting = False
        for root in self._topics:
            try:
                st = self.node.topic_state(topic_cid(root))
            except (UnknownTopic, ValueError):
                continue
            if st.acting_root:
                acting = True
                if st.author not in peers and st.author != self.peer_id:
                    peers.append(st.author)
        # A reader also knows the holders it found (``routing/findprovs``) and
        # connected to, whatever the per-bucket limit keeps: with the author gone for
        # good, they are the tree it must join (a sparse table may list none of them).
        peers.extend(
            h for h in self.reading.known_holders() if h not in peers and h != self.peer_id
        )
        # set_known_peers with the peers the node has already changes nothing, except
        # that acting roots look for a closer peer at once: skip it unless one does.
        if acting or peers != view.given:
            view.given = peers
            self.call(lambda now: self.node.set_known_peers(now, peers))

    async def _routing_loop(self) -> None:
        while True:
            await anyio.sleep(self.config.routing_interval)
            await self.refresh_routing()

    async def _timer_loop(self) -> None:
        while True:
            self._timer_wake = anyio.Event()
            t = self.node.get_timer()
            if t is None:
                self._timer_at = math.inf
                await self._timer_wake.wait()
                self._timer_at = -math.inf
                continue
            delay = t - self.clock()
            if delay > 0:
                self._timer_at = t
                with anyio.move_on_after(delay):
                    await self._timer_wake.wait()
                self._timer_at = -math.inf
                continue
            try:
                self.call(lambda now: self.node.handle_timer(now))
            except Exception:
                log.exception("handle_timer failed")
                await anyio.sleep(0.1)

    async def _housekeeping_loop(self) -> None:
        while True:
            await anyio.sleep(2.0)
            self.telemetry.flush()
            self.subs.expire(self.clock())
            self.acks.sweep()
            self.announce_topics()
            self.warm_members()
            if self._tg is not None and self.signer.delegate_due(self.clock()):
                self._tg.start_soon(self.signer.renew_delegate)
            if self.persistence.dirty and self.fatal is None:
                try:
                    await self.persistence.save_in_thread()
                except StateError as exc:
                    self.fail(str(exc))
