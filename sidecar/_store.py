"""Descriptor blocks in Kubo (PROTOCOL.md §5 "Persistence"; docs/sidecar.md "Providing").

``StoreBlock`` → ``block/put`` of the exact dag-cbor bytes (CID checked by the
client), in order, by one writer task. What is pinned and what is announced:

* a block this node created itself (``provide=True``, from the core's
  ``StoreBlock.own``: a topic version it authored, an event it published, also
  for a requester, §6) is put and pinned
  *directly* (not recursively: that would pin, fetch and reprovide the whole
  parent DAG). Kubo announces a pinned block at once under the ``pinned``,
  ``roots`` and ``all`` strategies, and its reprovider again every
  ``Provide.DHT.Interval``, with or without the sidecar; under any other strategy
  the sidecar also calls ``provide/once`` from a separate background queue
  (``announce`` setting). Either way dissemination never waits for the DHT (§5, §8);
* an event of a history this node retains (``retain=True``, from
  ``StoreBlock.retain``: a subscriber's, author's or reader's topic, within the
  retention policy) is put, then pinned directly in batches of up to
  :data:`PIN_BATCH` CIDs per ``pin/add`` call, with ``fast-provide-root=false``:
  never announced one by one. ``ReleaseBlocks`` (fell out of the policy, topic
  left) unpins them in batches (``pin/rm``); own blocks stay pinned;
* a topic this node subscribes to is announced once (:meth:`BlockStore.pin_topic`):
  its first-version descriptor is pinned directly and announced with
  ``provide/once``: one provider record per topic per node, never one per event;
* any other block (received while forwarding, relaying or repairing a gap) is put
  *unpinned*: kept in this node's blockstore and served over bitswap, but never
  announced.

``FetchBlock`` → ``block/get`` with a timeout, answered with ``node.block_fetched``.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Final, Literal

import anyio
import anyio.abc
from multiformats import CID

from pulsarcast_ipfs.kubo import KuboClient, KuboError, KuboNotFound, KuboUnavailable

__all__ = ["PIN_BATCH", "BlockStore", "kubo_announces_pins"]

log = logging.getLogger("pulsarcast.sidecar.store")

PIN_BATCH: Final = 100
"""CIDs per ``pin/add`` / ``pin/rm`` call for retained events."""
_PROVIDE_QUEUE_MAX = 50_000
_RETRY_DELAY = 0.5
_KUBO_DOWN_WAIT = 60.0
"""How long a fetch waits for an unavailable Kubo before it counts as failed."""


_Kind = Literal["plain", "own", "retain", "topic"]


def kubo_announces_pins(strategy: object) -> bool:
    """Whether Kubo, with this ``Provide.Strategy``, announces a block as soon as it is
    pinned (``None``: not set, Kubo's default ``all``).

    Measured on Kubo 0.43 at 20 nodes (docs/sidecar.md "Providing"): under
    ``pinned`` a direct ``pin/add`` is announced at once (found by another node within
    seconds, ~30-40 KB of LAN-DHT traffic per block), and a ``provide/once`` on top
    doubles that cost. ``all`` announces every stored block, ``roots`` every pin root
    (each own block is one). Anything else (``mfs``, an unknown name): no.
    """
    if strategy is None:
        return True
    if not isinstance(strategy, str):
        return False
    modes = {part.strip().lower() for part in strategy.split("+")}
    return bool(modes & {"", "all", "flat", "pinned", "roots"})


class BlockStore:
    """Writes, pins, unpins, provides and fetches descriptor blocks through Kubo."""

    def __init__(
        self,
        *,
        kubo: KuboClient,
        fetch_timeout: float,
        provide_workers: int = 2,
        provide_once: bool = True,
        pin_batch: int = PIN_BATCH,
    ) -> None:
        self.kubo = kubo
        self.provide_once = provide_once
        """Also ``provide/once`` own blocks after pinning them (off when Kubo's provide
        strategy announces pins by itself, :func:`kubo_announces_pins`)."""
        self.fetch_timeout = fetch_timeout
        self.provide_workers = provide_workers
        self.pin_batch = pin_batch
        self._puts: deque[tuple[CID, bytes, _Kind]] = deque()
        self._put_wake = anyio.Event()
        self._provides: deque[CID] = deque()
        self._provide_wake = anyio.Event()
        self._stored: set[CID] = set()
        self._retained: dict[CID, bool] = {}
        """Events of retained histories (-> whether own): to be pinned while here."""
        self._topics: set[CID] = set()
        """Topic descriptors pinned and announced for this node's subscriptions."""
        self._pinned: set[CID] = set()
        """Retained events and topics this store pinned in Kubo (not own blocks)."""
        self._pin_due: dict[CID, None] = {}
        self._unpin_due: dict[CID, None] = {}
        self._tg: anyio.abc.TaskGroup | None = None
        self.stored = 0
        self.provided = 0
        self.provide_failed = 0
        self.provide_skipped = 0
        self.store_failed = 0
        self.pins_added = 0
        """Retained events and topics pinned (each CID once per pin)."""
        self.pins_removed = 0
        self.pin_failed = 0
        self.pin_calls = 0
        """``pin/add`` + ``pin/rm`` calls for retained events (batches)."""
        self.topics_announced = 0
        self.on_topic_announced: Callable[[CID, bool], None] | None = None
        """Told whether each topic announcement (``provide/once``) succeeded."""
        self.fetched = 0
        self.fetch_failed = 0
        self.kubo_down = False

    async def run(self, tg: anyio.abc.TaskGroup) -> None:
        self._tg = tg
        for i in range(self.provide_workers):
            tg.start_soon(self._provide_loop, name=f"provide-{i}")
        await self._put_loop()

    @property
    def pending(self) -> int:
        return len(self._puts) + len(self._pin_due) + len(self._unpin_due)

    @property
    def retained_pinned(self) -> int:
        """Events of retained histories pinned by this store now (own ones excluded)."""
        return len(self._pinned) - len(self._topics & self._pinned)

    def _queue(self, cid: CID, data: bytes, kind: _Kind) -> None:
        self._stored.add(cid)
        if len(self._stored) > 200_000:
            self._stored.clear()
        self._puts.append((cid, data, kind))
        self._put_wake.set()

    def store(self, cid: CID, data: bytes, *, provide: bool, retain: bool = False) -> None:
        """Queue a block for ``block/put`` (never blocks).

        ``provide``: this node's own block, pinned and announced. ``retain``: an event
        of a retained history, pinned (in a batch) and not announced; a block first
        stored unretained is put again and pinned when it comes back retained.
        Otherwise kept unpinned and unannounced.
        """
        if retain:
            if cid in self._retained:
                return
            self._retained[cid] = provide
            self._unpin_due.pop(cid, None)
            if provide and cid in self._stored:
                return  # already pinned (and announced) as this node's own block
            if not provide and cid in self._pinned:
                return  # released, then retained again before the unpin ran
            # Put again even if stored before: an unpinned copy may have been
            # collected, and a direct pin of a missing block would wait for the network.
            self._queue(cid, data, "own" if provide else "retain")
            return
        if cid in self._stored:
            return
        self._queue(cid, data, "own" if provide else "plain")

    def release(self, cids: Iterable[CID]) -> None:
        """``ReleaseBlocks``: unpin these retained events (own blocks stay pinned)."""
        for cid in cids:
            own = self._retained.pop(cid, None)
            if own is None or own:
                continue
            self._pin_due.pop(cid, None)
            if cid in self._pinned:
                self._unpin_due[cid] = None
        if self._unpin_due:
            self._put_wake.set()

    def pin_topic(self, cid: CID, data: bytes) -> None:
        """Pin topic ``cid`` (its first-version descriptor ``data``) directly and
        announce it once with ``provide/once`` (one provider record per topic)."""
        self._topics.add(cid)
        self._unpin_due.pop(cid, None)
        self._queue(cid, data, "topic")

    def has_topic(self, cid: CID) -> bool:
        return cid in self._topics

    def announce_topic(self, cid: CID) -> None:
        """Announce a pinned topic again (``provide/once``; the 12-hourly refresh)."""
        if cid in self._topics:
            self._queue_provide(cid)

    def unpin_topic(self, cid: CID) -> None:
        """The subscription ended: unpin the topic descriptor (own blocks stay pinned)."""
        if cid in self._topics:
            self._topics.discard(cid)
            if cid in self._pinned and cid not in self._retained:
                self._unpin_due[cid] = None
                self._put_wake.set()

    def _queue_provide(self, cid: CID) -> None:
        if len(self._provides) < _PROVIDE_QUEUE_MAX:
            self._provides.append(cid)
            self._provide_wake.set()
        else:
            self.provide_skipped += 1  # pinned: Kubo's reprovider announces it later

    async def _put_loop(self) -> None:
        while True:
            while not (self._puts or self._pin_due or self._unpin_due):
                self._put_wake = anyio.Event()
                await self._put_wake.wait()
            if self._puts:
                if not await self._put_one():
                    await anyio.sleep(_RETRY_DELAY)
                    continue
                batch = self.pin_batch
                if self._puts and len(self._pin_due) < batch and len(self._unpin_due) < batch:
                    continue  # keep putting; pin in batches once the queue drains
            if not await self._flush_pins():
                await anyio.sleep(_RETRY_DELAY)

    async def _put_one(self) -> bool:
        """Put the queue's first block (and pin it if own or a topic); False: Kubo is
        down, keep it queued."""
        cid, data, kind = self._puts[0]
        try:
            await self.kubo.block_put(data, pin=False)
            if kind == "own":
                # A direct pin: ``block/put --pin`` pins recursively, i.e. the whole
                # parent DAG, which Kubo then fetches if missing and reprovides
                # with every one of this node's own events.
                await self.kubo.pin_add(cid, recursive=False)
            self.stored += 1
        except KuboUnavailable as exc:
            # Kubo is down (restarting): keep the block queued, in order, and retry;
            # dropping it would lose the only copy of a block this node published.
            if not self.kubo_down:
                log.warning("block/put %s: Kubo unavailable, will retry: %s", cid, exc)
            self.kubo_down = True
            return False
        except KuboError as exc:
            self.store_failed += 1
            log.warning("block/put %s failed: %s", cid, exc)
            self.kubo_down = False
            self._puts.popleft()
            return True
        self.kubo_down = False
        self._puts.popleft()
        if kind == "retain":
            if self._retained.get(cid) is False and cid not in self._pinned:
                self._pin_due[cid] = None
        elif kind == "topic":
            if cid in self._topics:
                if cid not in self._pinned:
                    try:
                        await self.kubo.pin_add_many([cid], fast_provide_root=False)
                        self._pinned.add(cid)
                        self.pins_added += 1
                    except KuboError as exc:
                        self.pin_failed += 1
                        log.warning("pin/add of topic %s failed: %s", cid, exc)
                self._queue_provide(cid)  # the one announcement, pinned or not
        elif kind == "own" and self.provide_once:
            self._queue_provide(cid)
        return True

    def _take(self, due: dict[CID, None], keep: Callable[[CID], bool]) -> list[CID]:
        out: list[CID] = []
        while due and len(out) < self.pin_batch:
            cid = next(iter(due))
            del due[cid]
            if keep(cid):
                out.append(cid)
        return out

    async def _flush_pins(self) -> bool:
        """One ``pin/rm`` and one ``pin/add`` batch; False: Kubo is down (requeued)."""
        wanted = self._wanted
        unpins = self._take(self._unpin_due, lambda c: c in self._pinned and not wanted(c))
        if unpins:
            try:
                await self._unpin(unpins)
            except KuboUnavailable:
                self._unpin_due.update(dict.fromkeys(unpins))
                return False
        pins = self._take(self._pin_due, lambda c: c not in self._pinned and wanted(c))
        if pins:
            try:
                await self._pin(pins)
            except KuboUnavailable:
                self._pin_due.update(dict.fromkeys(pins))
                return False
        return True

    def _wanted(self, cid: CID) -> bool:
        return self._retained.get(cid) is False or cid in self._topics

    async def _pin(self, cids: list[CID]) -> None:
        self.pin_calls += 1
        try:
            await self.kubo.pin_add_many(cids, fast_provide_root=False)
        except KuboUnavailable:
            raise
        except KuboError as exc:
            if len(cids) == 1:
                self.pin_failed += 1
                log.warning("pin/add %s failed: %s", cids[0], exc)
                return
            for cid in cids:  # find the one Kubo refuses; pin the others
                await self._pin([cid])
            return
        self._pinned.update(cids)
        self.pins_added += len(cids)

    async def _unpin(self, cids: list[CID]) -> None:
        self.pin_calls += 1
        try:
            await self.kubo.pin_rm_many(cids, recursive=False)
        except KuboUnavailable:
            raise
        except KuboNotFound:
            # Kubo stops at the first CID that is not pinned (unpinned by hand?),
            # having unpinned those before it: go on one by one.
            if len(cids) > 1:
                for cid in cids:
                    await self._unpin([cid])
                return
        except KuboError as exc:
            self.pin_failed += len(cids)
            log.warning("pin/rm of %d blocks failed: %s", len(cids), exc)
            return
        else:
            self.pins_removed += len(cids)
        self._pinned.difference_update(cids)

    async def _provide_loop(self) -> None:
        while True:
            while not self._provides:
                self._provide_wake = anyio.Event()
                await self._provide_wake.wait()
            cid = self._provides.popleft()
            try:
                await self.kubo.provide_once(cid)
                self.provided += 1
                ok = True
            except KuboError as exc:
                self.provide_failed += 1
                log.debug("provide %s failed: %s", cid, exc)
                ok = False
            if cid in self._topics:
                self.topics_announced += ok
                if self.on_topic_announced is not None:
                    self.on_topic_announced(cid, ok)

    def fetch(self, cid: CID, answer: Callable[[CID, bytes | None], None]) -> None:
        """Start fetching ``cid``; ``answer(cid, data or None)`` is called when done."""
        assert self._tg is not None, "BlockStore.run must be started first"
        self._tg.start_soon(self._fetch, cid, answer)

    async def _fetch(self, cid: CID, answer: Callable[[CID, bytes | None], None]) -> None:
        data: bytes | None = None
        began = time.monotonic()
        while True:
            try:
                data = await self.kubo.block_get(cid, max_wait=self.fetch_timeout)
                self.fetched += 1
            except KuboUnavailable as exc:
                # Kubo itself is down (restarting): an immediate failure here would use
                # up the core's fetch attempts and give the event up; wait for Kubo.
                if time.monotonic() - began < _KUBO_DOWN_WAIT:
                    await anyio.sleep(_RETRY_DELAY)
                    continue
                log.debug("block/get %s failed: %s", cid, exc)
                self.fetch_failed += 1
            except KuboError as exc:
                log.debug("block/get %s failed: %s", cid, exc)
                self.fetch_failed += 1
            break
        answer(cid, data)

    async def get(self, cid: CID, max_wait: float) -> bytes:
        """Read a block for the API (local store first, then IPFS); KuboError on failure."""
        return await self.kubo.block_get(cid, max_wait=max_wait)
