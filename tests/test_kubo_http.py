"""The lean HTTP/1.1 path of the Kubo client (``kubo/_http.py``) against a real local
HTTP server that plays scripted raw answers, and the same answers through httpx.

The server is a few lines of anyio below: it reads each request (head and
``Content-Length`` body), records it, and plays the next step of its script on the
connection. The differential test runs every script through both paths and asks
for the same bytes or the same exception type; the deliberate differences (httpx
does not read trailers; garbage is ``KuboProtocolError`` here, ``KuboUnavailable``
through httpx) have tests of their own.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, urlsplit

import anyio
import httpx
import pytest
from anyio.abc import SocketAttribute, SocketStream
from hypothesis import given, settings
from hypothesis import strategies as st

from pulsarcast_ipfs.kubo import (
    KuboAPIError,
    KuboClient,
    KuboConfig,
    KuboError,
    KuboInvalidArgument,
    KuboNotFound,
    KuboProtocolError,
    KuboTimeout,
    KuboUnavailable,
    dag_cbor_cid,
)
from pulsarcast_ipfs.kubo._http import ConnectionPool, Response, ResponseParser, connect

pytestmark = pytest.mark.anyio

# A step answers one request on its connection; False closes the connection.
Step = Callable[[SocketStream], Awaitable[bool]]


@dataclass
class Server:
    port: int
    script: deque[Step]
    requests: list[bytes] = field(default_factory=list)
    connections: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def handle(self, stream: SocketStream) -> None:
        self.connections += 1
        async with stream:
            buf = b""
            while True:
                try:
                    while b"\r\n\r\n" not in buf:
                        buf += await stream.receive()
                    head, _, buf = buf.partition(b"\r\n\r\n")
                    m = re.search(rb"(?im)^content-length: *([0-9]+)", head)
                    length = int(m[1]) if m else 0
                    while len(buf) < length:
                        buf += await stream.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    return
                self.requests.append(head + b"\r\n\r\n" + buf[:length])
                buf = buf[length:]
                if not await self.script.popleft()(stream):
                    return


@asynccontextmanager
async def scripted_server(steps: Sequence[Step]) -> AsyncIterator[Server]:
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    server = Server(port=listener.extra(SocketAttribute.local_port), script=deque(steps))
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, server.handle)
        try:
            yield server
        finally:
            tg.cancel_scope.cancel()


def answer(raw: bytes, *, close: bool = False) -> Step:
    async def step(stream: SocketStream) -> bool:
        await stream.send(raw)
        return not close

    return step


def answer_then_close(raw: bytes, closed: anyio.Event) -> Step:
    """Answer, then close the connection as a server does with an idle one."""

    async def step(stream: SocketStream) -> bool:
        await stream.send(raw)
        await stream.aclose()
        closed.set()
        return False

    return step


async def hang(stream: SocketStream) -> bool:
    await anyio.sleep_forever()
    return False


def lean(server: Server, **config: float) -> KuboClient:
    kubo = KuboClient(config=KuboConfig(base_url=server.url, **config))
    assert kubo._pool is not None
    return kubo


def via_httpx(server: Server, **config: float) -> KuboClient:
    kubo = KuboClient(
        config=KuboConfig(base_url=server.url, **config), transport=httpx.AsyncHTTPTransport()
    )
    assert kubo._pool is None
    return kubo


def chunked(*chunks: bytes, trailer: bytes = b"") -> bytes:
    body = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks if c)
    return body + b"0\r\n" + trailer + b"\r\n"


OK_JSON = b'{"Version":"0.43.0"}\n'
KUBO_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nServer: kubo/0.43.0\r\n"
    b"Trailer: X-Stream-Error\r\nVary: Origin\r\nX-Chunked-Output: 1\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n"
)
NOT_FOUND = b'{"Message":"block was not found locally (offline)","Code":0,"Type":"error"}\n'


def length_answer(body: bytes, status: bytes = b"200 OK", extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 %s\r\n%sContent-Length: %d\r\n\r\n%s" % (status, extra, len(body), body)


# name, the server's steps (made afresh for each run), the outcome both paths give
CASES: list[tuple[str, Callable[[], list[Step]], bytes | type[KuboError]]] = [
    ("content-length", lambda: [answer(length_answer(OK_JSON))], OK_JSON),
    ("empty body", lambda: [answer(length_answer(b""))], b""),
    ("chunked as Kubo sends it", lambda: [answer(KUBO_HEAD + chunked(OK_JSON))], OK_JSON),
    (
        "chunked in pieces, with a chunk extension",
        lambda: [answer(KUBO_HEAD + b"3;x=y\r\nabc\r\n" + chunked(b"de", b"\n"))],
        b"abcde\n",
    ),
    (
        "Kubo's error answer",
        lambda: [answer(length_answer(NOT_FOUND, b"500 Internal Server Error"))],
        KuboNotFound,
    ),
    (
        "Kubo's error answer, chunked",
        lambda: [
            answer(
                b"HTTP/1.1 500 Internal Server Error\r\nTransfer-Encoding: chunked\r\n\r\n"
                + chunked(b'{"Message":"invalid path","Code":1,"Type":"error"}\n')
            )
        ],
        KuboInvalidArgument,
    ),
    (
        "404 page not found (plain text)",
        lambda: [answer(length_answer(b"404 page not found\n", b"404 Not Found"))],
        KuboAPIError,
    ),
    (
        "X-Stream-Error as a header field",
        lambda: [answer(length_answer(b"", extra=b"X-Stream-Error: could not find x\r\n"))],
        KuboNotFound,
    ),
    (
        "Connection: close",
        lambda: [answer(length_answer(OK_JSON, extra=b"Connection: close\r\n"), close=True)],
        OK_JSON,
    ),
    (
        "body read to the close",
        lambda: [answer(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + OK_JSON, close=True)],
        OK_JSON,
    ),
    (
        "HTTP/1.0",
        lambda: [answer(b"HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\nabc", close=True)],
        b"abc",
    ),
    (
        "an interim 100 Continue first",
        lambda: [answer(b"HTTP/1.1 100 Continue\r\n\r\n" + length_answer(OK_JSON))],
        OK_JSON,
    ),
    (
        "the server closes mid-body",
        lambda: [answer(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc", close=True)],
        KuboUnavailable,
    ),
    (
        "the server closes mid-chunk",
        lambda: [answer(KUBO_HEAD + b"10\r\nabc", close=True)],
        KuboUnavailable,
    ),
    ("the server closes without answering", lambda: [answer(b"", close=True)], KuboUnavailable),
    ("the server never answers", lambda: [hang], KuboTimeout),
]


async def _outcome(kubo: KuboClient, server: Server) -> bytes | type[KuboError]:
    async with kubo:
        try:
            return await kubo._call("x/y", [("arg", "/ip4/1.2.3.4/tcp/1 x&y"), ("n", "2")])
        except KuboError as exc:
            return type(exc)


@pytest.mark.parametrize(("name", "steps", "expected"), CASES, ids=[c[0] for c in CASES])
async def test_both_paths_give_the_same_bytes_or_error_type(
    name: str, steps: Callable[[], list[Step]], expected: bytes | type[KuboError]
) -> None:
    seen: list[bytes] = []
    for make in (lean, via_httpx):
        async with scripted_server(steps()) as server:
            assert await _outcome(make(server, timeout=0.3), server) == expected, make.__name__
        seen.append(server.requests[0])
    # The same request: the same request target (query decoded) and an empty body.
    targets = [r.split(b"\r\n", 1)[0].split(b" ") for r in seen]
    assert all(t[0] == b"POST" and t[2] == b"HTTP/1.1" for t in targets)
    urls = [urlsplit(t[1].decode()) for t in targets]
    assert {u.path for u in urls} == {"/api/v0/x/y"}
    assert parse_qsl(urls[0].query) == parse_qsl(urls[1].query)
    assert parse_qsl(urls[0].query) == [("arg", "/ip4/1.2.3.4/tcp/1 x&y"), ("n", "2")]
    assert all(r.endswith(b"\r\n\r\n") for r in seen)


async def test_both_paths_reuse_a_connection_and_survive_an_idle_close() -> None:
    for make in (lean, via_httpx):
        closed = anyio.Event()
        steps = [answer(length_answer(b"1")), answer_then_close(length_answer(b"2"), closed)]
        async with scripted_server([*steps, answer(length_answer(b"3"))]) as server:
            async with make(server) as kubo:
                assert await kubo._call("a") == b"1"
                assert await kubo._call("b") == b"2"
                assert server.connections == 1
                await closed.wait()
                assert await kubo._call("c") == b"3"  # a fresh connection
        assert server.connections == 2 and len(server.requests) == 3, make.__name__


async def test_the_request_is_one_post_with_host_length_and_multipart_body() -> None:
    async with scripted_server([answer(length_answer(b"")), answer(length_answer(b""))]) as server:
        async with lean(server) as kubo:
            await kubo._call("id")
            await kubo._call("block/put", [("pin", "false")], parts=[b"one", b"\x00two"])
    bare, put = server.requests
    port = server.port
    assert bare == f"POST /api/v0/id HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode() + (
        b"Content-Length: 0\r\n\r\n"
    )
    head, _, body = put.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /api/v0/block/put?pin=false HTTP/1.1"
    assert f"Content-Length: {len(body)}".encode() in lines
    boundary = re.search(rb"Content-Type: multipart/form-data; boundary=(\w+)", head)
    assert boundary is not None
    assert body.count(b"--" + boundary[1]) == 3 and b"\r\n\x00two\r\n" in body


async def test_a_trailer_stream_error_is_seen_here_and_not_through_httpx() -> None:
    """Kubo's ``X-Stream-Error`` trailer (as Kubo 0.43 sends it on a refused block)."""
    reason = b"produced block is over 2MiB: big blocks can't be exchanged"
    raw = KUBO_HEAD + chunked(OK_JSON, trailer=b"X-Stream-Error: " + reason + b"\r\n")
    async with scripted_server([answer(raw), answer(raw)]) as server:
        async with lean(server) as kubo:
            with pytest.raises(KuboAPIError, match="over 2MiB") as exc:
                await kubo._call("x")
            assert exc.value.status == 500
            assert await kubo._call_partial("x") == (OK_JSON, reason)
            assert kubo._pool is not None and kubo._pool.idle == 1  # still reusable
    async with scripted_server([answer(raw)]) as server, via_httpx(server) as kubo:
        assert await kubo._call("x") == OK_JSON  # httpx drops trailers


async def test_block_put_many_names_the_refused_block_and_kubos_reason() -> None:
    blocks = [b"\xa1aa\x01", b"\xa1aa\x02" * 10, b"\xa1aa\x03"]
    first = dag_cbor_cid(blocks[0])
    raw = KUBO_HEAD + chunked(
        b'{"Key":"%s","Size":4}\n' % str(first).encode(),
        trailer=b"X-Stream-Error: produced block is over 2MiB\r\n",
    )
    async with scripted_server([answer(raw)]) as server, lean(server) as kubo:
        with pytest.raises(
            KuboAPIError, match=r"stored 1 of 3 blocks and refused block 1 .*: produced block"
        ):
            await kubo.block_put_many(blocks)


@pytest.mark.parametrize(
    ("raw", "lean_error"),
    [
        (b"HTTP/1.1 OK 200\r\nContent-Length: 0\r\n\r\n", KuboProtocolError),
        (b"SSH-2.0-OpenSSH_9.6\r\n\r\n", KuboProtocolError),
        (b"HTTP/1.1 200 OK\r\nX-Big: " + b"x" * 300_000 + b"\r\n\r\n", KuboProtocolError),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 1, 2\r\n\r\nab", KuboProtocolError),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", KuboProtocolError),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", KuboProtocolError),
    ],
    ids=["status line", "not HTTP", "header section", "content-length", "chunk size", "coding"],
)
async def test_garbage_is_a_protocol_error_here_and_unavailable_through_httpx(
    raw: bytes, lean_error: type[KuboError]
) -> None:
    async with scripted_server([answer(raw, close=True)]) as server, lean(server) as kubo:
        with pytest.raises(lean_error, match="x/y: "):
            await kubo._call("x/y")
        assert kubo._pool is not None and kubo._pool.idle == 0
    async with scripted_server([answer(raw, close=True)]) as server, via_httpx(server) as kubo:
        with pytest.raises(KuboUnavailable):
            await kubo._call("x/y")


async def test_no_retry_once_an_answer_has_begun_on_a_reused_connection() -> None:
    for cut in (b"HTTP/1.1 200 OK\r\n", b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nabc"):
        steps = [answer(length_answer(b"1")), answer(cut, close=True), answer(length_answer(b"!"))]
        async with scripted_server(steps) as server, lean(server) as kubo:
            assert await kubo._call("a") == b"1"
            with pytest.raises(KuboUnavailable, match="cannot reach the Kubo daemon"):
                await kubo._call("b")
            assert server.connections == 1 and len(server.requests) == 2


async def test_a_reused_connection_closed_while_idle_is_retried_once() -> None:
    closed = anyio.Event()
    steps = [answer_then_close(length_answer(b"1"), closed), answer(length_answer(b"2"))]
    async with scripted_server(steps) as server, lean(server) as kubo:
        pool = kubo._pool
        assert pool is not None
        assert await kubo._call("a") == b"1"
        assert pool.idle == 1  # the answer allowed reuse; the server closed it after
        await closed.wait()
        assert await kubo._call("b") == b"2"
        assert pool.connections_opened == 2 and server.connections == 2
        assert len(server.requests) == 2  # "b" reached the server once


async def test_connection_close_is_honoured_and_keep_alive_reuses() -> None:
    steps = [
        answer(length_answer(b"1")),
        answer(length_answer(b"2")),
        answer(length_answer(b"3", extra=b"Connection: close\r\n"), close=True),
        answer(length_answer(b"4")),
    ]
    async with scripted_server(steps) as server, lean(server) as kubo:
        assert [await kubo._call(x) for x in "abc"] == [b"1", b"2", b"3"]
        assert kubo._pool is not None and kubo._pool.idle == 0  # not kept after "close"
        assert await kubo._call("d") == b"4"
    assert server.connections == 2


async def test_a_slow_server_times_out_as_httpx_does_and_the_connection_is_dropped() -> None:
    for make in (lean, via_httpx):
        async with scripted_server([hang, hang]) as server, make(server, timeout=0.2) as kubo:
            with pytest.raises(KuboTimeout, match=r"x: no answer in time \(ReadTimeout\)"):
                await kubo._call("x")
            assert kubo._pool is None or kubo._pool.idle == 0
            with pytest.raises(KuboTimeout):  # max_wait overrides the config's timeout
                await kubo._call("x", max_wait=0.1)


async def test_a_refused_connection_is_unavailable_as_through_httpx() -> None:
    with anyio.fail_after(5):
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
        port = listener.extra(SocketAttribute.local_port)
        await listener.aclose()
    config = KuboConfig(base_url=f"http://127.0.0.1:{port}")
    for kubo in (
        KuboClient(config=config),
        KuboClient(config=config, transport=httpx.AsyncHTTPTransport()),
    ):
        async with kubo:
            with pytest.raises(
                KuboUnavailable, match=r"id: cannot reach the Kubo daemon \(ConnectError"
            ):
                await kubo.id()


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
async def test_connect_gives_a_working_stream_and_refusal_is_an_oserror(host: str) -> None:
    """The pool's own connect (numeric hosts directly, names through anyio): bytes go
    both ways, and a closed port is an ``OSError`` (what the pool maps to
    ``ConnectError``), the socket not leaked."""

    async def echo(stream: SocketStream) -> None:
        async with stream:
            await stream.send(await stream.receive())

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, echo)
        with anyio.fail_after(5):
            async with await connect(host, port) as stream:
                await stream.send(b"ping")
                assert await stream.receive() == b"ping"
        tg.cancel_scope.cancel()
    with anyio.fail_after(5), pytest.raises(OSError):
        await connect(host, port)


async def test_idle_connections_are_bounded_and_closed_with_the_client() -> None:
    async with scripted_server([answer(length_answer(b"ok"))] * 12) as server:
        kubo = lean(server)
        pool = kubo._pool
        assert pool is not None
        async with kubo:
            async with anyio.create_task_group() as tg:
                for _ in range(12):
                    tg.start_soon(kubo._call, "x")
            assert server.connections == 12 and pool.idle == pool.max_idle == 8
        assert pool.idle == 0
        with pytest.raises(RuntimeError, match="closed"):
            await kubo._call("x")


async def test_a_cancelled_call_does_not_leave_its_connection_in_the_pool() -> None:
    async with scripted_server([hang]) as server, lean(server) as kubo:
        with anyio.move_on_after(0.1):
            await kubo._call("x")
        assert kubo._pool is not None and kubo._pool.idle == 0


def test_only_a_plain_http_host_port_base_url_takes_the_lean_path() -> None:
    assert ConnectionPool.for_base_url("http://127.0.0.1:5001") is not None
    assert ConnectionPool.for_base_url("http://127.0.0.1:5001/") is not None
    six = ConnectionPool.for_base_url("http://[::1]:5001")
    assert six is not None and six.host == "::1"
    assert b"Host: [::1]:5001\r\n" in six.request_bytes("id", (), b"", "")
    for url in (
        "https://127.0.0.1:5001",
        "http://127.0.0.1",
        "http://127.0.0.1:5001/prefix",
        "http://user:pw@127.0.0.1:5001",
        "http://127.0.0.1:99999",
    ):
        assert ConnectionPool.for_base_url(url) is None, url
        assert KuboClient(config=KuboConfig(base_url=url))._pool is None


# -- the parser alone: garbage can only ever be KuboProtocolError --------------------


def _feed(raw: bytes, sizes: Sequence[int]) -> Response | None:
    parser = ResponseParser(max_header_bytes=512, max_body_bytes=4096)
    at = 0
    for size in sizes:
        response = parser.feed(raw[at : at + size])
        at += size
        if response is not None:
            return response
    response = parser.feed(raw[at:])
    return response if response is not None else parser.feed_eof()


_RESPONSES = [
    length_answer(OK_JSON),
    KUBO_HEAD + chunked(OK_JSON, b"x" * 300, trailer=b"X-Stream-Error: boom\r\n"),
    b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
    b"HTTP/1.1 200 OK\r\n\r\nto the close",
]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(_RESPONSES), st.lists(st.integers(1, 40), max_size=60))
def test_a_response_fed_in_any_pieces_parses_as_fed_whole(raw: bytes, sizes: list[int]) -> None:
    assert _feed(raw, sizes) == _feed(raw, [])


@settings(max_examples=500, deadline=None)
@given(
    st.one_of(
        st.binary(max_size=600),
        st.builds(
            lambda r, at, junk: r[:at] + junk + r[at:],
            st.sampled_from(_RESPONSES),
            st.integers(0, 120),
            st.binary(min_size=1, max_size=8),
        ),
    ),
    st.booleans(),
)
def test_garbage_only_ever_raises_kubo_protocol_error(raw: bytes, bytewise: bool) -> None:
    try:
        _feed(raw, [1] * len(raw) if bytewise else [])
    except KuboProtocolError:
        pass


def test_parser_details() -> None:
    r = _feed(KUBO_HEAD + chunked(OK_JSON, trailer=b"X-Stream-Error: boom\r\n"), [])
    assert r is not None and r.status == 200 and r.body == OK_JSON and r.keep_alive
    assert r.stream_error == b"boom" and r.headers["trailer"] == b"X-Stream-Error"
    r = _feed(length_answer(b"ab", extra=b"X-A: 1\r\nx-a: 2\r\n") + b"extra", [])
    assert r is not None and r.headers["x-a"] == b"1, 2" and not r.keep_alive
    r = _feed(b"HTTP/1.1 200 OK\r\nConnection: keep-alive, Close\r\nContent-Length: 0\r\n\r\n", [])
    assert r is not None and not r.keep_alive
    assert _feed(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab", []) is None  # cut short
    with pytest.raises(KuboProtocolError, match="body over 4096"):
        _feed(b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n", [])
    with pytest.raises(KuboProtocolError, match="body over 4096"):
        _feed(b"HTTP/1.1 200 OK\r\n\r\n" + b"x" * 5000, [])
    with pytest.raises(KuboProtocolError, match="trailer section over 512"):
        _feed(KUBO_HEAD + b"0\r\nX: " + b"y" * 600 + b"\r\n\r\n", [])
    with pytest.raises(KuboProtocolError, match="malformed header field line"):
        _feed(b"HTTP/1.1 200 OK\r\n folded: x\r\n\r\n", [])
