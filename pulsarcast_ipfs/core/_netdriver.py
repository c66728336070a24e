"""One in-process network of protocol nodes, for CoreNet and the simulator.

Theory of operation
-------------------
:class:`NetDriver` runs real :class:`~pulsarcast_ipfs.core.PulsarcastNode` objects
(or any object with the same inputs) on an :class:`EventHeap` with a virtual
clock. It owns the mechanics that both of its users need, and nothing else:

- **Peers.** Node ``i`` has ``peer_ids[i]``; :func:`make_peer_ids` and
  :func:`make_signers` are the one generator of peer IDs (Ed25519 identity
  multihashes, ``12D3KooW…``, as Kubo's), drawn from :func:`substream`.
- **Timers.** After each input the node's ``get_timer()`` is armed in the heap;
  an entry superseded by a later arming is skipped by a per-node version.
- **Transport.** A ``SendRpc`` to a peer that is down (or unknown) makes the
  sender's ``peer_unreachable`` fire ``unreachable_after`` later; otherwise
  :class:`Links` decides whether the message is lost and when it arrives.
- **Blocks.** ``StoreBlock`` puts the bytes in one shared store, with a bitmap
  of the nodes holding each block. ``FetchBlock`` is answered after
  :meth:`NetDriver._fetch_delay`; if no holder is reachable
  (:meth:`NetDriver._available`) the answer waits ``fetch_timeout`` once more,
  then is ``None``.
- **Faults.** :meth:`NetDriver.take_down` stops a node: entries for it are
  skipped while it is down. A node kept in memory (``keep_state``) comes back
  with :meth:`NetDriver.bring_up`; a dropped one gets a new incarnation (and a
  new node object), and what was in flight to its old incarnation is lost.

The differences between CoreNet (a test helper) and the simulator (a model of a
Kubo network) are the class attributes of the fault model below, the link
model, and the hooks ``_fetch_delay``, ``_available``, ``_sent`` and
``_unknown_peer``; statistics and logs are the subclasses' ``on_*`` output
methods. Pure: simulated time only, randomness only from injected ``Random``s.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from random import Random
from typing import Any, ClassVar, Final

from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.kademlia import peer_id_from_bytes

from ._codec import FrameDecoder, Rpc
from ._dispatch import OutputDispatch
from ._io import FetchBlock, SendRpc, SignRequest, StoreBlock
from ._signing import _ED25519_PEER_PREFIX, Ed25519Signer

__all__ = [
    "DriverError",
    "EventHeap",
    "Links",
    "NetDriver",
    "make_peer_ids",
    "make_signers",
    "substream",
]


class DriverError(RuntimeError):
    """The network was driven incorrectly (an event scheduled in the past, no quiescence)."""


def substream(seed: int, name: str) -> Random:
    """An independent, reproducible random stream for one purpose of a run (string
    seeds are hashed with SHA-512 by :mod:`random`, whatever ``PYTHONHASHSEED``)."""
    return Random(f"pulsarcast-sim:{seed}:{name}")


def make_peer_ids(count: int, *, seed: int = 0) -> list[str]:
    """``count`` distinct Ed25519-style identity peer IDs, deterministic in ``seed``.

    The 32 key bytes are random, not a key: for signing nodes use :func:`make_signers`.
    """
    rng = substream(seed, "peer-ids")
    ids: list[str] = []
    seen: set[str] = set()
    while len(ids) < count:
        pid = peer_id_from_bytes(_ED25519_PEER_PREFIX + rng.randbytes(32))
        if pid not in seen:
            seen.add(pid)
            ids.append(pid)
    return ids


def make_signers(count: int, *, seed: int = 0) -> list[Ed25519Signer]:
    """``count`` Ed25519 identities (``.peer_id``, ``.sign``), deterministic in ``seed``."""
    rng = substream(seed, "ed25519-keys")
    return [Ed25519Signer(rng.randbytes(32)) for _ in range(count)]


Entry = tuple[float, int, int, Any, Any, Any]


class EventHeap:
    """Pending happenings ``(time, seq, kind, a, b, c)`` ordered by ``(time, seq)``,
    and the virtual clock. ``seq`` is unique, so equal times pop in insertion order
    and the payloads are never compared."""

    __slots__ = ("_heap", "_seq", "now")

    def __init__(self, *, start: float = 0.0) -> None:
        self._heap: list[Entry] = []
        self._seq = 0
        self.now = start
        """The virtual clock: the time of the last entry popped (never goes back)."""

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, time: float, kind: int, a: Any = None, b: Any = None, c: Any = None) -> int:
        """Schedule ``kind`` with its fields at ``time`` (not before :attr:`now`); return seq."""
        if time < self.now:
            raise DriverError(f"cannot schedule at {time!r}, before the clock ({self.now!r})")
        seq = self._seq
        self._seq = seq + 1
        heapq.heappush(self._heap, (time, seq, kind, a, b, c))
        return seq

    def peek_time(self) -> float | None:
        """Time of the next entry, or ``None`` when empty."""
        return self._heap[0][0] if self._heap else None

    def pop(self) -> Entry:
        """Remove the earliest entry and advance the clock to its time."""
        entry = heapq.heappop(self._heap)
        self.now = entry[0]
        return entry


class Links:
    """The link model: which messages are lost and when the others arrive.

    A message is lost with probability ``loss`` (a draw of ``loss_rng``) or when
    ``drop_if(sender, receiver, rpc)`` says so; otherwise it takes ``delay()`` plus
    ``extra_delay(sender, receiver)``. With ``fifo`` every link is first in, first
    out (one TCP-like connection); without, only links with an extra delay are.
    """

    __slots__ = ("_last", "delay", "drop_if", "extra_delay", "fifo", "loss", "loss_rng")

    def __init__(
        self,
        *,
        delay: Callable[[], float],
        loss: float = 0.0,
        loss_rng: Random | None = None,
        fifo: bool = True,
    ) -> None:
        if loss and loss_rng is None:
            raise ValueError("a lossy link model needs loss_rng")
        self.delay = delay
        self.loss = loss
        self.loss_rng = loss_rng
        self.fifo = fifo
        self.drop_if: Callable[[str, str, Rpc], bool] | None = None
        self.extra_delay: Callable[[str, str], float] | None = None
        self._last: dict[tuple[int, int], float] = {}

    def arrival(self, now: float, src: int, dst: int, peers: list[str], rpc: Rpc) -> float | None:
        """When a message sent ``now`` from ``src`` arrives at ``dst`` (``None``: lost)."""
        if self.loss and self.loss_rng is not None and self.loss_rng.random() < self.loss:
            return None
        if self.drop_if is not None and self.drop_if(peers[src], peers[dst], rpc):
            return None
        at = now + self.delay()
        extra = self.extra_delay(peers[src], peers[dst]) if self.extra_delay else 0.0
        if extra or self.fifo:
            at += extra
            link = (src, dst)
            last = self._last.get(link)
            if last is not None and at < last:
                at = last
            self._last[link] = at
        return at


class NetDriver:
    """Nodes on an event heap: timers, transport, blocks, faults (see the module doc).

    A subclass sets ``self._nodes[i]`` for each peer (then calls :meth:`_drain`),
    implements the ``on_*`` methods of the outputs it does not leave to the driver
    (``Deliver``, ``TopicUpdated``, ``MetricRecord``, ``ReleaseBlocks``,
    ``OperationDone``, ``DisconnectPeer``; :data:`ignored_outputs` lists those it
    does not care about), and may add kinds of heap entries with :meth:`add_kind`.
    """

    RPC: Final = 0
    TIMER: Final = 1
    FETCH: Final = 2
    UNREACHABLE: Final = 3

    # -- the fault model (a subclass overrides these) --------------------------------
    ignored_outputs: ClassVar[tuple[type, ...]] = ()
    coalesce_unreachable: ClassVar[bool] = True
    """One pending ``peer_unreachable`` per (sender, peer), as one failed connection."""
    coalesce_fetches: ClassVar[bool] = True
    """One fetch per (node, CID) in flight, as bitswap coalesces wants."""
    late_unreachable: ClassVar[bool] = True
    """A message reaching a peer that went down meanwhile tells its sender, like one
    sent to a peer already down (else it is lost silently)."""
    lose_from_down_senders: ClassVar[bool] = False
    """Messages in flight from a peer that went down are lost (its connections reset)."""

    def __init__(
        self,
        peer_ids: list[str],
        *,
        links: Links,
        start: float,
        unreachable_after: float | None,
        fetch_timeout: float | None,
        wire: bool,
    ) -> None:
        n = len(peer_ids)
        self.peer_ids = peer_ids
        self.index = {p: i for i, p in enumerate(peer_ids)}
        self.links = links
        self.heap = EventHeap(start=start)
        self.start = start
        self.unreachable_after = unreachable_after
        """Seconds until a sender hears that a peer is unreachable (``None``: never)."""
        self.fetch_timeout = fetch_timeout
        """How long a fetch with no reachable holder waits for one (``None``: not at all)."""
        self.wire = wire
        """Messages go through the frame codec (``False``: the codec's objects are passed)."""
        self.signers: dict[str, Ed25519Signer] = {}
        """Peer ID -> identity that answers its node's ``SignRequest`` at once."""
        self._nodes: list[Any] = [None] * n
        self.up = [True] * n
        self.incarnation = [0] * n
        self.timer_version = [0] * n
        self.armed: list[float | None] = [None] * n
        self.blocks: dict[CID, bytes] = {}
        self.holders: dict[CID, bytearray] = {}
        """CID -> bitmap of the nodes holding the block (bit ``i`` of byte ``i >> 3``)."""
        self._nbytes = (n + 7) // 8
        self.messages = 0
        self.lost = 0
        self.fetches = 0
        self._pending_unreachable: set[tuple[int, str]] = set()
        self._pending_fetch: set[tuple[int, int, CID]] = set()
        self._last_instant = -1.0
        self._same_instant = 0
        self._handlers: list[Callable[[Any, Any, Any], None]] = [
            self._deliver_rpc,
            self._fire_timer,
            self._finish_fetch,
            self._unreachable,
        ]
        self.kind_names = ["rpc", "timer", "block fetched", "peer unreachable"]
        self._dispatch: OutputDispatch[int] = OutputDispatch(self, ignore=self.ignored_outputs)

    @property
    def now(self) -> float:
        """The virtual clock."""
        return self.heap.now

    def add_kind(self, name: str, handler: Callable[[Any, Any, Any], None]) -> int:
        """A new kind of heap entry; ``handler(a, b, c)`` runs when one pops."""
        self._handlers.append(handler)
        self.kind_names.append(name)
        return len(self._handlers) - 1

    # -- running ----------------------------------------------------------------------

    def run_until(
        self,
        end: float,
        *,
        max_steps: int | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> int:
        """Process every entry up to virtual time ``end``; return how many. The clock
        stays at the last entry's time. An exception while handling an entry comes
        out as :class:`DriverError` naming it (the original is its cause)."""
        h = self.heap
        heap_list = h._heap  # the hot loop peeks without a method call
        handlers = self._handlers
        count = 0
        while heap_list and heap_list[0][0] <= end:
            _, _, kind, a, b, c = h.pop()
            count += 1
            try:
                handlers[kind](a, b, c)
            except DriverError:
                raise
            except Exception as exc:
                raise DriverError(
                    f"{type(exc).__name__} while handling {self.kind_names[kind]} "
                    f"(node {a}) at t={h.now - self.start:.6f}s, heap event #{count}: {exc}"
                ) from exc
            if max_steps is not None and count > max_steps:
                raise DriverError(f"no quiescence after {max_steps} steps")
            if progress is not None and count % 2048 == 0:
                progress(count)
        return count

    def step(self) -> bool:
        """Process the next entry; ``False`` when there is none."""
        if not self.heap:
            return False
        _, _, kind, a, b, c = self.heap.pop()
        self._handlers[kind](a, b, c)
        return True

    def _drain(self, i: int) -> None:
        """Carry out node ``i``'s outputs and (re)arm its timer."""
        node = self._nodes[i]
        dispatch = self._dispatch
        outs = node.take_outputs()
        while outs:
            dispatch(i, outs)
            outs = node.take_outputs()  # answered signatures resume the node
        t = node.get_timer()
        if t != self.armed[i]:
            self.armed[i] = t
            self.timer_version[i] += 1
            if t is not None:
                now = self.heap.now
                self.heap.push(t if t > now else now, self.TIMER, i, self.timer_version[i])

    def _fire_timer(self, i: int, version: int, _: object) -> None:
        if version != self.timer_version[i] or not self.up[i]:
            return
        now = self.heap.now
        if now == self._last_instant:
            self._same_instant += 1
            if self._same_instant > 100_000:
                raise DriverError(
                    f"timers keep firing at the same virtual instant {now - self.start:.6f}s "
                    f"(node {i}): the core's get_timer() does not advance"
                )
        else:
            self._last_instant = now
            self._same_instant = 0
        self.armed[i] = None
        self._nodes[i].handle_timer(now)
        self._drain(i)

    # -- transport --------------------------------------------------------------------

    def _sent(self, src: int, out: SendRpc) -> None:
        """Hook: node ``src`` sent ``out`` (before the link decides its fate)."""

    def _unknown_peer(self, src: int, out: SendRpc) -> None:
        """Hook: node ``src`` sent to a peer that is not in the network."""
        raise DriverError(f"node {src} sent to unknown peer {out.peer!r}")

    def on_send_rpc(self, src: int, out: SendRpc) -> None:
        self.messages += 1
        self._sent(src, out)
        dst = self.index.get(out.peer)
        if dst is None:
            self._unknown_peer(src, out)
            return
        if not self.up[dst]:
            self._unreachable_later(src, out.peer)
            return
        now = self.heap.now
        at = self.links.arrival(now, src, dst, self.peer_ids, out.rpc)
        if at is None:
            self.lost += 1
            return
        self.heap.push(at, self.RPC, dst, (src, self.incarnation[dst]), out)

    def _deliver_rpc(self, dst: int, meta: tuple[int, int], out: SendRpc) -> None:
        src, inc = meta
        if not self.up[dst] or self.incarnation[dst] != inc:
            if self.late_unreachable:
                self._unreachable_later(src, self.peer_ids[dst])
            return
        if self.lose_from_down_senders and not self.up[src]:
            return
        rpc = self._decode(out.data) if self.wire else out.rpc
        self._nodes[dst].receive_rpc(self.heap.now, self.peer_ids[src], rpc, size=len(out.data))
        self._drain(dst)

    @staticmethod
    def _decode(data: bytes) -> Rpc:
        rpcs = FrameDecoder().feed(data)
        if len(rpcs) != 1:
            raise DriverError(f"a SendRpc frame held {len(rpcs)} RPCs")
        return rpcs[0]

    def _unreachable_later(self, src: int, peer: str) -> None:
        after = self.unreachable_after
        if after is None:
            return
        if self.coalesce_unreachable:  # (and a sender that is down is not told)
            if not self.up[src] or (src, peer) in self._pending_unreachable:
                return
            self._pending_unreachable.add((src, peer))
        self.heap.push(self.heap.now + after, self.UNREACHABLE, src, self.incarnation[src], peer)

    def _unreachable(self, src: int, inc: int, peer: str) -> None:
        self._pending_unreachable.discard((src, peer))
        if not self.up[src] or self.incarnation[src] != inc:
            return
        self._nodes[src].peer_unreachable(self.heap.now, peer)
        self._drain(src)

    def on_sign_request(self, i: int, out: SignRequest) -> None:
        """Sign at once, as Kubo ``key/sign`` would (docs/security.md "Signatures")."""
        key = self.signers[self.peer_ids[i]]
        self._nodes[i].signed(self.heap.now, out.request_id, key.sign(out.data))

    # -- blocks -----------------------------------------------------------------------

    def holds(self, i: int, cid: CID) -> bool:
        """Whether node ``i``'s block store has ``cid``."""
        bits = self.holders.get(cid)
        return bits is not None and bool(bits[i >> 3] >> (i & 7) & 1)

    def on_store_block(self, i: int, out: StoreBlock) -> None:
        cid = out.cid
        bits = self.holders.get(cid)
        if bits is None:
            self.blocks[cid] = out.data
            bits = self.holders[cid] = bytearray(self._nbytes)
        bits[i >> 3] |= 1 << (i & 7)

    def _available(self, cid: CID) -> bool:
        """Hook: whether some node that is up holds ``cid``."""
        bits = self.holders.get(cid)
        if bits is None:
            return False
        up = self.up
        for byte_index, byte in enumerate(bits):
            if byte:
                base = byte_index << 3
                for bit in range(8):
                    if byte >> bit & 1 and up[base + bit]:
                        return True
        return False

    def _fetch_delay(self, i: int, cid: CID) -> float:
        """Hook: how long node ``i``'s fetch of ``cid`` takes: nothing from its own
        store, else four link delays (a provider lookup, then a bitswap exchange)."""
        if self.holds(i, cid):
            return 0.0
        delay = self.links.delay
        return delay() + delay() + delay() + delay()

    def on_fetch_block(self, i: int, out: FetchBlock) -> None:
        cid = out.cid
        self.fetches += 1
        inc = self.incarnation[i]
        if self.coalesce_fetches:
            key = (i, inc, cid)
            if key in self._pending_fetch:
                return
            self._pending_fetch.add(key)
        self.heap.push(self.heap.now + self._fetch_delay(i, cid), self.FETCH, i, inc, (cid, False))

    def _finish_fetch(self, i: int, inc: int, what: tuple[CID, bool]) -> None:
        cid, final = what
        if not self.up[i] or self.incarnation[i] != inc:
            self._pending_fetch.discard((i, inc, cid))
            return
        data: bytes | None
        if self.holds(i, cid) or self._available(cid):
            data = self.blocks[cid]
        elif not final and self.fetch_timeout is not None:
            self.heap.push(self.heap.now + self.fetch_timeout, self.FETCH, i, inc, (cid, True))
            return
        else:
            data = None
        self._pending_fetch.discard((i, inc, cid))
        self._nodes[i].block_fetched(self.heap.now, cid, data)
        self._drain(i)

    # -- faults -----------------------------------------------------------------------

    def take_down(self, i: int, *, keep_state: bool) -> None:
        """Node ``i`` stops: it gets nothing and its timers do not fire. With
        ``keep_state`` it keeps its node object for :meth:`bring_up`; else the object
        is dropped and the next one is a new incarnation."""
        self.up[i] = False
        self.armed[i] = None
        self.timer_version[i] += 1
        if not keep_state:
            self._nodes[i] = None
            self.incarnation[i] += 1

    def bring_up(self, i: int) -> None:
        """Node ``i`` runs again with the node object it kept (its timer re-armed); a
        new incarnation instead gets a new object in ``_nodes[i]`` and is drained."""
        self.up[i] = True
        self.armed[i] = None
        self._drain(i)
