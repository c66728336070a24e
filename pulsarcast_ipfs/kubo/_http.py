"""A lean HTTP/1.1 path for Kubo's one-shot RPC calls (``KuboClient._call``).

Why: py-spy on sidecars at 20 events/s put ~16 % of a sidecar's CPU in
``KuboClient._call``, ~1 ms per request, nearly all of it in httpx's request
machinery (``AsyncClient.request`` → ``send`` → httpcore's connection pool → h11),
not in the client's own code. Each of those requests is a POST to a local daemon
answered with a small body. ``benchmarks/kubo_http.py`` against one local Kubo
(500 calls, median of 5 rounds), this process's CPU per call, httpx → this path:
``block_put_many`` of 10 blocks of ~700 B 2,491 → 1,273 µs (Kubo closes the
connection after every request with a body, so each one connects afresh),
``version`` 1,007 → 216 µs.

Theory of operation:

- :class:`ResponseParser` is pure (no socket, no clock): bytes of one response go
  in, a :class:`Response` comes out once complete (RFC 9112: status line, header
  fields, then a body framed by ``Transfer-Encoding: chunked`` with its trailer
  section, by ``Content-Length``, or by the server closing the connection). Bytes
  that are not HTTP, a header section over ``max_header_bytes`` or a body over
  ``max_body_bytes`` raise :class:`KuboProtocolError` and nothing else.
- :class:`ConnectionPool` is the I/O shell: one request per connection at a time
  over ``anyio.connect_tcp``, at most ``max_idle`` idle connections kept for reuse,
  at most ``max_connections`` open (httpx's default limit). A *reused* connection
  that fails while the request is sent or before any byte of the answer came back
  was closed by the daemon while idle: the request is sent once more on a fresh
  connection. Nothing is retried once an answer has begun.
- The whole call is bounded by ``max_wait`` and connecting by ``connect_timeout``;
  failures become the errors httpx's path gives through
  :func:`~pulsarcast_ipfs.kubo._errors.map_transport_errors`
  (:func:`~pulsarcast_ipfs.kubo._errors.transport_error`: ``KuboTimeout`` and
  ``KuboUnavailable``, worded alike).

Kubo reports an error met after its answer has begun in an ``X-Stream-Error``
trailer field (``Trailer: X-Stream-Error``, then ``0\\r\\nX-Stream-Error: …``);
httpx drops trailers, this path keeps them (:attr:`Response.stream_error`).

Not handled, on purpose: TLS, proxies, redirects, content codings, ``Expect:
100-continue``, HTTP/1.0 keep-alive (an HTTP/1.0 answer closes its connection),
streamed answers (``pubsub/sub``, the streaming ``routing/findprovs`` keep httpx).
"""

from __future__ import annotations

import errno
import ipaddress
import os
import re
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import quote, urlencode, urlsplit

import anyio
import anyio.abc

from pulsarcast_ipfs.kubo._errors import KuboProtocolError, transport_error

__all__ = [
    "MAX_BODY_BYTES",
    "MAX_HEADER_BYTES",
    "ConnectionPool",
    "Response",
    "ResponseParser",
]

MAX_HEADER_BYTES = 64 * 1024
"""Bound of a response's header section, and of its trailer section (h11's is 16 KiB)."""

MAX_BODY_BYTES = 256 * 1024 * 1024
"""Bound of a response body: generous (a ``repo/gc`` of a million blocks answers
~70 MB); it only stops a runaway answer from filling the memory."""

_RECEIVE_BYTES = 65536
_MAX_CHUNK_LINE = 1024

# RFC 9112 §4: status-line = HTTP-version SP status-code SP [ reason-phrase ];
# h11 also accepts a missing SP before an empty reason.
_STATUS_LINE = re.compile(rb"HTTP/1\.([01]) ([0-9]{3})(?: [\t !-~\x80-\xff]*)?")
# RFC 9110 §5.1, §5.5: field-name = token; field-value bytes (no CR, LF, NUL).
_FIELD_NAME = re.compile(rb"[-!#$%&'*+.^_`|~0-9A-Za-z]+")
_FIELD_VALUE = re.compile(rb"[\t -~\x80-\xff]*")
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,15})[ \t]*(?:;[^\r\n]*)?")

# The parser's states.
_HEAD = 0  # status line and header fields
_LENGTH = 1  # a body of Content-Length bytes
_CHUNK_SIZE_LINE = 2  # chunked: the next chunk-size line
_CHUNK_DATA = 3  # chunked: chunk-data and its CRLF
_TRAILER = 4  # chunked: the trailer section after the last chunk
_TO_CLOSE = 5  # a body that ends when the server closes the connection
_DONE = 6


@dataclass(frozen=True, slots=True, kw_only=True)
class Response:
    """One complete HTTP response.

    ``headers`` and ``trailers`` map lower-case field names to the raw values
    (repeated fields joined with ``", "``); ``keep_alive``: the connection may carry
    another request (HTTP/1.1, no ``Connection: close``, the body framed by length
    or chunks, nothing received past its end).
    """

    status: int
    headers: Mapping[str, bytes] = field(default_factory=dict)
    trailers: Mapping[str, bytes] = field(default_factory=dict)
    body: bytes = b""
    keep_alive: bool = False

    def __post_init__(self) -> None:
        if not 100 <= self.status <= 999:
            raise ValueError(f"status must be a 3-digit code, got {self.status!r}")

    @property
    def stream_error(self) -> bytes:
        """Kubo's ``X-Stream-Error`` (trailer first, then header), ``b""`` if none."""
        return self.trailers.get("x-stream-error") or self.headers.get("x-stream-error") or b""


def _fields(block: bytes, what: str, endpoint: str) -> dict[str, bytes]:
    """The field lines of a header or trailer section (without its final CRLF CRLF)."""
    fields: dict[str, bytes] = {}
    for line in block.split(b"\r\n"):
        name, colon, value = line.partition(b":")
        if not colon or not _FIELD_NAME.fullmatch(name):
            # also obs-fold (a line starting with SP/HTAB), refused as RFC 9112 §5.2 allows
            raise KuboProtocolError(f"malformed {what} field line {line[:80]!r}", endpoint=endpoint)
        value = value.strip(b" \t")
        if not _FIELD_VALUE.fullmatch(value):
            raise KuboProtocolError(
                f"malformed {what} field value {line[:80]!r}", endpoint=endpoint
            )
        key = name.decode("ascii").lower()
        fields[key] = fields[key] + b", " + value if key in fields else value
    return fields


class ResponseParser:
    """The bytes of one HTTP/1.1 response in, a :class:`Response` out.

    :meth:`feed` returns ``None`` until the response is complete, then the
    response; :meth:`feed_eof` says the connection was closed. ``received`` counts
    the bytes fed (0: the server has not begun to answer).
    """

    def __init__(
        self,
        *,
        endpoint: str = "",
        max_header_bytes: int = MAX_HEADER_BYTES,
        max_body_bytes: int = MAX_BODY_BYTES,
    ) -> None:
        self.endpoint = endpoint
        self.received = 0
        self._max_header = max_header_bytes
        self._max_body = max_body_bytes
        self._buf = bytearray()
        self._state = _HEAD
        self._remaining = 0  # bytes of the body or of the current chunk still to come
        self._body = bytearray()
        self._status = 0
        self._headers: dict[str, bytes] = {}
        self._keep_alive = False

    def _error(self, message: str) -> KuboProtocolError:
        self._state = _DONE
        return KuboProtocolError(message, endpoint=self.endpoint)

    def feed(self, data: bytes) -> Response | None:
        """Add received bytes; the response once they complete it."""
        if self._state == _DONE:
            raise RuntimeError("the response is complete (or failed); nothing more is read")
        self.received += len(data)
        buf = self._buf
        buf += data
        while True:
            state = self._state
            if state == _HEAD:
                end = buf.find(b"\r\n\r\n")
                if end < 0 or end + 4 > self._max_header:
                    if len(buf) > self._max_header:
                        raise self._error(f"response header section over {self._max_header} bytes")
                    return None
                head = bytes(buf[:end])
                del buf[: end + 4]
                self._head(head)
            elif state == _LENGTH:
                if len(buf) < self._remaining:
                    return None
                self._body += buf[: self._remaining]
                return self._done(extra=len(buf) > self._remaining)
            elif state == _CHUNK_SIZE_LINE:
                end = buf.find(b"\r\n")
                if end < 0:
                    if len(buf) > _MAX_CHUNK_LINE:
                        raise self._error("chunk-size line too long")
                    return None
                m = _CHUNK_SIZE.fullmatch(buf, 0, end)
                if m is None:
                    raise self._error(f"malformed chunk-size line {bytes(buf[:end][:80])!r}")
                size = int(m[1], 16)
                del buf[: end + 2]
                if size == 0:
                    self._state = _TRAILER
                elif len(self._body) + size > self._max_body:
                    raise self._error(f"response body over {self._max_body} bytes")
                else:
                    self._remaining = size
                    self._state = _CHUNK_DATA
            elif state == _CHUNK_DATA:
                size = self._remaining
                if len(buf) < size + 2:
                    return None
                if buf[size : size + 2] != b"\r\n":
                    raise self._error("chunk-data not followed by CRLF")
                self._body += buf[:size]
                del buf[: size + 2]
                self._state = _CHUNK_SIZE_LINE
            elif state == _TRAILER:
                if buf[:2] == b"\r\n":
                    del buf[:2]
                    return self._done(extra=bool(buf))
                end = buf.find(b"\r\n\r\n")
                if end < 0 or end + 4 > self._max_header:
                    if len(buf) > self._max_header:
                        raise self._error(f"trailer section over {self._max_header} bytes")
                    return None
                trailers = _fields(bytes(buf[:end]), "trailer", self.endpoint)
                del buf[: end + 4]
                return self._done(extra=bool(buf), trailers=trailers)
            elif state == _TO_CLOSE:
                if len(self._body) + len(buf) > self._max_body:
                    raise self._error(f"response body over {self._max_body} bytes")
                self._body += buf
                buf.clear()
                return None
            else:
                raise RuntimeError("the response is complete (or failed); nothing more is read")

    def feed_eof(self) -> Response | None:
        """The server closed the connection: the response if that completes it (a body
        read to the close), else ``None`` (cut short; the caller says how)."""
        if self._state == _TO_CLOSE:
            return self._done(extra=False)
        self._state = _DONE
        return None

    def _head(self, head: bytes) -> None:
        """Parse a status line and header fields; choose how the body is framed."""
        status_line, _, rest = head.partition(b"\r\n")
        m = _STATUS_LINE.fullmatch(status_line)
        if m is None:
            raise self._error(f"malformed status line {status_line[:80]!r}")
        status = int(m[2])
        if status < 100:
            raise self._error(f"malformed status line {status_line[:80]!r}")
        try:
            headers = _fields(rest, "header", self.endpoint) if rest else {}
        except KuboProtocolError:
            self._state = _DONE
            raise
        if 100 <= status < 200:
            if status == 101:
                raise self._error("101 Switching Protocols to a request that asked for none")
            return  # an interim response (RFC 9110 §15.2): the final one follows
        self._status, self._headers = status, headers
        connection = [t.strip() for t in headers.get("connection", b"").lower().split(b",")]
        self._keep_alive = m[1] == b"1" and b"close" not in connection
        # RFC 9112 §6.3: how the length of a response's body is determined.
        if status in (204, 304):
            self._remaining, self._state = 0, _LENGTH
        elif "transfer-encoding" in headers:
            codings = [c.strip().lower() for c in headers["transfer-encoding"].split(b",")]
            if codings != [b"chunked"]:
                raise self._error(f"unsupported transfer coding {headers['transfer-encoding']!r}")
            self._state = _CHUNK_SIZE_LINE
        elif "content-length" in headers:
            values = {v.strip() for v in headers["content-length"].split(b",")}
            value = values.pop()
            if values or not value.isdigit() or len(value) > 19:
                raise self._error(f"malformed Content-Length {headers['content-length']!r}")
            length = int(value)
            if length > self._max_body:
                raise self._error(f"response body over {self._max_body} bytes ({length})")
            self._remaining, self._state = length, _LENGTH
        else:
            self._keep_alive = False
            self._state = _TO_CLOSE

    def _done(self, *, extra: bool, trailers: Mapping[str, bytes] | None = None) -> Response:
        self._state = _DONE
        return Response(
            status=self._status,
            headers=self._headers,
            trailers=trailers or {},
            body=bytes(self._body),
            keep_alive=self._keep_alive and not extra,
        )


class _Stale(Exception):
    """A reused connection failed before any byte of the answer: closed while idle."""


async def connect(host: str, port: int) -> anyio.abc.SocketStream:
    """A TCP connection to ``host:port``, as ``anyio.connect_tcp`` makes one.

    A numeric address (the usual ``127.0.0.1``) is connected directly: one
    non-blocking ``connect`` and a wait until the socket is writable, without the
    resolver and the happy-eyeballs task group ``anyio.connect_tcp`` starts for any
    host (~190 µs of CPU less a connection; Kubo closes the connection after a
    ``block/put`` of several blocks, so the block store opens one every few puts).
    Any other host goes through ``anyio.connect_tcp``. ``OSError`` if it fails.
    """
    try:
        family = socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    except ValueError:
        return await anyio.connect_tcp(host, port)
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        err = sock.connect_ex((host, port))
        if err == errno.EINPROGRESS:
            await anyio.wait_writable(sock)
            err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            raise OSError(err, f"connecting to {host}:{port}: {os.strerror(err)}")
        return await anyio.abc.SocketStream.from_socket(sock)
    except BaseException:
        sock.close()
        raise


class ConnectionPool:
    """Keep-alive HTTP/1.1 connections to one Kubo RPC API, for one-shot POSTs.

    :meth:`for_base_url` builds one for a plain ``http://host:port`` base URL and
    gives ``None`` for anything else (the caller keeps httpx then).
    """

    def __init__(
        self,
        *,
        host: str,
        port: int,
        max_idle: int = 8,
        max_connections: int = 100,
        max_header_bytes: int = MAX_HEADER_BYTES,
        max_body_bytes: int = MAX_BODY_BYTES,
    ) -> None:
        if not 0 < port < 65536:
            raise ValueError(f"port must be 1..65535, got {port!r}")
        if max_idle < 0 or max_connections < 1:
            raise ValueError("max_idle must be >= 0 and max_connections >= 1")
        self.host = host
        self.port = port
        self.max_idle = max_idle
        self._authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self._max_header = max_header_bytes
        self._max_body = max_body_bytes
        self._idle: list[anyio.abc.SocketStream] = []
        self._slots = anyio.Semaphore(max_connections, fast_acquire=True)
        self._closed = False
        self.connections_opened = 0

    @classmethod
    def for_base_url(cls, base_url: str, **kwargs: int) -> ConnectionPool | None:
        """A pool for ``http://host:port`` (an optional final ``/``), else ``None``."""
        try:
            url = urlsplit(base_url)
            port = url.port
        except ValueError:
            return None
        if (
            url.scheme != "http"
            or not url.hostname
            or port is None
            or url.username is not None
            or url.password is not None
            or url.path not in ("", "/")
            or url.query
            or url.fragment
        ):
            return None
        return cls(host=url.hostname, port=port, **kwargs)

    @property
    def idle(self) -> int:
        """How many idle connections are kept."""
        return len(self._idle)

    async def aclose(self) -> None:
        """Close the idle connections; the pool takes no more requests."""
        self._closed = True
        idle, self._idle = self._idle, []
        for stream in idle:
            await anyio.aclose_forcefully(stream)

    def request_bytes(
        self, endpoint: str, params: Sequence[tuple[str, str]], body: bytes, content_type: str
    ) -> bytes:
        """The bytes of ``POST /api/v0/{endpoint}?{params}`` with ``body``."""
        target = f"/api/v0/{quote(endpoint, safe='/')}"
        if params:
            target += "?" + urlencode(params)
        head = f"POST {target} HTTP/1.1\r\nHost: {self._authority}\r\n"
        head += f"Content-Length: {len(body)}\r\n"
        if content_type:
            head += f"Content-Type: {content_type}\r\n"
        return (head + "\r\n").encode("ascii") + body

    async def post(
        self,
        endpoint: str,
        params: Sequence[tuple[str, str]] = (),
        *,
        body: bytes = b"",
        content_type: str = "",
        max_wait: float,
        connect_timeout: float,
    ) -> Response:
        """POST one RPC; the complete response, whatever its status.

        Raises ``KuboTimeout`` when ``max_wait`` (the whole call) or ``connect_timeout``
        runs out, ``KuboUnavailable`` when the daemon cannot be reached or the
        connection breaks, ``KuboProtocolError`` when the answer is not HTTP.
        """
        if self._closed:
            raise RuntimeError("the connection pool is closed")
        if "\r" in content_type or "\n" in content_type:
            raise ValueError(f"bad Content-Type {content_type!r}")
        request = self.request_bytes(endpoint, params, body, content_type)
        phase = ["PoolTimeout"]  # what the deadline cut short, named as httpx names it
        with anyio.move_on_after(max_wait):
            async with self._slots:
                return await self._exchange(endpoint, request, connect_timeout, phase)
        raise transport_error(phase[0], endpoint=endpoint)

    async def _exchange(
        self, endpoint: str, request: bytes, connect_timeout: float, phase: list[str]
    ) -> Response:
        if self._idle:
            try:
                return await self._roundtrip(self._idle.pop(), endpoint, request, phase, True)
            except _Stale:
                pass  # closed by the daemon while idle: once more on a fresh connection
        phase[0] = "ConnectTimeout"
        try:
            with anyio.fail_after(connect_timeout):
                stream = await connect(self.host, self.port)
        except TimeoutError as exc:
            raise transport_error("ConnectTimeout", endpoint=endpoint) from exc
        except OSError as exc:
            raise transport_error("ConnectError", str(exc), endpoint=endpoint) from exc
        self.connections_opened += 1
        return await self._roundtrip(stream, endpoint, request, phase, False)

    async def _roundtrip(
        self,
        stream: anyio.abc.SocketStream,
        endpoint: str,
        request: bytes,
        phase: list[str],
        reused: bool,
    ) -> Response:
        """Send ``request`` on ``stream`` and read the answer; keep ``stream`` for
        reuse if the answer allows it, else close it."""
        keep = False
        try:
            phase[0] = "WriteTimeout"
            try:
                await stream.send(request)
            except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
                if reused:
                    raise _Stale from exc
                raise transport_error("WriteError", str(exc), endpoint=endpoint) from exc
            phase[0] = "ReadTimeout"
            parser = ResponseParser(
                endpoint=endpoint, max_header_bytes=self._max_header, max_body_bytes=self._max_body
            )
            while True:
                try:
                    data = await stream.receive(_RECEIVE_BYTES)
                except anyio.EndOfStream:
                    if reused and parser.received == 0:
                        raise _Stale from None
                    response = parser.feed_eof()
                    if response is not None:
                        return response
                    raise transport_error(
                        "RemoteProtocolError",
                        "peer closed connection without sending complete message body"
                        if parser.received
                        else "Server disconnected without sending a response.",
                        endpoint=endpoint,
                    ) from None
                except (OSError, anyio.BrokenResourceError) as exc:
                    if reused and parser.received == 0:
                        raise _Stale from exc
                    raise transport_error("ReadError", str(exc), endpoint=endpoint) from exc
                response = parser.feed(data)
                if response is not None:
                    keep = response.keep_alive
                    return response
        finally:
            if keep and not self._closed and len(self._idle) < self.max_idle:
                self._idle.append(stream)
            else:
                await anyio.aclose_forcefully(stream)
