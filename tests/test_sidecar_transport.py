"""The sidecar's p2p transport without Kubo: outgoing frames over real loopback TCP.

Kubo's part of a ``p2p forward`` is played by a TCP server of the test, which the fake
``p2p/forward`` answer starts on the port the transport chose; what it reads is
decoded as the remote sidecar would (after Kubo's ``report-peer-id`` line, which the
sender never writes). The real cluster tests (``tests/test_e2e_sidecar.py``) run the
same code through Kubo.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import parse_qsl, urlparse

import anyio
import anyio.lowlevel
import httpx
import pytest

from pulsarcast_ipfs.core import CID, FrameDecoder, Join, Ping, Rpc, encode_frame
from pulsarcast_ipfs.core.testing import make_peer_ids
from pulsarcast_ipfs.kubo import KuboClient, KuboConfig
from sidecar._transport import Transport

pytestmark = pytest.mark.anyio

PEER = make_peer_ids(1)[0]


class Remote:
    """The far end of every forward: records each connection's frames (decoded), and
    closes a connection after ``close_after`` frames when told to."""

    def __init__(self) -> None:
        self.connections: list[list[int]] = []
        self.reads: list[int] = []
        """Bytes of each read, in order (one write of the sender is one read here
        when the reader keeps up)."""
        self.close_after: int | None = None
        self.pause_first = 0.0
        self.forwards = 0
        self.got = anyio.Event()
        self.connected = anyio.Event()
        self.want = 0
        self._servers: list[asyncio.Server] = []

    async def start(self, port: int) -> None:
        self.forwards += 1
        self._servers.append(await asyncio.start_server(self._serve, "127.0.0.1", port))

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonces: list[int] = []
        self.connections.append(nonces)
        self.connected.set()
        decoder = FrameDecoder()
        if self.pause_first:
            await asyncio.sleep(self.pause_first)  # the sender's socket fills meanwhile
        try:
            while data := await reader.read(1 << 16):
                self.reads.append(len(data))
                for rpc in decoder.feed(data):
                    nonces.append(number(rpc))
                    if self.close_after is not None and len(nonces) >= self.close_after:
                        self.close_after = None
                        writer.close()
                        return
                if sum(len(c) for c in self.connections) >= self.want:
                    self.got.set()
        finally:
            writer.close()

    def close(self) -> None:
        for server in self._servers:
            server.close()


@asynccontextmanager
async def transport_to(remote: Remote) -> AsyncIterator[Transport]:
    async def kubo(request: httpx.Request) -> httpx.Response:
        endpoint = urlparse(str(request.url)).path.removeprefix("/api/v0/")
        args = [v for k, v in parse_qsl(urlparse(str(request.url)).query) if k == "arg"]
        if endpoint == "p2p/forward":
            await remote.start(int(args[1].rsplit("/", 1)[1]))
            return httpx.Response(200, text="")
        if endpoint == "p2p/close":
            return httpx.Response(200, json={"Count": 1})
        return httpx.Response(500, json={"Message": f"unexpected {endpoint}", "Type": "error"})

    async with (
        KuboClient(config=KuboConfig(), transport=httpx.MockTransport(kubo)) as client,
        anyio.create_task_group() as tg,
    ):
        transport = Transport(
            kubo=client,
            port=0,
            on_rpc=lambda p, r, n: None,
            on_unreachable=lambda p: None,
            max_frame_size=1 << 20,
            backoff=0.05,
        )
        transport._tg = tg
        transport._loop = asyncio.get_running_loop()
        try:
            yield transport
        finally:
            await transport.close()
            remote.close()
            tg.cancel_scope.cancel()


TOPIC = CID.dag_cbor_sha256(bytes(32))


def frame(i: int, size: int = 0) -> bytes:
    """Frame number ``i``: a PING, or a JOIN carrying ``size`` bytes."""
    if not size:
        return encode_frame(Ping(nonce=i))
    return encode_frame(Join(topic=TOPIC, descriptor=i.to_bytes(4, "big") + bytes(size)))


def number(rpc: Rpc) -> int:
    if isinstance(rpc, Join):
        return int.from_bytes(rpc.descriptor[:4], "big")
    assert isinstance(rpc, Ping)
    return rpc.nonce


async def test_frames_arrive_in_order_and_one_turns_frames_go_in_one_write() -> None:
    remote = Remote()
    async with transport_to(remote) as t:
        remote.want = 10
        for i in range(10):  # before the connection exists: queued
            t.send(PEER, frame(i))
        with anyio.fail_after(10):
            await remote.got.wait()
        assert t.writes == 1  # the queue went out in one write
        remote.want, remote.got = 60, anyio.Event()
        for turn in range(5):  # connected: each turn's frames in one write
            for i in range(10):
                t.send(PEER, frame(10 + 10 * turn + i))
            await anyio.sleep(0.05)
        with anyio.fail_after(10):
            await remote.got.wait()
        assert remote.connections == [list(range(60))]
        assert t.frames_out == 60 and t.writes == 6
        assert remote.forwards == 1


async def test_frames_written_on_a_connection_that_dies_young_are_sent_again() -> None:
    """The remote closes after 5 frames of 20: the transport reconnects and sends
    again everything of the last second; none is lost, the order is kept."""
    remote = Remote()
    remote.close_after = 5
    async with transport_to(remote) as t:
        remote.want = 5 + 20
        for i in range(20):
            t.send(PEER, frame(i))
            await anyio.sleep(0.005)
        with anyio.fail_after(10):
            await remote.got.wait()
        first, second = remote.connections
        assert first == list(range(5))
        assert second[-15:] == list(range(5, 20)) and sorted(set(second)) == list(range(20))


async def test_a_full_socket_holds_frames_in_the_queue_until_it_drains() -> None:
    """A remote that does not read for a while: 16 MB of frames fill the kernel's
    buffers, writing pauses, frames wait in the queue, then go in order."""
    remote = Remote()
    remote.pause_first = 0.5
    count = 256
    async with transport_to(remote) as t:
        remote.want = count
        t.send(PEER, frame(0, 1 << 16))
        with anyio.fail_after(10):
            await remote.connected.wait()
        paused = False
        for i in range(1, count):
            t.send(PEER, frame(i, 1 << 16))
            await anyio.lowlevel.checkpoint()
            paused = paused or t._conns[PEER].paused
        assert paused, "the socket never filled: the test proves nothing"
        with anyio.fail_after(20):
            await remote.got.wait()
        assert remote.connections == [list(range(count))]


async def test_received_frames_reach_on_rpc_and_garbage_closes_the_connection() -> None:
    got: list[tuple[str, Rpc]] = []
    async with KuboClient(config=KuboConfig()) as kubo:
        t = Transport(
            kubo=kubo,
            port=0,
            on_rpc=lambda p, r, n: got.append((p, r)),
            on_unreachable=lambda p: None,
            max_frame_size=1 << 20,
        )
        server = await t.listen()
        try:
            async with await anyio.connect_tcp("127.0.0.1", t.port) as s:
                await s.send(PEER.encode() + b"\n" + frame(1))
                await s.send(frame(2)[:3])  # a frame split over two reads
                await anyio.sleep(0.05)
                await s.send(frame(2)[3:])
                await anyio.sleep(0.05)
                await s.send(b"\xff" * 40)  # then garbage
                with anyio.fail_after(10):
                    with pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError)):
                        while True:
                            await s.receive()
        finally:
            server.close()
    assert [(p, getattr(r, "nonce", None)) for p, r in got] == [(PEER, 1), (PEER, 2)]
    assert t.bad_frames == 1 and t.frames_in == 2 and t.incoming == 1
