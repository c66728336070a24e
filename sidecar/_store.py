"""Descriptor blocks in Kubo (PROTOCOL.md §5 "Persistence").

``StoreBlock`` → ``block/put`` of the exact dag-cbor bytes (CID checked by the
client), in order, by one writer task. Who announces (docs/sidecar.md "Providing"):

* a block this node created itself (``provide=True``, from the core's
  ``StoreBlock.own``: a topic version it authored, an event it published, also
  for a requester, §6) is put and pinned
  *directly* (not recursively: that would pin, fetch and reprovide the whole
  parent chain). Kubo announces a pinned block at once under the ``pinned``,
  ``roots`` and ``all`` strategies, and its reprovider again every
  ``Provide.DHT.Interval``, with or without the sidecar; under any other strategy
  the sidecar also calls ``provide/once`` from a separate background queue
  (``announce`` setting). Either way dissemination never waits for the DHT (§5, §8);
* a block received while forwarding, delivering or repairing a gap is put
  *unpinned*: kept in this node's blockstore and served over bitswap, but never
  announced, because under Kubo's ``pinned`` (and ``roots``, ``all``) strategy
  every pinned block is re-announced by every node that holds it.

``FetchBlock`` → ``block/get`` with a timeout, answered with ``node.block_fetched``.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable

import anyio
import anyio.abc
from multiformats import CID

from pulsarcast_ipfs.kubo import KuboClient, KuboError, KuboUnavailable

__all__ = ["BlockStore", "kubo_announces_pins"]

log = logging.getLogger("pulsarcast.sidecar.store")

_PROVIDE_QUEUE_MAX = 50_000
_RETRY_DELAY = 0.5
_KUBO_DOWN_WAIT = 60.0
"""How long a fetch waits for an unavailable Kubo before it counts as failed."""


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
    """Writes, pins, provides and fetches descriptor blocks through Kubo."""

    def __init__(
        self,
        *,
        kubo: KuboClient,
        fetch_timeout: float,
        provide_workers: int = 2,
        provide_once: bool = True,
    ) -> None:
        self.kubo = kubo
        self.provide_once = provide_once
        """Also ``provide/once`` own blocks after pinning them (off when Kubo's provide
        strategy announces pins by itself, :func:`kubo_announces_pins`)."""
        self.fetch_timeout = fetch_timeout
        self.provide_workers = provide_workers
        self._puts: deque[tuple[CID, bytes, bool]] = deque()
        self._put_wake = anyio.Event()
        self._provides: deque[CID] = deque()
        self._provide_wake = anyio.Event()
        self._stored: set[CID] = set()
        self._tg: anyio.abc.TaskGroup | None = None
        self.stored = 0
        self.provided = 0
        self.provide_failed = 0
        self.provide_skipped = 0
        self.store_failed = 0
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
        return len(self._puts)

    def store(self, cid: CID, data: bytes, *, provide: bool) -> None:
        """Queue a block for ``block/put`` (never blocks).

        ``provide``: this node's own block, pinned and announced; otherwise kept unpinned
        and unannounced.
        """
        if cid in self._stored:
            return
        self._stored.add(cid)
        if len(self._stored) > 200_000:
            self._stored.clear()
        self._puts.append((cid, data, provide))
        self._put_wake.set()

    async def _put_loop(self) -> None:
        while True:
            while not self._puts:
                self._put_wake = anyio.Event()
                await self._put_wake.wait()
            cid, data, provide = self._puts[0]
            try:
                await self.kubo.block_put(data, pin=False)
                if provide:
                    # A direct pin: ``block/put --pin`` pins recursively, i.e. the whole
                    # parent chain, which Kubo then fetches if missing and reprovides
                    # with every one of this node's own events.
                    await self.kubo.pin_add(cid, recursive=False)
                self.stored += 1
            except KuboUnavailable as exc:
                # Kubo is down (restarting): keep the block queued, in order, and retry;
                # dropping it would lose the only copy of a block this node published.
                if not self.kubo_down:
                    log.warning("block/put %s: Kubo unavailable, will retry: %s", cid, exc)
                self.kubo_down = True
                await anyio.sleep(_RETRY_DELAY)
                continue
            except KuboError as exc:
                self.store_failed += 1
                log.warning("block/put %s failed: %s", cid, exc)
            self.kubo_down = False
            self._puts.popleft()
            if not provide or not self.provide_once:
                continue
            if len(self._provides) < _PROVIDE_QUEUE_MAX:
                self._provides.append(cid)
                self._provide_wake.set()
            else:
                self.provide_skipped += 1  # pinned: Kubo's reprovider announces it later

    async def _provide_loop(self) -> None:
        while True:
            while not self._provides:
                self._provide_wake = anyio.Event()
                await self._provide_wake.wait()
            cid = self._provides.popleft()
            try:
                await self.kubo.provide_once(cid)
                self.provided += 1
            except KuboError as exc:
                self.provide_failed += 1
                log.debug("provide %s failed: %s", cid, exc)

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
