"""Tree RPCs over Kubo stream mounting (docs/protocol.md §6).

Incoming: ``p2p listen /x/pulsarcast/2.12.0 /ip4/127.0.0.1/tcp/<port>`` with
``report-peer-id``; every TCP connection Kubo makes to our port starts with the
authenticated sender's peer ID and a newline, then length-prefixed dag-cbor frames
(:class:`~pulsarcast_ipfs.core.FrameDecoder`). A frame that does not decode closes
that connection (``RemoteProtocolError``).

Outgoing: one long-lived connection per neighbour, through a ``p2p forward`` of a
free local port to ``/p2p/<peer>``, fed from a send queue. p2p streams have no
half-close and Kubo accepts our TCP connection before it knows whether the libp2p
stream can be opened, so frames written on a connection that dies young are sent
again on the next one (the core is idempotent for repeated frames: events are
de-duplicated by CID). A connection is retried a bounded number of times with
exponential backoff; then the driver is told (``node.peer_unreachable``).

One sidecar per Kubo (:mod:`._preflight`): before it changes anything in Kubo,
:meth:`Transport.claim` refuses to start when a live sidecar already holds the
protocol's listener, and takes over a stale one (its target does not answer).

Kubo restarts: listeners and forwards live in the Kubo daemon, so a
restarted daemon has none. A watchdog reads ``p2p/ls`` every ``watch_interval``
and registers the listener again when it is missing, or when it points to a
target where nothing answers; a listener that another live process holds is left
to it, with one warning per target. ``kubo_up`` tells whether Kubo answered last
time. A forward whose local port refuses connections is
re-created on the next attempt, and attempts that fail because Kubo itself is
down do not count against the neighbour (it is not the neighbour's fault).
"""

from __future__ import annotations

import asyncio
import logging
import math
import socket
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

import anyio
import anyio.abc

from pulsarcast_ipfs.core import FrameDecoder, RemoteProtocolError, Rpc
from pulsarcast_ipfs.kademlia import InvalidPeerId, validate_peer_id
from pulsarcast_ipfs.kubo import KuboClient, KuboError, KuboUnavailable

from ._preflight import Listener, claim_protocol, find_listener

__all__ = ["PROTOCOL", "Transport"]

PROTOCOL = "/x/pulsarcast/2.12.0"
_YOUNG = 1.0
"""A connection that breaks within this many seconds re-sends what it carried."""
_WRITE_MAX = 256 * 1024
"""Most bytes of queued frames joined into one socket write (one frame may be larger)."""
_MAX_BACKOFF = 5.0
_MAX_PEER_LINE = 256
"""Longest peer-ID line (``report-peer-id``) accepted before the frames."""

log = logging.getLogger("pulsarcast.sidecar.transport")


_HANDED_OUT: deque[int] = deque(maxlen=4096)


def free_port() -> int:
    """A free loopback port for Kubo to listen on, not handed out recently.

    The port is free when chosen but only bound later (by Kubo's ``p2p forward``);
    the kernel readily returns the same port to the next probe, so two forwards
    set up at once would otherwise be given one port and the second would fail.
    """
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port: int = s.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.append(port)
            return port


@dataclass(slots=True, kw_only=True, eq=False)
class _Conn:
    peer: str
    queue: deque[bytes] = field(default_factory=deque)
    """Frames not yet handed to a socket (no connection yet, or written this turn)."""
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when the live connection is lost, or when this one is closed."""
    port: int | None = None
    closed: bool = False
    live: asyncio.Transport | None = None
    """The open connection, while there is one."""
    paused: bool = False
    """The socket took less than the last write (its kernel buffer is full): frames wait."""
    dirty: bool = False
    """Queued for this turn's flush."""
    recent: deque[tuple[float, bytes]] = field(default_factory=deque)
    """Frames written on the live connection in the last :data:`_YOUNG` seconds."""


class _Outgoing(asyncio.Protocol):
    """One outgoing connection (a ``p2p forward``): written by :class:`Transport`,
    never read (the remote never writes; a read only ends when the stream is gone)."""

    def __init__(self, owner: Transport, conn: _Conn) -> None:
        self.owner = owner
        self.conn = conn

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Nothing waits in asyncio's buffer: what the kernel does not take at once
        # pauses writing, and later frames wait in the queue (as anyio's streams do).
        # A connection that breaks then loses only what was handed to the kernel.
        cast(asyncio.Transport, transport).set_write_buffer_limits(high=0)

    def pause_writing(self) -> None:
        self.conn.paused = True

    def resume_writing(self) -> None:
        self.conn.paused = False
        self.owner._write(self.conn)

    def data_received(self, data: bytes) -> None:
        pass

    def eof_received(self) -> bool:
        return False  # closes the connection: p2p streams have no half-close

    def connection_lost(self, exc: Exception | None) -> None:
        self.conn.wake.set()


class _Incoming(asyncio.Protocol):
    """One incoming connection from Kubo's ``p2p listen``: the ``report-peer-id`` line,
    then length-prefixed frames, each handed to ``on_rpc`` as it completes (with its
    size on the wire, for the ``rpc_received`` record: not encoded again to count it)."""

    def __init__(self, owner: Transport) -> None:
        self.owner = owner
        self.transport: asyncio.BaseTransport | None = None
        self.peer: str | None = None
        self._head = b""
        self._decoder = FrameDecoder(max_frame_size=owner.max_frame_size)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.owner._incoming_conns.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.owner._incoming_conns.discard(self)

    def data_received(self, data: bytes) -> None:
        if not self.feed(data) and self.transport is not None:
            self.transport.close()

    def eof_received(self) -> bool:
        return False

    def feed(self, data: bytes) -> bool:
        """Take the bytes read; whether the connection stays open."""
        owner = self.owner
        peer = self.peer
        if peer is None:
            # Kubo writes the peer-ID line first; the sender's first frames may come
            # in the same read, so only the bytes before a newline count.
            self._head += data
            if b"\n" not in self._head[: _MAX_PEER_LINE + 1]:
                if len(self._head) > _MAX_PEER_LINE:
                    log.warning("incoming connection without a peer-ID line: closed")
                    return False
                return True
            line, data = self._head.split(b"\n", 1)
            self._head = b""
            try:
                peer = validate_peer_id(line.decode("ascii").strip())
            except (UnicodeDecodeError, InvalidPeerId):
                log.warning("incoming connection with a bad peer-ID line %r: closed", line[:80])
                return False
            if owner.is_banned(peer):
                owner.refused += 1
                log.info("connection from %s refused (disconnected for flooding)", peer)
                return False
            self.peer = peer
            owner.incoming += 1
        elif owner._banned and owner.is_banned(peer):
            return False  # disconnected while connected: close this connection
        if not data:
            return True
        owner._last_in = time.monotonic()
        on_rpc = owner.on_rpc
        try:
            for rpc, size in self._decoder.feed_sized(data):
                owner.frames_in += 1
                on_rpc(peer, rpc, size)
        except RemoteProtocolError as exc:
            owner.bad_frames += 1
            log.warning("garbage from %s, connection closed: %s", peer, exc)
            return False
        return not (owner._banned and owner.is_banned(peer))


class Transport:
    """The p2p listener and the per-neighbour outgoing connections of one sidecar.

    It runs on anyio's asyncio backend (the sidecar's): its connections are asyncio
    protocols, so that a frame costs no task switch either way. A received frame is
    handed to ``on_rpc`` from the read callback; a sent one is written at the end of
    the event loop's turn, together with every other frame for that neighbour.
    """

    def __init__(
        self,
        *,
        kubo: KuboClient,
        port: int,
        on_rpc: Callable[[str, Rpc, int], None],
        on_unreachable: Callable[[str], None],
        max_frame_size: int,
        attempts: int = 5,
        backoff: float = 0.2,
        watch_interval: float = 1.0,
    ) -> None:
        self.kubo = kubo
        self.port = port or free_port()
        self.on_rpc = on_rpc
        self.on_unreachable = on_unreachable
        self.max_frame_size = max_frame_size
        self.attempts = attempts
        self.backoff = backoff
        self.watch_interval = watch_interval
        self.kubo_up = True
        self.relistens = 0
        self.registered = False
        """Whether this transport registered its ``p2p listen`` (then :meth:`close` closes it)."""
        self.ceded_to: str | None = None
        """The target of another live listener of the protocol that this one left alone."""
        self._conns: dict[str, _Conn] = {}
        self._incoming_conns: set[_Incoming] = set()
        self._dirty: list[_Conn] = []
        self._flush_soon = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._closing = False
        self.frames_in = 0
        self._last_in = -math.inf
        """``time.monotonic()`` of the last frame received (the listener works)."""
        self.frames_out = 0
        self.writes = 0
        """Socket writes: frames for one neighbour in one turn go out together."""
        self.bad_frames = 0
        self.incoming = 0
        self._banned: dict[str, float] = {}  # peer -> until (time.time()), flood protection
        self.refused = 0
        self.disconnects = 0

    @property
    def target(self) -> str:
        return f"/ip4/127.0.0.1/tcp/{self.port}"

    async def listen(self) -> asyncio.Server:
        """Bind :attr:`port` on loopback and accept connections (the caller closes it)."""
        self._loop = asyncio.get_running_loop()
        return await self._loop.create_server(
            lambda: _Incoming(self), host="127.0.0.1", port=self.port
        )

    async def claim(self) -> None:
        """Check, before any change to Kubo, that no live sidecar holds the protocol
        (:class:`~._preflight.ProtocolInUse`, :class:`~._preflight.KuboMisconfigured`)."""
        stale = await claim_protocol(self.kubo, PROTOCOL, own_target=self.target)
        if stale is not None:
            log.warning(
                "taking over a stale p2p listener for %s: it points to %s, where nothing "
                "answers (a sidecar that crashed?)",
                PROTOCOL,
                stale.target,
            )

    async def run(
        self, tg: anyio.abc.TaskGroup, *, task_status: anyio.abc.TaskStatus[None]
    ) -> None:
        """Bind the port, register ``p2p listen``, then accept connections until cancelled
        (after :meth:`claim`)."""
        self._tg = tg
        server = await self.listen()
        try:
            # A crashed predecessor may have left its listener (and forwards) in Kubo:
            # claim() found nothing live there.
            await self.kubo.p2p_close(protocol=PROTOCOL)
            await self.kubo.p2p_listen(PROTOCOL, self.target, report_peer_id=True)
            self.registered = True
            log.info("p2p listen %s -> %s (report-peer-id)", PROTOCOL, self.target)
            task_status.started()
            tg.start_soon(self._keep_listening, name="p2p-listen-watchdog")
            await anyio.sleep_forever()
        finally:
            server.close()
            for conn in list(self._incoming_conns):
                if conn.transport is not None:
                    conn.transport.close()

    async def _keep_listening(self) -> None:
        """Register the p2p listener again when Kubo lost it (a restarted daemon), or
        when it points to a target where nothing answers; say what was seen."""
        while not self._closing:
            await anyio.sleep(self.watch_interval)
            if time.monotonic() - self._last_in < self.watch_interval and self.kubo_up:
                continue  # a frame came in through the listener since the last look
            try:
                found = await find_listener(self.kubo, PROTOCOL)
                if not self._closing:
                    await self._check_listener(found)
            except KuboError as exc:
                if self.kubo_up:
                    log.warning("Kubo unavailable, waiting for it: %s", exc)
                self.kubo_up = False
                continue
            if not self.kubo_up:
                log.info("Kubo is back")
            self.kubo_up = True

    async def _check_listener(self, found: Listener | None) -> None:
        """One look of the watchdog at the protocol's listener in Kubo."""
        if found is not None and found.target == self.target:
            self.ceded_to = None
            return
        if found is None:
            log.warning(
                "p2p listener for %s absent from Kubo (Kubo restarted, or it was closed): "
                "registering it again -> %s",
                PROTOCOL,
                self.target,
            )
        elif found.live:
            if self.ceded_to != found.target:
                log.warning(
                    "p2p listener for %s in Kubo now points to %s, not to this sidecar's %s, "
                    "and something answers there (another sidecar?): leaving it; this "
                    "sidecar receives no tree RPCs until it is free",
                    PROTOCOL,
                    found.target,
                    self.target,
                )
                self.ceded_to = found.target
            return
        else:
            log.warning(
                "p2p listener for %s in Kubo points to %s, where nothing answers: "
                "taking it back -> %s",
                PROTOCOL,
                found.target,
                self.target,
            )
            await self.kubo.p2p_close(protocol=PROTOCOL, target_address=found.target)
        self.ceded_to = None
        await self.kubo.p2p_listen(PROTOCOL, self.target, report_peer_id=True)
        self.registered = True
        self.relistens += 1

    async def close(self) -> None:
        """Graceful shutdown: close our p2p listener and every forward ."""
        self._closing = True
        for conn in self._conns.values():
            conn.closed = True
            conn.wake.set()
        if not self.registered:
            return  # nothing of ours in Kubo (claim() refused, or never started)
        with anyio.move_on_after(5, shield=True):
            try:
                if self.ceded_to is None:
                    n = await self.kubo.p2p_close(protocol=PROTOCOL)
                else:  # another live sidecar holds the listener: close only our own
                    n = await self.kubo.p2p_close(protocol=PROTOCOL, target_address=self.target)
                    for conn in self._conns.values():
                        if conn.port is not None:
                            n += await self.kubo.p2p_close(
                                listen_address=f"/ip4/127.0.0.1/tcp/{conn.port}"
                            )
                log.info("closed %d p2p listeners/forwards", n)
            except KuboError as exc:
                log.warning("could not close p2p listeners: %s", exc)

    # outgoing ---------------------------------------------------------------------

    def is_banned(self, peer: str) -> bool:
        """Whether ``peer`` is refused (core ``DisconnectPeer``, until its cool-down ends)."""
        until = self._banned.get(peer)
        if until is None:
            return False
        if until <= time.time():
            del self._banned[peer]
            return False
        return True

    def disconnect(self, peer: str, until: float) -> None:
        """Close every connection with ``peer`` and refuse it until ``until`` (flooding)."""
        self._banned[peer] = until
        self.disconnects += 1
        self.forget(peer)

    def send(self, peer: str, data: bytes) -> None:
        """Queue one frame for ``peer`` (never blocks). It is written at the end of this
        turn of the event loop, with the others queued for ``peer`` meanwhile, or by the
        connection task once the connection is open."""
        if self._closing or self._tg is None:
            return
        if self._banned and self.is_banned(peer):
            return
        conn = self._conns.get(peer)
        if conn is None:
            conn = self._open(peer)
        conn.queue.append(data)
        if conn.live is not None and not conn.dirty:
            conn.dirty = True
            self._dirty.append(conn)
            if not self._flush_soon:
                self._flush_soon = True
                if self._loop is None:
                    self._loop = asyncio.get_running_loop()
                self._loop.call_soon(self._flush)

    def connect(self, peer: str) -> bool:
        """Open the connection to ``peer`` ahead of its first frame (never blocks);
        whether a new one was started. The first frame then finds the ``p2p forward``
        made and the libp2p stream open, as every later frame does."""
        if self._closing or self._tg is None or peer in self._conns:
            return False
        if self._banned and self.is_banned(peer):
            return False
        self._open(peer)
        return True

    def _open(self, peer: str) -> _Conn:
        assert self._tg is not None
        conn = _Conn(peer=peer)
        self._conns[peer] = conn
        self._tg.start_soon(self._run_conn, conn, name=f"conn-{peer[-8:]}")
        return conn

    def forget(self, peer: str) -> None:
        """Close the connection to ``peer`` (it was dropped from every tree)."""
        conn = self._conns.pop(peer, None)
        if conn is not None:
            conn.closed = True
            conn.wake.set()

    @property
    def neighbours(self) -> list[str]:
        return list(self._conns)

    def _flush(self) -> None:
        """Write what this turn queued, one socket write per neighbour."""
        self._flush_soon = False
        dirty, self._dirty = self._dirty, []
        for conn in dirty:
            conn.dirty = False
            self._write(conn)

    def _write(self, conn: _Conn) -> None:
        """Hand ``conn``'s queued frames to its socket (bounded writes), unless it has
        no connection or its socket is full (then :meth:`_Outgoing.resume_writing`)."""
        live, queue = conn.live, conn.queue
        if live is None or not queue:
            return
        t = time.monotonic()
        recent = conn.recent
        while queue and not conn.paused and not live.is_closing():
            # Every frame queued since the last write goes in one write (bounded):
            # one syscall and one read by Kubo, not one each.
            if len(queue) == 1:
                data = queue.popleft()
                recent.append((t, data))
                n = 1
            else:
                n, size, batch = 0, 0, []
                while queue and (not n or size + len(queue[0]) <= _WRITE_MAX):
                    frame = queue.popleft()
                    batch.append(frame)
                    recent.append((t, frame))
                    n, size = n + 1, size + len(frame)
                data = b"".join(batch)
            live.write(data)
            self.frames_out += n
            self.writes += 1
        while recent and recent[0][0] < t - _YOUNG:
            recent.popleft()

    async def _run_conn(self, conn: _Conn) -> None:
        failures = 0
        try:
            while not conn.closed:
                try:
                    lived = await self._connect_and_send(conn)
                except OSError as exc:
                    lived, why = 0.0, str(exc) or type(exc).__name__
                except KuboUnavailable as exc:
                    # Kubo itself is down (restarting): wait for it, not the neighbour's fault.
                    log.debug("Kubo unavailable for the forward to %s: %s", conn.peer, exc)
                    await anyio.sleep(min(self.watch_interval, 1.0))
                    continue
                except KuboError as exc:
                    lived, why = 0.0, f"p2p forward: {exc}"
                else:
                    why = "connection closed by the remote"
                if self._gone(conn):
                    break
                failures = 1 if lived > _YOUNG else failures + 1
                if failures >= self.attempts:
                    log.warning("%s unreachable after %d attempts (%s)", conn.peer, failures, why)
                    break
                delay = min(self.backoff * 2 ** (failures - 1), _MAX_BACKOFF)
                log.debug("connection to %s failed (%s); retry in %.1fs", conn.peer, why, delay)
                await anyio.sleep(delay)
        finally:
            if self._conns.get(conn.peer) is conn:
                del self._conns[conn.peer]
            if conn.port is not None:
                with anyio.move_on_after(5, shield=True):
                    try:
                        await self.kubo.p2p_close(listen_address=f"/ip4/127.0.0.1/tcp/{conn.port}")
                    except KuboError:
                        pass
            if not conn.closed and not self._closing:
                self.on_unreachable(conn.peer)

    @staticmethod
    def _gone(conn: _Conn) -> bool:
        return conn.closed  # (a call: mypy would take it for the loop's test, still False)

    async def _connect_and_send(self, conn: _Conn) -> float:
        """One connection's life; returns how long it lived (seconds)."""
        if conn.port is None:
            port = free_port()
            await self.kubo.p2p_forward(PROTOCOL, f"/ip4/127.0.0.1/tcp/{port}", conn.peer)
            conn.port = port
        loop = asyncio.get_running_loop()
        # Cleared before connecting: the new connection's loss (or a close by us)
        # may come before this task runs again.
        conn.wake.clear()
        conn.paused = False
        try:
            live, _ = await loop.create_connection(
                lambda: _Outgoing(self, conn), host="127.0.0.1", port=conn.port
            )
        except OSError:
            # Nobody listens on the forward's port: Kubo lost it (restart). Re-create
            # the forward on the next attempt.
            old, conn.port = conn.port, None
            with anyio.move_on_after(5):
                try:
                    await self.kubo.p2p_close(listen_address=f"/ip4/127.0.0.1/tcp/{old}")
                except KuboError:
                    pass
            raise
        began = time.monotonic()
        conn.recent.clear()
        if conn.closed:
            live.close()
            return 0.0
        conn.live = live
        try:
            self._write(conn)  # what was queued while connecting
            await conn.wake.wait()  # the connection is lost, or closed by us
        finally:
            conn.live = None
            live.close()
        lived = time.monotonic() - began
        # What may not have made it through a dying stream goes again (idempotent).
        cutoff = time.monotonic() - _YOUNG
        again = [d for t, d in conn.recent if t >= cutoff or lived <= _YOUNG]
        conn.recent.clear()
        conn.queue.extendleft(reversed(again))
        return lived
