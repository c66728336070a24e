"""An in-memory network of protocol nodes for tests (like ``trio.testing``).

:class:`CoreNet` drives :class:`~pulsarcast_ipfs.core.PulsarcastNode` objects on
the core's one in-process network driver (:class:`~pulsarcast_ipfs.core.NetDriver`,
which the simulator ``pulsarcast_ipfs.sim`` runs on too): RPCs go through the real
frame codec (optionally), arrive after a latency and may be lost; blocks live in
one shared store (IPFS, reachable whoever holds them); crashed nodes get nothing
and keep their state for :meth:`CoreNet.revive`. Time only moves when
:meth:`CoreNet.run_until` is called, and every run has a hard bound on steps.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.kademlia import bucket_index, closest_peers, peer_position
from pulsarcast_ipfs.records import MetricRecord, RecordKind

from ._codec import Rpc
from ._config import NodeConfig
from ._errors import LocalProtocolError
from ._io import (
    Deliver,
    DisconnectPeer,
    OperationDone,
    Pending,
    ReleaseBlocks,
    SendRpc,
    StoreBlock,
    TopicUpdated,
)
from ._netdriver import Links, NetDriver, make_peer_ids, make_signers
from ._node import PulsarcastNode
from ._signing import Ed25519Signer

__all__ = ["CoreNet", "kademlia_table", "make_peer_ids", "make_signers"]


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


class CoreNet(NetDriver):
    """A deterministic in-memory network of protocol nodes."""

    # the fault model of a test network (NetDriver's class attributes)
    ignored_outputs: ClassVar[tuple[type, ...]] = (DisconnectPeer,)
    coalesce_unreachable: ClassVar[bool] = False
    coalesce_fetches: ClassVar[bool] = False
    late_unreachable: ClassVar[bool] = False
    lose_from_down_senders: ClassVar[bool] = True

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
        """Loss and latency draws, and the ``known`` samples."""
        self.latency = latency
        self.fetch_latency = fetch_latency
        signers: list[Ed25519Signer] = []
        if signatures:
            signers = make_signers(count, seed=seed)
            peers = [s.peer_id for s in signers]
            base = config if config is not None else NodeConfig()
            config = dataclasses.replace(base, require_signatures=True)
        else:
            peers = make_peer_ids(count, seed=seed)
        rng = self.rng
        links = Links(
            delay=lambda: latency * (1.0 + rng.random()), loss=loss, loss_rng=rng, fifo=False
        )
        super().__init__(
            peers,
            links=links,
            start=start,
            unreachable_after=unreachable_after,
            fetch_timeout=None,
            wire=wire,
        )
        self.peers = peers
        self.signers = {s.peer_id: s for s in signers}
        """Ed25519 identities (``signatures=True``): nodes sign with these, in place of Kubo."""
        self.store = self.blocks
        """CID -> block, whoever stored it."""
        self.done: dict[str, OperationDone] = {}
        """Finished signing operations by op id."""
        self.nodes: dict[str, PulsarcastNode] = {}
        self.logs: dict[str, _NodeLog] = {}
        for i, peer in enumerate(peers):
            node = PulsarcastNode(
                peer_id=peer, config=config, rng=random.Random(seed * 100_003 + i), now=start
            )
            self._nodes[i] = self.nodes[peer] = node
            self.logs[peer] = _NodeLog()
        for i, peer in enumerate(peers):
            others = [p for p in peers if p != peer]
            if known is not None:
                others = self.rng.sample(others, min(known, len(others)))
            if bucket_size is not None:
                others = kademlia_table(peer, others, bucket_size)
            self.nodes[peer].set_known_peers(self.now, others)
            self._drain(i)

    @property
    def loss(self) -> float:
        return self.links.loss

    @property
    def drop_if(self) -> Callable[[str, str, Rpc], bool] | None:
        """Test hook: ``drop_if(sender, receiver, rpc)`` true loses that message."""
        return self.links.drop_if

    @drop_if.setter
    def drop_if(self, hook: Callable[[str, str, Rpc], bool] | None) -> None:
        self.links.drop_if = hook

    @property
    def extra_delay(self) -> Callable[[str, str], float] | None:
        """Test hook: ``extra_delay(sender, receiver)`` seconds added to each message on
        that link (a slow link); such links stay first in, first out."""
        return self.links.extra_delay

    @extra_delay.setter
    def extra_delay(self, hook: Callable[[str, str], float] | None) -> None:
        self.links.extra_delay = hook

    @property
    def crashed(self) -> set[str]:
        """The peers that are down."""
        return {p for i, p in enumerate(self.peers) if not self.up[i]}

    # ------------------------------------------------------------- the driver's hooks

    def _after(self, peer: str) -> None:
        """Carry out the outputs of ``peer`` and (re)arm its timer."""
        self._drain(self.index[peer])

    def _sent(self, src: int, out: SendRpc) -> None:
        self.logs[self.peers[src]].sent.append(out)

    def _unknown_peer(self, src: int, out: SendRpc) -> None:
        self._unreachable_later(src, out.peer)

    def _available(self, cid: CID) -> bool:
        return cid in self.blocks  # a crashed node's blocks are still provided

    def _fetch_delay(self, i: int, cid: CID) -> float:
        return self.fetch_latency

    # outputs (:class:`~pulsarcast_ipfs.core.OutputDispatch`; ``i``: whose they are)

    def on_operation_done(self, i: int, out: OperationDone) -> None:
        self.done[out.op] = out

    def on_store_block(self, i: int, out: StoreBlock) -> None:
        super().on_store_block(i, out)
        self.logs[self.peers[i]].stored.append(out)

    def on_release_blocks(self, i: int, out: ReleaseBlocks) -> None:
        self.logs[self.peers[i]].released.extend(out.cids)

    def on_deliver(self, i: int, out: Deliver) -> None:
        self.logs[self.peers[i]].delivered.append((out.topic_cid, out.event_cid, out.recovered))

    def on_topic_updated(self, i: int, out: TopicUpdated) -> None:
        self.logs[self.peers[i]].updates.append(out)

    def on_metric_record(self, i: int, out: MetricRecord) -> None:
        self.logs[self.peers[i]].records.append(out)

    # ------------------------------------------------------------- driving

    def run_until(  # type: ignore[override]
        self, t: float, *, max_steps: int = 2_000_000
    ) -> None:
        """Process everything scheduled up to virtual time ``t`` (hard bound on steps)."""
        super().run_until(t, max_steps=max_steps)
        self.heap.now = max(self.heap.now, t)

    def run_for(self, seconds: float, *, max_steps: int = 2_000_000) -> None:
        self.run_until(self.now + seconds, max_steps=max_steps)

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
        self.take_down(self.index[peer], keep_state=True)

    def revive(self, peer: str) -> None:
        """``peer`` comes back with the state it had (its timers fire again)."""
        self.bring_up(self.index[peer])

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
