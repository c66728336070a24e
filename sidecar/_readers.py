"""History readers: a node asked for the history of a topic it keeps none of
(docs/sidecar.md "History").

Theory of operation
-------------------
The API's history request asks :meth:`Readers.gather` to make sure the node keeps
the topic's history. A subscriber or author answers at once; a reader that asks
again extends its stay. Otherwise, one request per topic at a time
(:meth:`Readers.lock`), it finds the topic's holders (``routing/findprovs`` of its
first version, which every subscriber announces), connects to them
(:meth:`Readers.find_holders`), then :meth:`Readers.read_history` calls
``node.read`` with those holders (the core hangs below one of them as a leaf,
docs/protocol-notes.md "Readers below a holder") and waits, bounded, until the
back-filled history is complete and has held still for :data:`SETTLE`. A reader
stays ``reader_ttl`` after its last read (:meth:`Readers.expire`). The holders
found stay among the node's known peers whatever its routing table keeps
(:meth:`Readers.known_holders`).

:class:`Readers` is a part of the driver; it feeds the core through its host
(:class:`ReaderHost`: ``call``, ``wait_for``, ``node``), reads Kubo through the
host's client and measures its waits on the host's injected clock.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import Protocol

import anyio

from pulsarcast_ipfs.core import LocalProtocolError, UnknownTopic, cid_str
from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.kubo import KuboClient, KuboError, PeerAddrs

from ._host import NodeHost

__all__ = [
    "CONNECT_WAIT",
    "FINDPROVS_NUM",
    "FINDPROVS_WAIT",
    "READ_WAIT",
    "SETTLE",
    "NotResolved",
    "ReaderHost",
    "Readers",
]

log = logging.getLogger("pulsarcast.sidecar")

FINDPROVS_NUM = 8
"""Holders of a topic looked up (``routing/findprovs``) by a node that reads it."""
FINDPROVS_WAIT = 10.0
CONNECT_WAIT = 5.0
SETTLE = 0.5
"""A new reader's history counts as gathered once it has held still this long."""
READ_WAIT = 20.0
"""Longest a history request waits for a new reader to gather the topic's history
(holders looked up, connected, back-filled), all steps together."""


class ReaderHost(NodeHost, Protocol):
    """What readers need of the driver beyond feeding the core."""

    @property
    def kubo(self) -> KuboClient: ...

    async def refresh_routing(self) -> None:
        """Give the node its known peers now (the holders just found among them)."""
        ...


class NotResolved(Exception):
    """The core did not resolve the topic a reader asked for in time."""


class Readers:
    """The topics this node reads without subscribing, and the holders it found."""

    def __init__(self, host: ReaderHost) -> None:
        self._d = host
        self.last_read: dict[CID, float] = {}
        """Topics (first versions) this node reads without subscribing, last read."""
        self._locks: dict[CID, anyio.Lock] = {}
        self._holders: dict[CID, set[str]] = {}
        """Holders of topics read (``find_holders``): known peers whatever the table."""
        self.reads = 0
        """History requests that made this node a reader (holders looked up)."""
        self.providers = 0
        """Holders found by those (``routing/findprovs``), summed."""
        self.connected = 0
        self.incomplete = 0
        """Reads answered before the history was complete (bounded wait)."""

    def __len__(self) -> int:
        return len(self.last_read)

    def is_reader(self, root: CID) -> bool:
        return root in self.last_read

    def forget(self, root: CID) -> None:
        """No longer a reader of ``root`` (the node subscribed to it)."""
        self.last_read.pop(root, None)

    def expire(self, now: float, ttl: float) -> None:
        """Drop the readers whose last read is older than ``ttl`` (the core has let
        them go by now)."""
        for root, last in list(self.last_read.items()):
            if now - last > ttl:
                del self.last_read[root]

    def known_holders(self) -> Iterator[str]:
        """Every holder found and connected to, for the core's known peers."""
        for holders in self._holders.values():
            yield from holders

    def lock(self, cid: CID) -> anyio.Lock:
        """One history read of ``cid`` at a time (the others wait, then find it kept)."""
        lock = self._locks.get(cid)
        if lock is None:
            if len(self._locks) > 1024:
                self._locks.clear()
            lock = self._locks[cid] = anyio.Lock()
        return lock

    async def find_holders(self, cid: CID) -> tuple[int, int]:
        """``routing/findprovs`` of ``cid``, then ``swarm/connect`` to each provider:
        (providers found, connected). Bitswap asks connected peers first, and retained
        events are not announced one by one (docs/sidecar.md "History")."""
        d = self._d
        try:
            found = await d.kubo.routing_findprovs(cid, FINDPROVS_NUM, max_wait=FINDPROVS_WAIT)
        except KuboError as exc:
            log.warning("findprovs %s failed: %s", cid, exc)
            return 0, 0
        others = [p for p in found if p.peer_id != d.peer_id]
        connected: list[str] = []

        async def connect(p: PeerAddrs) -> None:
            addrs = [a if "/p2p/" in a else f"{a}/p2p/{p.peer_id}" for a in p.addresses]
            for addr in addrs or [f"/p2p/{p.peer_id}"]:
                try:
                    with anyio.fail_after(CONNECT_WAIT):
                        await d.kubo.swarm_connect(addr)
                except (KuboError, TimeoutError) as exc:
                    log.debug("swarm/connect %s failed: %s", addr, exc)
                    continue
                connected.append(p.peer_id)
                return

        async with anyio.create_task_group() as tg:
            for p in others:
                tg.start_soon(connect, p)
        if connected:
            self._holders[cid] = set(connected)
            if len(self._holders) > 64:
                del self._holders[next(iter(self._holders))]
            await d.refresh_routing()
        return len(others), len(connected)

    def keeps_history(self, cid: CID) -> bool:
        """Whether the node keeps topic ``cid``'s history (subscriber, author, reader)."""
        try:
            self._d.node.history_summary(cid)
        except (UnknownTopic, LocalProtocolError):
            return False
        return True

    def start_reading(self, cid: CID, root: CID | None = None) -> None:
        """``node.read``: keep (and back-fill) the topic's history ``reader_ttl`` more,
        hanging below one of the holders found (:meth:`find_holders`) if there are any."""
        d = self._d
        root = root or d.known_root(cid)
        holders = sorted(self._holders.get(cid, set()) | self._holders.get(root or cid, set()))
        d.call(lambda now: d.node.read(now, cid, holders=holders))
        if root is not None:
            self.last_read[root] = d.clock()

    async def read_history(
        self,
        cid: CID,
        root: CID,
        *,
        found: int,
        connected: int,
        resolve_wait: float,
        max_wait: float,
    ) -> bool | None:
        """Become a reader of topic ``cid`` (first version ``root``), the holders
        already looked up (``found`` providers, ``connected`` to); wait at most
        ``max_wait`` in all for the back-fill. Whether the history was gathered in
        time, or ``None`` if the core did not resolve the topic within
        ``resolve_wait``."""
        d = self._d
        began = d.clock()
        self.reads += 1
        self.providers += found
        self.connected += connected
        self.start_reading(cid, root)
        resolved = await d.wait_for(lambda: d.known_root(cid) is not None, max_wait=resolve_wait)
        if not resolved:
            return None
        self.last_read[root] = d.clock()
        left = max(1.0, max_wait - (d.clock() - began))
        settled = await self.settle(cid, max_wait=left)
        if not settled:
            self.incomplete += 1
        log.info(
            "reading topic %s: %d holder(s) found, %d connected, history %s after %.1f s",
            cid_str(root),
            found,
            connected,
            "gathered" if settled else "still incomplete",
            d.clock() - began,
        )
        return settled

    async def gather(
        self,
        cid: CID,
        *,
        resolve: Callable[[CID, int], Awaitable[CID]],
        resolve_wait: float,
    ) -> bool:
        """Make sure the node keeps topic ``cid``'s history; whether it is gathered.

        A subscriber or author answers at once. Otherwise (first read, or a reader
        whose time ran out) the node finds the topic's holders, connects, calls
        ``node.read`` and waits, at most :data:`READ_WAIT` in all, for the
        back-fill; a reader that asks again just extends its stay (``reader_ttl``).
        ``resolve(cid, found)`` gives the first version of a topic the node does
        not know (``found``: holders of ``cid`` found), or raises the caller's error
        (not a topic, nobody announces it). Raises :class:`NotResolved` if the core
        did not resolve the topic within ``resolve_wait``.
        """
        d = self._d
        root = d.known_root(cid)
        if root is not None and self.keeps_history(cid):
            if self.is_reader(root):
                self.start_reading(cid)  # extend the reader's stay
            return True
        async with self.lock(cid):
            root = d.known_root(cid)
            if root is not None and self.keeps_history(cid):
                return True  # another request made it a reader meanwhile
            return await self._become_reader(cid, root, resolve, resolve_wait)

    async def _become_reader(
        self,
        cid: CID,
        root: CID | None,
        resolve: Callable[[CID, int], Awaitable[CID]],
        resolve_wait: float,
    ) -> bool:
        began = self._d.clock()
        found, connected = await self.find_holders(cid)
        if root is None:
            root = await resolve(cid, found)
        if root != cid:  # a later version: subscribers announce the first one
            more, more_connected = await self.find_holders(root)
            found, connected = found + more, connected + more_connected
        settled = await self.read_history(
            cid,
            root,
            found=found,
            connected=connected,
            resolve_wait=resolve_wait,
            max_wait=max(1.0, READ_WAIT - (self._d.clock() - began)),
        )
        if settled is None:
            raise NotResolved(f"resolving topic {cid} took too long")
        return settled

    def _ready(self, cid: CID) -> tuple[int, ...] | None:
        """A snapshot of a reader's progress if it looks done (in the tree under a
        parent, or acting as root with children; history complete, no fetch in
        flight), else ``None``."""
        node = self._d.node
        try:
            st = node.topic_state(cid)
            page = node.history_summary(cid)
        except (UnknownTopic, LocalProtocolError):
            return None
        if not st.synced or (
            st.parent is None and st.author != self._d.peer_id and not st.children
        ):
            # Not under a parent yet, or its HEADS not heard yet; or an acting root of
            # its own (a relay acting as root with children gathers from them).
            return None
        if not page.complete or node.memory_usage["fetches"]:
            return None
        return (page.retained, len(page.heads))

    async def settle(self, cid: CID, *, max_wait: float) -> bool:
        """Wait (at most ``max_wait``) until a new reader has joined the tree and its
        back-filled history is complete and has held still for :data:`SETTLE`."""
        held: tuple[int, ...] | None = None
        since = 0.0
        with anyio.move_on_after(max_wait):
            while True:
                snap = self._ready(cid)
                t = self._d.clock()
                if snap is None or snap != held:
                    held, since = snap, t
                elif t - since >= SETTLE:
                    return True
                await anyio.sleep(0.05)
        return False
