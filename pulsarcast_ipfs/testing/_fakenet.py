"""An in-process p2p network for a real :class:`sidecar.Driver` (no sockets, no daemon).

:class:`FakeTransport` is a ``Transport`` whose outgoing frames go to :class:`FakePeers`,
which plays the other peers (their cores answer, or a scripted parent feeds events);
:func:`running` runs a driver in a task group and stops it as on SIGTERM. The driver
benchmark and the sidecar API tests use them with :class:`FakeKubo`.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Sequence
from typing import Any

import anyio
import anyio.abc

from pulsarcast_ipfs.core import (
    Deliver,
    DisconnectPeer,
    Ed25519Signer,
    Event,
    EventDescriptor,
    FetchBlock,
    FrameDecoder,
    NodeConfig,
    OperationDone,
    OutputDispatch,
    Pending,
    Ping,
    PulsarcastNode,
    ReleaseBlocks,
    SendRpc,
    SignRequest,
    StoreBlock,
    TopicUpdated,
    cid_str,
    encode_frame,
)
from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.records import MetricRecord
from pulsarcast_ipfs.testing._fakekubo import FakeKubo
from sidecar import Driver
from sidecar._transport import Transport, _Incoming

__all__ = ["FakePeers", "FakeTransport", "running"]


class FakeTransport(Transport):
    """:class:`Transport` without Kubo's ``p2p`` streams.

    Outgoing frames are counted and handed to :class:`FakePeers`. Incoming ones
    (:meth:`feed`) go through the real incoming connection (``_Incoming``: the
    ``report-peer-id`` line, the ban check, ``FrameDecoder`` and ``on_rpc``), one per
    sending peer, one frame per read.
    """

    def __init__(self, *, peers: FakePeers, **kwargs: Any) -> None:
        super().__init__(**{**kwargs, "port": 1})  # nothing is bound
        self.fake_peers = peers
        self.bytes_out = 0
        self._incoming: dict[str, _Incoming] = {}
        peers.transport = self

    async def claim(self) -> None:
        pass  # no p2p listener in the fake Kubo to look at

    async def run(
        self,
        tg: anyio.abc.TaskGroup,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        self._tg = tg
        task_status.started()

    async def close(self) -> None:
        self._closing = True
        self._incoming.clear()

    def send(self, peer: str, data: bytes) -> None:
        if self._closing or self._tg is None:
            return
        if self._banned and self.is_banned(peer):
            return
        self.frames_out += 1
        self.bytes_out += len(data)
        self.fake_peers.receive(peer, data)

    def connect(self, peer: str) -> bool:
        return False  # no connections to open: frames go straight to the fake peers

    def feed(self, peer: str, data: bytes) -> None:
        """``data`` arrives from ``peer`` on its incoming connection (opened on first use),
        taken in a later callback of the event loop as a socket read is; lost, as on a
        network, once the node has closed its connections (stopping)."""
        if self._closing:
            return
        conn = self._incoming.get(peer)
        if conn is None:
            conn = self._incoming[peer] = _Incoming(self)
            conn.feed(peer.encode("ascii") + b"\n")
        asyncio.get_running_loop().call_soon(self._read, peer, conn, data)

    def _read(self, peer: str, conn: _Incoming, data: bytes) -> None:
        if not self._closing and self._incoming.get(peer) is conn and not conn.feed(data):
            del self._incoming[peer]  # the node closed this connection


class FakePeers:
    """The node's neighbours: real protocol cores (the author) and scripted peers
    (children) that only keep what they are sent. ``cpu``: the process CPU spent here."""

    def __init__(self, node_id: str, kubo: FakeKubo) -> None:
        self.node_id = node_id
        self.kubo = kubo
        self.transport: FakeTransport | None = None
        self.cores: dict[str, tuple[PulsarcastNode, Ed25519Signer]] = {}
        self._decoders: dict[str, FrameDecoder] = {}
        self.frames: defaultdict[str, list[bytes]] = defaultdict(list)
        """Every frame the node sent, per peer."""
        self.cpu = 0.0
        self._done: list[OperationDone] = []
        self._dispatch: OutputDispatch[str] = OutputDispatch(
            self,
            ignore=(
                ReleaseBlocks,
                FetchBlock,
                Deliver,
                TopicUpdated,
                DisconnectPeer,
                MetricRecord,
            ),
        )

    def add_core(self, signer: Ed25519Signer, *, seed: int) -> PulsarcastNode:
        node = PulsarcastNode(
            peer_id=signer.peer_id,
            config=NodeConfig(require_signatures=True),
            rng=random.Random(seed),
            now=time.time(),
        )
        self.cores[signer.peer_id] = (node, signer)
        self._decoders[signer.peer_id] = FrameDecoder()
        return node

    def create_topic(self, author: str, name: str) -> CID:
        """``author``'s core creates a topic (signed); its blocks go to the fake Kubo."""
        node, _ = self.cores[author]
        pending = node.create_topic(time.time(), name)
        assert isinstance(pending, Pending)
        for out in self.carry_out(author):
            if out.op == pending.op:
                assert isinstance(out.result, CID), out.error
                return out.result
        raise AssertionError("create_topic did not finish")

    def receive(self, peer: str, data: bytes) -> None:
        """A frame the node sent to ``peer`` (from :meth:`FakeTransport.send`)."""
        t0 = time.process_time()
        self.frames[peer].append(data)
        core = self.cores.get(peer)
        if core is not None:
            for rpc in self._decoders[peer].feed(data):
                core[0].receive_rpc(time.time(), self.node_id, rpc, size=len(data))
            self.carry_out(peer)
        self.cpu += time.process_time() - t0

    def carry_out(self, peer: str) -> list[OperationDone]:
        """Carry out the outputs of ``peer``'s core: RPCs to the node, signatures,
        blocks (into the fake Kubo, where the node can fetch them)."""
        node, _ = self.cores[peer]
        self._done = []
        outs = node.take_outputs()
        while outs:
            self._dispatch(peer, outs)
            outs = node.take_outputs()
        return self._done

    # the outputs of a peer's core (core.OutputDispatch; the others are not needed)

    def on_send_rpc(self, peer: str, out: SendRpc) -> None:
        if out.peer == self.node_id:
            self.send_to_node(peer, out.data)

    def on_sign_request(self, peer: str, out: SignRequest) -> None:
        node, signer = self.cores[peer]
        node.signed(time.time(), out.request_id, signer.sign(out.data))

    def on_store_block(self, peer: str, out: StoreBlock) -> None:
        self.kubo.blocks[cid_str(out.cid)] = out.data

    def on_operation_done(self, peer: str, out: OperationDone) -> None:
        self._done.append(out)

    def send_to_node(self, sender: str, data: bytes) -> None:
        assert self.transport is not None
        self.transport.feed(sender, data)

    async def keep_alive(self, children: Sequence[str], interval: float) -> None:
        """Children PING their parent every ``interval`` (§6), as real ones do."""
        nonce = 0
        while True:
            t0 = time.process_time()
            for child in children:
                nonce += 1
                self.send_to_node(child, encode_frame(Ping(nonce=nonce)))
            self.cpu += time.process_time() - t0
            await anyio.sleep(interval)

    def events_to(self, peer: str, topic: CID) -> Counter[str]:
        """How many times each event of ``topic`` was sent to ``peer``."""
        got: Counter[str] = Counter()
        for rpc in FrameDecoder().feed(b"".join(self.frames.get(peer, ()))):
            if isinstance(rpc, Event) and rpc.topic == topic:
                got[cid_str(EventDescriptor.decode(rpc.event).cid)] += 1
        return got


@contextlib.asynccontextmanager
async def running(driver: Driver) -> AsyncIterator[anyio.abc.TaskGroup]:
    """Run ``driver`` (no services) in a task group, yielded for helpers of the
    caller's; on leaving, stop it gracefully (as on SIGTERM), wait at most 15 s for
    it, then cancel what is left."""
    stopped = anyio.Event()

    async def run_driver(*, task_status: anyio.abc.TaskStatus[None]) -> None:
        try:
            await driver.run(task_status=task_status)
        finally:
            stopped.set()

    async with anyio.create_task_group() as tg:
        await tg.start(run_driver)
        try:
            yield tg
        finally:
            driver.stop()
            with anyio.move_on_after(15):
                await stopped.wait()
            tg.cancel_scope.cancel()
