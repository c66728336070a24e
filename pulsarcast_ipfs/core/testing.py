"""An in-memory network of protocol nodes for tests (like ``trio.testing``).

:class:`CoreNet` drives :class:`~pulsarcast_ipfs.core.PulsarcastNode` objects
from an event heap with a virtual clock: RPCs go through the real frame codec
(optionally), arrive after a latency and may be lost; blocks live in one shared
store (IPFS); crashed nodes get nothing and send nothing. Time only moves when
:meth:`CoreNet.run_until` is called, and every run has a hard bound on steps.

This is a test helper, not the simulator (``pulsarcast_ipfs.sim``).
"""

from __future__ import annotations

import dataclasses
import heapq
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from multiformats import CID

from pulsarcast_ipfs.kademlia import bucket_index, closest_peers, peer_id_from_bytes, peer_position
from pulsarcast_ipfs.records import MetricRecord, RecordKind

from ._codec import FrameDecoder, Rpc
from ._config import NodeConfig
from ._dispatch import OutputDispatch
from ._errors import LocalProtocolError
from ._io import (
    Deliver,
    DisconnectPeer,
    FetchBlock,
    OperationDone,
    Pending,
    ReleaseBlocks,
    SendRpc,
    SignRequest,
    StoreBlock,
    TopicUpdated,
)
from ._node import PulsarcastNode
from ._signing import Ed25519Signer

__all__ = ["CoreNet", "kademlia_table", "make_peer_ids", "make_signers"]


def make_peer_ids(count: int, *, seed: int = 0) -> list[str]:
    """``count`` distinct, valid (sha2-256 multihash) peer IDs, deterministic in ``seed``."""
    rng = random.Random(seed)
    return [peer_id_from_bytes(b"\x12\x20" + rng.randbytes(32)) for _ in range(count)]


def make_signers(count: int, *, seed: int = 0) -> list[Ed25519Signer]:
    """``count`` Ed25519 identities (``.peer_id``, ``.sign``), deterministic in ``seed``."""
    rng = random.Random(f"ed25519/{seed}")
    return [Ed25519Signer(rng.randbytes(32)) for _ in range(count)]


def kademlia_table(peer: str, others: list[str], bucket_size: int) -> list[str]:
    """A complete k-bucket routing table of ``peer``: per common-prefix length, the
    ``bucket_size`` peers of ``others`` closest to ``peer`` (as a Kubo table converges to)."""
    me = peer_position(peer)
    buckets: dict[int, list[str]] = {}
    for other in closest_peers(me, others):
        lst = buckets.setdefault(bucket_index(me, peer_position(other)), [])
        if len(lst) < bucket_size:
            lst.append(other)
    return [p for lst in buckets.values() for p in lst]


@dataclass(slots=True)
class _NodeLog:
    delivered: list[tuple[CID, CID, bool]] = field(default_factory=list)  # topic, event, rec
    updates: list[TopicUpdated] = field(default_factory=list)
    records: list[MetricRecord] = field(default_factory=list)
    sent: list[SendRpc] = field(default_factory=list)
    stored: list[StoreBlock] = field(default_factory=list)
    released: list[CID] = field(default_factory=list)


class CoreNet:
    """A deterministic in-memory network of protocol nodes."""

    def __init__(
        self,
        count: int,
        *,
        seed: int = 0,
        config: NodeConfig | None = None,
        latency: float = 0.01,
        loss: float = 0.0,
        fetch_latency: float = 0.05,
        wire: bool = True,
        known: int | None = None,
        bucket_size: int | None = None,
        start: float = 1_767_225_600.0,
        unreachable_after: float | None = 1.0,
        signatures: bool = False,
    ) -> None:
        self.rng = random.Random(seed)
        self.now = start
        self.latency = latency
        self.loss = loss
        self.fetch_latency = fetch_latency
        self.wire = wire
        self.unreachable_after = unreachable_after
        self.signers: dict[str, Ed25519Signer] = {}
        """Ed25519 identities (``signatures=True``): nodes sign with these, in place of Kubo."""
        if signatures:
            signers = make_signers(count, seed=seed)
            self.peers = [s.peer_id for s in signers]
            self.signers = {s.peer_id: s for s in signers}
            base = config if config is not None else NodeConfig()
            config = dataclasses.replace(base, require_signatures=True)
        else:
            self.peers = make_peer_ids(count, seed=seed)
        self.done: dict[str, OperationDone] = {}
        """Finished signing operations by op id."""
        self.nodes: dict[str, PulsarcastNode] = {}
        self.logs: dict[str, _NodeLog] = {}
        self.store: dict[CID, bytes] = {}
        self.crashed: set[str] = set()
        self.fetches = 0
        self.messages = 0
        self.lost = 0
        self.drop_if: Callable[[str, str, Rpc], bool] | None = None
        """Test hook: ``drop_if(sender, receiver, rpc)`` true loses that message."""
        self.extra_delay: Callable[[str, str], float] | None = None
        """Test hook: ``extra_delay(sender, receiver)`` seconds added to each message on
        that link (a slow link); such links stay first in, first out."""
        self._link_last: dict[tuple[str, str], float] = {}
        self._heap: list[tuple[float, int, str, str, Any]] = []
        self._dispatch: OutputDispatch[str] = OutputDispatch(self, ignore=(DisconnectPeer,))
        self._seq = 0
        for i, peer in enumerate(self.peers):
            self.nodes[peer] = PulsarcastNode(
                peer_id=peer, config=config, rng=random.Random(seed * 100_003 + i), now=start
            )
            self.logs[peer] = _NodeLog()
        for peer in self.peers:
            others = [p for p in self.peers if p != peer]
            if known is not None:
                others = self.rng.sample(others, min(known, len(others)))
            if bucket_size is not None:
                others = kademlia_table(peer, others, bucket_size)
            self.nodes[peer].set_known_peers(self.now, others)
            self._after(peer)

    # ------------------------------------------------------------- plumbing

    def _push(self, when: float, kind: str, peer: str, data: Any) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (when, self._seq, kind, peer, data))

    def _after(self, peer: str) -> None:
        """Carry out the outputs of ``peer`` and (re)arm its timer."""
        node = self.nodes[peer]
        outs = node.take_outputs()
        while outs:
            self._dispatch(peer, outs)
            outs = node.take_outputs()  # signatures answered at once make more
        t = node.get_timer()
        if t is not None:
            self._push(max(t, self.now), "timer", peer, t)

    # outputs (:class:`~pulsarcast_ipfs.core.OutputDispatch`; ``peer``: whose they are)

    def on_sign_request(self, peer: str, out: SignRequest) -> None:
        self.nodes[peer].signed(self.now, out.request_id, self.signers[peer].sign(out.data))

    def on_operation_done(self, peer: str, out: OperationDone) -> None:
        self.done[out.op] = out

    def on_send_rpc(self, peer: str, out: SendRpc) -> None:
        self.logs[peer].sent.append(out)
        self.messages += 1
        if out.peer in self.crashed or out.peer not in self.nodes:
            if self.unreachable_after is not None:
                self._push(self.now + self.unreachable_after, "unreachable", peer, out.peer)
            return
        if (self.loss and self.rng.random() < self.loss) or (
            self.drop_if is not None and self.drop_if(peer, out.peer, out.rpc)
        ):
            self.lost += 1
            return
        at = self.now + self.latency * (1.0 + self.rng.random())
        extra = self.extra_delay(peer, out.peer) if self.extra_delay else 0.0
        if extra:
            link = (peer, out.peer)
            at = max(at + extra, self._link_last.get(link, at))
            self._link_last[link] = at
        self._push(at, "rpc", out.peer, (peer, out.rpc, out.data))

    def on_store_block(self, peer: str, out: StoreBlock) -> None:
        self.store[out.cid] = out.data
        self.logs[peer].stored.append(out)

    def on_release_blocks(self, peer: str, out: ReleaseBlocks) -> None:
        self.logs[peer].released.extend(out.cids)

    def on_fetch_block(self, peer: str, out: FetchBlock) -> None:
        self.fetches += 1
        self._push(self.now + self.fetch_latency, "block", peer, out.cid)

    def on_deliver(self, peer: str, out: Deliver) -> None:
        self.logs[peer].delivered.append((out.topic_cid, out.event_cid, out.recovered))

    def on_topic_updated(self, peer: str, out: TopicUpdated) -> None:
        self.logs[peer].updates.append(out)

    def on_metric_record(self, peer: str, out: MetricRecord) -> None:
        self.logs[peer].records.append(out)

    def _decode(self, data: bytes) -> Rpc:
        rpcs = FrameDecoder().feed(data)
        assert len(rpcs) == 1
        return rpcs[0]

    def step(self) -> bool:
        """Process the next scheduled happening; ``False`` when there is none."""
        if not self._heap:
            return False
        when, _, kind, peer, data = heapq.heappop(self._heap)
        self.now = max(self.now, when)
        if peer in self.crashed:
            return True
        node = self.nodes[peer]
        if kind == "timer":
            t = node.get_timer()
            if t is None or t > self.now or t != data:
                return True
            node.handle_timer(self.now)
        elif kind == "rpc":
            sender, rpc, frame = data
            if sender in self.crashed:
                return True
            if self.wire:
                rpc = self._decode(frame)
            node.receive_rpc(self.now, sender, rpc, size=len(frame))
        elif kind == "block":
            node.block_fetched(self.now, data, self.store.get(data))
        elif kind == "unreachable":
            node.peer_unreachable(self.now, data)
        self._after(peer)
        return True

    def run_until(self, t: float, *, max_steps: int = 2_000_000) -> None:
        """Process everything scheduled up to virtual time ``t`` (hard bound on steps)."""
        steps = 0
        while self._heap and self._heap[0][0] <= t:
            self.step()
            steps += 1
            if steps > max_steps:
                raise RuntimeError(f"no quiescence after {max_steps} steps")
        self.now = max(self.now, t)

    def run_for(self, seconds: float, *, max_steps: int = 2_000_000) -> None:
        self.run_until(self.now + seconds, max_steps=max_steps)

    # ------------------------------------------------------------- driving

    def call(self, peer: str, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call an API command of ``peer``'s node at the current time.

        A :class:`Pending` result (signatures) is answered here at once and replaced
        by what the finished operation returned (``LocalProtocolError`` if it failed).
        """
        result = getattr(self.nodes[peer], method)(self.now, *args, **kwargs)
        self._after(peer)
        if isinstance(result, Pending):
            done = self.done.get(result.op)
            if done is None:
                raise LocalProtocolError(f"operation {result.op} did not finish")
            if done.error is not None:
                raise LocalProtocolError(done.error)
            return done.result
        return result

    def crash(self, peer: str) -> None:
        """``peer`` stops: it gets nothing and its timers do not fire."""
        self.crashed.add(peer)

    def revive(self, peer: str) -> None:
        """``peer`` comes back with the state it had (its timers fire again)."""
        self.crashed.discard(peer)
        self._after(peer)

    def inject(self, sender: str, receiver: str, rpc: Rpc) -> None:
        """Deliver ``rpc`` to ``receiver`` now, as if ``sender`` had sent it."""
        self.nodes[receiver].receive_rpc(self.now, sender, rpc)
        self._after(receiver)

    def delivered(self, peer: str, topic: CID | None = None) -> list[CID]:
        return [e for t, e, _ in self.logs[peer].delivered if topic is None or t == topic]

    def records(self, peer: str, kind: RecordKind) -> list[MetricRecord]:
        return [r for r in self.logs[peer].records if r.kind == kind]

    def all_records(self) -> list[MetricRecord]:
        return [r for log in self.logs.values() for r in log.records]
