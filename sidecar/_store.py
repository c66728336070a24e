"""Descriptor blocks in Kubo (docs/protocol.md §5 "Persistence"; docs/sidecar.md "Providing").

``StoreBlock`` → the exact dag-cbor bytes stored in Kubo, in order, by one writer
task: up to :data:`PUT_BATCH` queued blocks and :data:`PUT_BATCH_BYTES` bytes per
request, one ``dag/import`` of a CAR that pins nothing (``KuboClient.block_import_many``:
Kubo checks each block against its CID and stores all of them or none; one request
per received event was 40 % of a sidecar's CPU at 20 events/s, and a
multi-file ``block/put`` cost 4 times the CPU of the import in the sidecar and 3 times in
Kubo).
Before a request that would not be full it waits up to :data:`PUT_LINGER` for more
blocks: events 50 ms apart would otherwise still be put one per request. Pins and
unpins wait likewise, up to :data:`PIN_LINGER`, for a batch of :data:`PIN_BATCH`.
While Kubo is unavailable the batch stays queued, in order (an own block may exist
nowhere else); a batch Kubo refuses for another reason is put again one block at a
time, so that only the bad block is dropped. What is pinned and what is announced:

* a topic version this node authored (``StoreBlock.announce``) is put, pinned
  *directly* (not recursively: that would pin, fetch and reprovide the whole
  parent DAG) and announced: Kubo announces a pinned block at once under the
  ``pinned``, ``roots`` and ``all`` strategies; under any other strategy the
  sidecar also calls ``provide/once`` from a separate background queue
  (``announce`` setting). Either way dissemination never waits for the DHT (§5, §8);
* any other block this node created (``StoreBlock.own``: an event it published,
  also for a requester, §6) is put and pinned directly in batches of up to
  :data:`PIN_BATCH` CIDs per ``pin/add`` call with ``fast-provide-root=false``:
  events are never announced. The topic is (once per subscriber, below); a node
  that missed an event fetches it over bitswap from the peers it is connected to,
  and tree neighbours always are;
* an event of a history this node retains (``retain=True``, from
  ``StoreBlock.retain``: a subscriber's, author's or reader's topic, within the
  retention policy) is put, then linked from the retention index
  (``sidecar._retainindex``), which is pinned recursively and replaced with
  ``pin/update`` at most every :data:`INDEX_LINGER` seconds while it changes; not
  announced. ``ReleaseBlocks`` (fell out of the policy, topic left) unlinks them;
  own blocks stay pinned. With ``retain_pin=False`` they are put and not linked:
  Kubo keeps them until a garbage collection. (Direct pins of retained events were
  about half of Kubo's CPU while publishing at 20 events/s.)
* a topic this node subscribes to and announces (the driver decides who does,
  ``sidecar._announce``) is announced once (:meth:`BlockStore.pin_topic`):
  its first-version descriptor is pinned directly and announced with
  ``provide/once``: one provider record per topic per node, never one per event;
* any other block (received while forwarding, relaying or repairing a gap) is put
  *unpinned*: kept in this node's blockstore and served over bitswap, but never
  announced.

Between a block's put and its pin, a ``repo gc`` may collect it, and a pin of a
missing block waits for the network (for ever if no peer has it). The store keeps
the bytes of what it is still to pin: direct pins are made ``offline`` and a block
they miss is put again and pinned; a retention index pin that takes longer than
:data:`INDEX_PIN_WAIT` puts the events linked since the last one again
(``put_again``, ``pulsarcast_blocks_put_again_total``).

``FetchBlock`` → ``block/get`` with a timeout, answered with ``node.block_fetched``.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from typing import Final, Literal

import anyio
import anyio.abc

from pulsarcast_ipfs.core import cid_from_str
from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.core._dagcbor import sha256_cid
from pulsarcast_ipfs.core._digesttable import CIDFlags
from pulsarcast_ipfs.kubo import (
    KuboClient,
    KuboError,
    KuboNotFound,
    KuboTimeout,
    KuboUnavailable,
)
from sidecar._retainindex import (
    EMPTY_ROOT,
    INDEX_PIN_NAME,
    IndexBuild,
    NotAnIndex,
    RetainIndex,
    decode_bucket,
    decode_root,
)

__all__ = [
    "INDEX_PIN_WAIT",
    "PIN_BATCH",
    "PIN_LINGER",
    "PUT_BATCH",
    "PUT_BATCH_BYTES",
    "PUT_LINGER",
    "BlockStore",
    "kubo_announces_pins",
]

log = logging.getLogger("pulsarcast.sidecar.store")
_EMPTY_ROOT_CID: Final = sha256_cid(EMPTY_ROOT)

PIN_BATCH: Final = 100
"""CIDs per ``pin/add`` / ``pin/rm`` call for retained and own events."""
PUT_BATCH: Final = 100
"""Blocks per put request (Kubo 0.43's ``block/put``: 100 in one call 39 ms, in 100 calls 1.7 s)."""
PUT_BATCH_BYTES: Final = 1 << 20
"""Bytes of blocks per put request (a bigger block goes alone)."""
PUT_LINGER: Final = 1.0
"""Seconds the writer waits for more blocks before a put request that is not full.
A Kubo round trip takes milliseconds, so at 20 events/s the queue seldom holds more
than one block when the writer looks: 2-3 blocks per request with a 0.1 s wait. Each
request costs the sidecar ~1-3 ms of CPU on a loaded machine and Kubo about as much
(its HTTP API and a Pebble commit): HTTP calls to Kubo were ~15 % of a sidecar's busy
time and ~45 % of Kubo's at 20 events/s on 20 nodes (py-spy and Kubo's pprof,
session 17). From 0.5 to 1 s, with :data:`PIN_LINGER` from 1 to 2 s, the sidecars' and
Kubo's CPU per delivery fell by ~8 % (``benchmarks/cluster_cpu.py``, two runs each). A missed
event's block is fetched only after ``parent_grace`` (1 s) or a DIGEST round, and
from any neighbour that has it. Nothing waits for a put (§8; the API reads the
driver's block cache first), and a block asked for over bitswap meanwhile is sent
once Kubo has it."""
INDEX_LINGER: Final = 5.0
"""Seconds the retention index waits at most, once changed, before it is put and
pinned again: each update leaves its replaced bucket and root (~10 KB) to the next
``repo gc``; a retained event is unprotected from a ``repo gc`` until then, as any
block is between its put and its pin."""
PIN_LINGER: Final = 2.0
"""Seconds a block put waits at most for its ``pin/add`` (and a released event for
its ``pin/rm``) while fewer than :data:`PIN_BATCH` are due: without it the pins went
out whenever the put queue drained, one ``pin/add`` per put. A block is
safe unpinned until a ``repo gc``; own topic versions are pinned (announced) at once.
A block a ``repo gc`` collects meanwhile is put again (:data:`INDEX_PIN_WAIT`)."""
INDEX_PIN_WAIT: Final = 5.0
"""Seconds a ``pin/update`` of the retention index may take (milliseconds when every
block it links is here). Kubo fetches a missing block from the network however long
that takes, so a retained event that a ``repo gc`` collected between its put and the
index's pin would hold the writer until a peer had it, forever if none does. Past
this wait the events linked since the pinned index are put again and the pin made
once more. Direct pins (own events, topics) are made ``offline`` and fail at once on
a missing block, which is then put again the same way."""
_PROVIDE_QUEUE_MAX = 50_000
_RETRY_DELAY = 0.5
_DRAIN_WAIT = 5.0
"""How long a stopping store may take to put and pin what it still holds."""
_KUBO_DOWN_WAIT = 60.0
"""How long a fetch waits for an unavailable Kubo before it counts as failed."""


_Kind = Literal["plain", "own", "announce", "retain", "topic"]
"""What to do with a block once put: nothing, pin it (own event), pin and announce it
(own topic version), pin it as retained (unpinned when released), pin and announce
it as a subscribed topic."""
_PinCall = Callable[[list[CID]], Awaitable[None]]


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
        put_batch: int = PUT_BATCH,
        put_batch_bytes: int = PUT_BATCH_BYTES,
        put_linger: float = PUT_LINGER,
        pin_linger: float = PIN_LINGER,
        index_linger: float = INDEX_LINGER,
        retain_pin: bool = True,
    ) -> None:
        self.kubo = kubo
        self.retain_pin = retain_pin
        """Pin the events of retained histories. Off (``--no-retain-pin``): they are
        put and kept in Kubo's blockstore unpinned, as relays keep theirs, and a release
        has nothing to unpin; own blocks and subscribed topics are pinned either way."""
        self.provide_once = provide_once
        """Also ``provide/once`` the blocks to announce after pinning them (off when
        Kubo's provide strategy announces pins by itself, :func:`kubo_announces_pins`)."""
        self.fetch_timeout = fetch_timeout
        self.provide_workers = provide_workers
        self.pin_batch = pin_batch
        self.put_batch = put_batch
        self.put_batch_bytes = put_batch_bytes
        self.put_linger = put_linger
        self.pin_linger = pin_linger
        self.index_linger = index_linger
        self.index = RetainIndex()
        """The retained events, pinned as one recursive pin (``sidecar._retainindex``)."""
        self._index_since: float | None = None
        """When the index first changed since it was last pinned."""
        self._stale_roots: list[CID] = []
        """Indexes pinned under :data:`INDEX_PIN_NAME` besides the one loaded at start:
        unpinned once the index is pinned again (their events are in it)."""
        self._index_loaded = False
        """Whether Kubo's pins were looked through for an index pinned before (else
        that is tried again before the index is first pinned)."""
        self.index_updates = 0
        """Times the retention index was pinned anew (``pin/add`` or ``pin/update``)."""
        self._pins_since: float | None = None
        """When the writer first saw pins due that it has not made yet."""
        self._puts: deque[tuple[CID, bytes, _Kind]] = deque()
        self._queued_bytes = 0
        self._put_wake = anyio.Event()
        self._full_wake = anyio.Event()
        self._provides: deque[CID] = deque()
        self._provide_wake = anyio.Event()
        self._stored: set[CID] = set()
        self._retained = CIDFlags()
        """Events of retained histories (-> whether own): to be pinned while here (no
        Python object per event: a sidecar retains up to a million)."""
        self._topics: set[CID] = set()
        """Topic descriptors pinned and announced for this node's subscriptions."""
        self._pinned: set[CID] = set()
        """Topics this store pinned in Kubo directly."""
        self._pin_due: dict[CID, None] = {}
        """Topics put, to be pinned in batches."""
        self._unpin_due: dict[CID, None] = {}
        self._own_due: dict[CID, None] = {}
        """Own events put, to be pinned in batches (never unpinned, never announced)."""
        self._announce_due: dict[CID, None] = {}
        """Own topic versions put, to be pinned one by one and announced."""
        self._own_topics: set[CID] = set()
        """Own topic versions stored in this run: pinned and announced, or queued to be."""
        self._unpinned: dict[CID, bytes] = {}
        """Blocks put that are to be pinned directly (own events and topic versions,
        topics), until they are: put again if a ``repo gc`` collected them first."""
        self._unindexed: dict[CID, bytes] = {}
        """Retained events linked from the retention index since it was last pinned,
        until it is pinned again: put again if a ``repo gc`` collected them first."""
        self._tg: anyio.abc.TaskGroup | None = None
        self.stored = 0
        """Blocks put (each time one is put)."""
        self.put_calls = 0
        """Put requests (one per batch; one per block while isolating a
        refused one; retries while Kubo is down included)."""
        self.provided = 0
        self.provide_failed = 0
        self.provide_skipped = 0
        self.store_failed = 0
        """Blocks Kubo refused to store (dropped)."""
        self.put_again = 0
        """Blocks put again because a ``repo gc`` collected them before their pin."""
        self.pins_added = 0
        """Retained events linked from the retention index, topics pinned."""
        self.own_pins_added = 0
        """Own blocks pinned: events (in batches) and topic versions."""
        self.pins_removed = 0
        self.pin_failed = 0
        self.pin_calls = 0
        """``pin/add`` + ``pin/rm`` + ``pin/update`` calls for own events, topics and
        the retention index (batches)."""
        self.topics_announced = 0
        self._urgent: set[CID] = set()
        """Retained events a publisher waits for: put and pinned without waiting for
        fuller batches, then told to :attr:`on_held`."""
        self._urgent_put: dict[CID, bytes] = {}
        """Urgent retained events not put yet: put with the retention index's blocks."""
        self.on_held: Callable[[list[CID]], None] | None = None
        """Told the retained events that are stored and pinned (the retention index
        that links them is pinned; with ``retain_pin`` off: put)."""
        self.on_topic_announced: Callable[[CID, bool], None] | None = None
        """Told whether each topic announcement (``provide/once``) succeeded."""
        self.fetched = 0
        self.fetch_failed = 0
        self.kubo_down = False

    async def run(
        self,
        tg: anyio.abc.TaskGroup,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Write until cancelled; then, for at most :data:`_DRAIN_WAIT`, put what is
        still queued and make the pins due (the waits for fuller batches would
        otherwise lose them when the sidecar stops). Started (``tg.start``) once
        :meth:`fetch` may be called."""
        self._tg = tg
        for i in range(self.provide_workers):
            tg.start_soon(self._provide_loop, name=f"provide-{i}")
        if self.retain_pin:
            self._index_loaded = await self._load_index()
        task_status.started()
        try:
            await self._put_loop()
        finally:
            with anyio.move_on_after(_DRAIN_WAIT, shield=True):
                await self._drain()

    @property
    def pending(self) -> int:
        return (
            len(self._puts)
            + len(self._pin_due)
            + len(self._unpin_due)
            + len(self._own_due)
            + len(self._announce_due)
            + self.index.changed
        )

    @property
    def held_for_pins(self) -> int:
        """Blocks whose bytes the store holds until they are pinned (to put them again
        should a ``repo gc`` collect them first); 0 once every pin is made."""
        return len(self._unpinned) + len(self._unindexed)

    @property
    def retained_pinned(self) -> int:
        """Events of retained histories the pinned retention index links now (own
        ones excluded)."""
        return self.index.pinned_size

    def _queue(self, cid: CID, data: bytes, kind: _Kind) -> None:
        self._stored.add(cid)
        if len(self._stored) > 200_000:
            self._stored.clear()
        self._puts.append((cid, data, kind))
        self._queued_bytes += len(data)
        self._put_wake.set()
        if self._batch_full():
            self._full_wake.set()

    def _batch_full(self) -> bool:
        return len(self._puts) >= self.put_batch or self._queued_bytes >= self.put_batch_bytes

    def store(
        self,
        cid: CID,
        data: bytes,
        *,
        own: bool,
        announce: bool = False,
        retain: bool = False,
        urgent: bool = False,
    ) -> None:
        """Queue a block to be put (never blocks).

        ``own``: this node's own block, pinned (in a batch) and never announced, unless
        ``announce`` (a topic version this node authored; implies ``own``): pinned and
        announced. ``retain``: an event of a retained history, pinned (in a batch) and
        not announced; a block first stored unretained is put again and pinned when it
        comes back retained. Otherwise kept unpinned and unannounced. ``urgent`` (with
        ``retain``): a publisher waits for this node to hold it: no waiting for fuller
        batches, and :attr:`on_held` is told once it is pinned.
        """
        own = own or announce
        kind: _Kind = "announce" if announce else "own" if own else "retain" if retain else "plain"
        if announce:
            self._own_topics.add(cid)
        if retain:
            if cid in self._retained:
                if urgent and not own:
                    if cid in self._unindexed:
                        self._urgent.add(cid)  # told at the next index pin, made soon
                        self._put_wake.set()
                    elif cid in self.index or not self.retain_pin:
                        self._held([cid])
                return
            self._retained[cid] = own
            self._unpin_due.pop(cid, None)
            if urgent and not own and self.retain_pin:
                # A publisher waits: no put of its own, the block goes with the
                # retention index's blocks in the one import before its pin/update.
                self._urgent.add(cid)
                self._stored.add(cid)
                if self.index.add(cid):
                    self.pins_added += 1
                    self._unindexed[cid] = data
                    self._urgent_put[cid] = data
                    self._put_wake.set()
                    self._full_wake.set()  # (the writer may linger on other blocks)
                elif cid not in self._unindexed:
                    self._held([cid])  # pinned already (linked before)
                return
            if urgent and not own:
                self._urgent.add(cid)  # (retain_pin off: told once it is put)
                self._full_wake.set()
            if own and cid in self._stored:
                return  # already pinned (or queued to be) as this node's own block
            # Put again even if stored before: an unpinned copy may have been
            # collected, and a direct pin of a missing block would wait for the network.
            self._queue(cid, data, kind)
            return
        if cid in self._stored:
            return
        self._queue(cid, data, kind)

    def release(self, cids: Iterable[CID]) -> None:
        """``ReleaseBlocks``: unpin these retained events (own blocks stay pinned)."""
        for cid in cids:
            if self._retained.pop(cid):
                continue  # an own event: stays pinned
            self._unindexed.pop(cid, None)
            if self.index.remove(cid):  # also one retained before a restart
                self.pins_removed += 1
        if self.index.changed:
            self._put_wake.set()

    def pin_topic(self, cid: CID, data: bytes) -> None:
        """Pin topic ``cid`` (its first-version descriptor ``data``) directly and
        announce it once with ``provide/once`` (one provider record per topic).

        Not a topic this node created in this run: pinning it announced it already
        (fast-provide-root), and a second DHT ``provide`` of the same record costs
        ~29 KB at 20 nodes (the benchmark's authors subscribe to their own topics:
        23 of them, 0.67 MB)."""
        self._topics.add(cid)
        self._unpin_due.pop(cid, None)
        if cid in self._own_topics:
            self.topics_announced += 1
            if self.on_topic_announced is not None:
                self.on_topic_announced(cid, True)
            return
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
            if cid in self._pin_due:
                del self._pin_due[cid]
                if cid not in self._announce_due:  # (an own topic version: still due)
                    self._unpinned.pop(cid, None)
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
            while not self.pending:
                self._put_wake = anyio.Event()
                await self._put_wake.wait()
            if self._puts:
                await self._linger()
                if not await self._put_batch():
                    await anyio.sleep(_RETRY_DELAY)
                    continue
            if self._puts and not self._pins_urgent():
                continue  # keep putting; pin in batches
            wait = self._pins_wait(anyio.current_time())
            if wait > 0:
                self._put_wake = anyio.Event()
                with anyio.move_on_after(wait):
                    await self._put_wake.wait()  # a new block, or the pins' time
                continue
            if not await self._flush_pins():
                await anyio.sleep(_RETRY_DELAY)
                continue
            dues = (self._pin_due, self._unpin_due, self._own_due)
            self._pins_since = anyio.current_time() if any(dues) else None

    def _index_due(self, now: float) -> float:
        """Seconds until the changed retention index is to be pinned (0: now)."""
        if not self.index.changed:
            self._index_since = None
            return float("inf")
        if self._index_since is None:
            self._index_since = now
        if self._urgent and any(c in self._unindexed for c in self._urgent):
            return 0.0  # a publisher waits for one of them
        return max(0.0, self._index_since + self.index_linger - now)

    def _pins_urgent(self) -> bool:
        """An own topic version to pin (and announce), or a full batch of pins."""
        dues = (self._pin_due, self._unpin_due, self._own_due)
        return bool(self._announce_due) or any(len(d) >= self.pin_batch for d in dues)

    def _pins_wait(self, now: float) -> float:
        """How long the pins due may wait for more (0: make them now): not at all if
        urgent, else up to ``pin_linger`` since the writer first saw them."""
        index = self._index_due(now)
        if not any((self._pin_due, self._unpin_due, self._own_due)):
            self._pins_since = None
            return 0.0 if index == float("inf") else index
        if self._pins_urgent():
            return 0.0
        if self._pins_since is None:
            self._pins_since = now
        return min(index, max(0.0, self._pins_since + self.pin_linger - now))

    async def _drain(self) -> None:
        """Put what is queued and make every pin due, without waiting for fuller
        batches; stop at once if Kubo is down."""
        while self._puts:
            if not await self._put_batch():
                return
        while self._pin_due or self._unpin_due or self._own_due or self._announce_due:
            if not await self._flush_pins():
                return
        if self.index.changed:
            await self._flush_index()

    async def _linger(self) -> None:
        """Wait up to ``put_linger`` for more blocks unless a batch is full already
        (or a publisher waits for one of them)."""
        if self.put_linger <= 0 or self._batch_full() or self._urgent:
            return
        self._full_wake = anyio.Event()
        with anyio.move_on_after(self.put_linger):
            await self._full_wake.wait()

    def _next_batch(self) -> list[tuple[CID, bytes, _Kind]]:
        """The queue's first blocks: up to ``put_batch`` of them and ``put_batch_bytes``
        bytes (at least one block)."""
        batch: list[tuple[CID, bytes, _Kind]] = []
        size = 0
        for item in self._puts:
            if batch and (
                len(batch) >= self.put_batch or size + len(item[1]) > self.put_batch_bytes
            ):
                break
            batch.append(item)
            size += len(item[1])
        return batch

    async def _put_batch(self) -> bool:
        """Put the queue's first blocks with one request; False: Kubo is down (they
        stay queued, in order)."""
        batch = self._next_batch()
        try:
            await self._put(batch)
        except KuboUnavailable as exc:
            self._down(len(batch), exc)
            return False
        except KuboError as exc:
            if len(batch) == 1:
                self._refused(batch[0][0], exc)
                return True
            # Kubo refused one of them (and stored none): find which, store the others.
            log.info("put of %d blocks failed, one by one: %s", len(batch), exc)
            for cid, data, kind in batch:
                try:
                    await self._put([(cid, data, kind)])
                except KuboUnavailable as down:
                    self._down(1, down)
                    return False
                except KuboError as refused:
                    self._refused(cid, refused)
        return True

    async def _put(self, batch: list[tuple[CID, bytes, _Kind]]) -> None:
        """One import of ``batch`` (the head of the queue); dequeue the blocks and queue
        their pins once Kubo has them all."""
        self.put_calls += 1
        await self.kubo.block_import_many(
            [data for _, data, _ in batch], cids=[cid for cid, _, _ in batch]
        )
        self.kubo_down = False
        for cid, data, kind in batch:
            self._puts.popleft()
            self._queued_bytes -= len(data)
            self.stored += 1
            self._after_put(cid, data, kind)

    def _down(self, blocks: int, exc: KuboError) -> None:
        # Kubo is down (restarting): keep the blocks queued, in order, and retry;
        # dropping them would lose the only copy of a block this node published.
        if not self.kubo_down:
            log.warning("put of %d blocks: Kubo unavailable, will retry: %s", blocks, exc)
        self.kubo_down = True

    def _refused(self, cid: CID, exc: KuboError) -> None:
        self.store_failed += 1
        self.kubo_down = False
        log.warning("put of %s failed: %s", cid, exc)
        _, data, _ = self._puts.popleft()
        self._queued_bytes -= len(data)

    def _after_put(self, cid: CID, data: bytes, kind: _Kind) -> None:
        if kind == "own":
            # A direct pin: ``block/put --pin`` pins recursively, i.e. the whole
            # parent DAG, which Kubo then fetches if missing and reprovides with
            # every one of this node's own events.
            self._own_due[cid] = None
            self._unpinned[cid] = data
        elif kind == "announce":
            self._announce_due[cid] = None
            self._unpinned[cid] = data
        elif kind == "retain":
            if self.retain_pin and self._retained.get(cid) is False and self.index.add(cid):
                self.pins_added += 1
                self._unindexed[cid] = data
            elif cid in self._urgent and cid not in self._unindexed:
                self._held([cid])  # pinned before (indexed), or nothing to pin
        elif kind == "topic":
            if cid in self._topics:
                if cid not in self._pinned:
                    self._pin_due[cid] = None
                    self._unpinned[cid] = data
                self._queue_provide(cid)  # the one announcement, pinned or not

    async def _put_again(self, blocks: dict[CID, bytes], cids: Iterable[CID]) -> bool:
        """Put these of ``blocks`` again: a ``repo gc`` may have collected them between
        their put and their pin. False if there was none to put, or Kubo refused them
        (``KuboUnavailable`` goes to the caller, which keeps its pins due)."""
        again = [(cid, blocks[cid]) for cid in cids if cid in blocks]
        if not again:
            return False
        self.put_calls += 1
        try:
            await self.kubo.block_import_many([d for _, d in again], cids=[c for c, _ in again])
        except KuboUnavailable:
            raise
        except KuboError as exc:
            log.warning("%d block(s) not put again: %s", len(again), exc)
            return False
        self.put_again += len(again)
        log.info("%d block(s) put again before their pin (collected by a repo gc?)", len(again))
        return True

    def _take(self, due: dict[CID, None], keep: Callable[[CID], bool]) -> list[CID]:
        out: list[CID] = []
        while due and len(out) < self.pin_batch:
            cid = next(iter(due))
            del due[cid]
            if keep(cid):
                out.append(cid)
            elif due is not self._unpin_due:
                self._unpinned.pop(cid, None)
        return out

    async def _flush_pins(self) -> bool:
        """Own topic versions pinned (and announced); then one batch each of ``pin/rm``
        (released), ``pin/add`` (retained events, topics) and ``pin/add`` (own events);
        False: Kubo is down (requeued)."""
        while self._announce_due:
            cid = next(iter(self._announce_due))
            if not await self._pin_announced(cid):
                return False
            del self._announce_due[cid]
        wanted = self._wanted
        steps: tuple[tuple[dict[CID, None], Callable[[CID], bool], _PinCall], ...] = (
            (self._unpin_due, lambda c: c in self._pinned and not wanted(c), self._unpin),
            (self._pin_due, lambda c: c not in self._pinned and wanted(c), self._pin),
            (self._own_due, lambda c: True, self._pin_own),
        )
        for due, keep, call in steps:
            cids = self._take(due, keep)
            if not cids:
                continue
            try:
                await call(cids)
            except KuboUnavailable:
                due.update(dict.fromkeys(cids))
                return False
        if self._index_due(anyio.current_time()) == 0.0:
            return await self._flush_index()
        return True

    async def _flush_index(self) -> bool:
        """Put the retention index's changed blocks and pin its new root in place of
        the old one (``pin/update``: one pin operation, however many events changed);
        False: Kubo is down (still changed, tried again)."""
        if not self._index_loaded:
            self._index_loaded = await self._load_index()
            if not self._index_loaded:
                return False
        linked = list(self._unindexed)  # every one of them is in the build
        build = self.index.build()
        blocks = list(build.blocks)
        urgent = list(self._urgent_put.items())
        blocks += urgent
        if self.index.root is None:
            blocks.append((_EMPTY_ROOT_CID, EMPTY_ROOT))  # pinned first (see _pin_index)
        try:
            await self.kubo.block_import_many(
                [data for _, data in blocks], cids=[cid for cid, _ in blocks]
            )
            await self._pin_index(build)
        except KuboUnavailable:
            return False
        except KuboError as exc:
            self.pin_failed += 1
            log.warning("retention index %s not pinned: %s", build.root, exc)
            self._index_since = anyio.current_time()  # tried again after index_linger
            self._urgent.clear()  # (no retrying at once: their publishers time out)
            return True
        self.index.commit(build)
        for cid, _ in urgent:
            self._urgent_put.pop(cid, None)
        self.stored += len(urgent)
        for cid in linked:
            self._unindexed.pop(cid, None)
        self._held(linked)
        self.index_updates += 1
        self._index_since = None
        while self._stale_roots:
            old = self._stale_roots.pop()
            try:
                await self.kubo.pin_rm_many([old], recursive=True)
            except KuboError as exc:
                log.info("older retention index %s not unpinned: %s", old, exc)
        return True

    def _held(self, cids: list[CID]) -> None:
        for cid in cids:
            self._urgent.discard(cid)
        if cids and self.on_held is not None:
            self.on_held(cids)

    async def _pin_index(self, build: IndexBuild) -> None:
        old = self.index.root
        self.pin_calls += 1
        if old is None:
            # The empty index first, then pin/update: Kubo (Provide.Strategy=pinned)
            # announces every block a recursive pin/add walks, pin/update none.
            await self.kubo.pin_add_many([_EMPTY_ROOT_CID], recursive=True, name=INDEX_PIN_NAME)
            old = _EMPTY_ROOT_CID
            self.pin_calls += 1
        if old == build.root:
            return
        try:
            await self.kubo.pin_update(old, build.root, unpin=True, max_wait=INDEX_PIN_WAIT)
        except KuboUnavailable:
            raise
        except KuboTimeout:
            # Kubo is fetching a linked event from the network: a repo gc collected it
            # after its put. Put them all again; a second time out fails the pin.
            if not await self._put_again(self._unindexed, list(self._unindexed)):
                raise
            self.pin_calls += 1
            await self.kubo.pin_update(old, build.root, unpin=True, max_wait=INDEX_PIN_WAIT)
        except KuboError as exc:
            # The old root is no longer pinned (unpinned by hand), or the new one is
            # pinned already: pin the new one, drop the old one if it is still there.
            log.info("pin/update of the retention index failed (%s): pinning it anew", exc)
            await self.kubo.pin_add_many([_EMPTY_ROOT_CID], recursive=True, name=INDEX_PIN_NAME)
            await self.kubo.pin_update(_EMPTY_ROOT_CID, build.root, unpin=True)
            self._stale_roots.append(old)

    async def _load_index(self) -> bool:
        """Go on from the retention index a previous run pinned (its events stay
        retained until the core releases them); an unreadable one is left pinned.
        False: Kubo's pins could not be listed (tried again before the first pin)."""
        try:
            pins = await self.kubo.pin_names(pin_type="recursive")
        except KuboError as exc:
            log.warning("cannot list Kubo's pins yet (%s): retried before pinning", exc)
            return False
        for text, name in sorted(pins.items()):
            if name != INDEX_PIN_NAME:
                continue
            try:
                root = cid_from_str(text)
                links = decode_root(await self.kubo.block_get(root, max_wait=10.0))
                buckets = [
                    decode_bucket(await self.kubo.block_get(b, max_wait=10.0)) for b in links
                ]
            except (KuboError, NotAnIndex, ValueError) as exc:
                log.warning(
                    "pin %s named %s is no retention index we can read (%s): left as it is",
                    text,
                    INDEX_PIN_NAME,
                    exc,
                )
                continue
            if self.index.root is not None:
                self._stale_roots.append(root)
            self.index.load(root, buckets)
            log.info("retention index %s: %d events retained before", root, len(self.index))
        return True

    def _wanted(self, cid: CID) -> bool:
        return self._retained.get(cid) is False or cid in self._topics

    async def _pin_announced(self, cid: CID) -> bool:
        """Pin an own topic version directly, with Kubo's fast-provide-root (it
        announces the pin at once), and ``provide/once`` it too if that is not enough;
        False: Kubo is down."""
        try:
            try:
                await self.kubo.pin_add_many([cid], fast_provide_root=True, offline=True)
            except KuboNotFound:
                if not await self._put_again(self._unpinned, [cid]):
                    raise
                await self.kubo.pin_add_many([cid], fast_provide_root=True, offline=True)
        except KuboUnavailable:
            return False
        except KuboError as exc:
            self.pin_failed += 1
            self._unpinned.pop(cid, None)
            log.warning("pin/add %s failed: %s", cid, exc)
            self._own_topics.discard(cid)
            if cid in self._topics:  # subscribed meanwhile: announce it that way
                self._queue_provide(cid)
            return True
        self._unpinned.pop(cid, None)
        self.own_pins_added += 1
        if self.provide_once:
            self._queue_provide(cid)
        return True

    async def _pin_own(self, cids: list[CID]) -> None:
        await self._pin(cids, own=True)

    async def _pin(self, cids: list[CID], *, own: bool = False, again: bool = True) -> None:
        """Pin ``cids`` directly, ``offline``: a block a ``repo gc`` collected since its
        put is put again (``again``, once) rather than waited for from the network."""
        self.pin_calls += 1
        try:
            await self.kubo.pin_add_many(cids, fast_provide_root=False, offline=True)
        except KuboUnavailable:
            raise
        except KuboError as exc:
            if again and isinstance(exc, KuboNotFound):
                if await self._put_again(self._unpinned, cids):
                    await self._pin(cids, own=own, again=False)
                    return
            if len(cids) == 1:
                self.pin_failed += 1
                self._unpinned.pop(cids[0], None)
                log.warning("pin/add %s failed: %s", cids[0], exc)
                return
            for cid in cids:  # find the one Kubo refuses; pin the others
                await self._pin([cid], own=own, again=False)
            return
        for cid in cids:
            self._unpinned.pop(cid, None)
        if own:
            self.own_pins_added += len(cids)
        else:
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
