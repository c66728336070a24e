"""The SDK's own logic against ``httpx.MockTransport``: requests it builds, answers it
parses, the error mapping, and the delivery stream's parsing and resume.

The SDK against a real sidecar is ``tests/test_sdk_sidecar.py``.
"""

from __future__ import annotations

import base64
import json
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import pytest

import pulsarcast_ipfs.sdk as sdk
from pulsarcast_ipfs.sdk import (
    AsyncClient,
    Client,
    ClientConfig,
    Delivery,
    EventLinking,
    PeerSet,
)

pytestmark = pytest.mark.anyio

CID_T = "bafyreitopic"
CID_E = "bafyreievent"
PEER = "12D3KooWAuthor"


def topic_json(**over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "cid": CID_T,
        "root_cid": CID_T,
        "name": "news",
        "author": PEER,
        "parent": None,
        "sub_topics": {"meta": "bafyreimeta"},
        "created": "2026-11-21T09:00:00.000000Z",
        "protocol_version": "1.0.0",
        "allowed_publishers": {"enabled": False, "peers": []},
        "request_to_publish": {"enabled": True, "peers": []},
        "event_linking": "LAST_SEEN",
    }
    doc.update(over)
    return doc


def event_json(n: int, **over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "cid": f"{CID_E}{n}",
        "topic": CID_T,
        "author": PEER,
        "publisher": PEER,
        "parents": [f"{CID_E}{n - 1}"] if n > 1 else [],
        "clock": max(n - 1, 0),
        "created": "2026-11-21T09:00:01.5Z",
        "protocol_version": "2.0.0",
        "payload": base64.b64encode(f"event {n}".encode()).decode(),
        "attributes": {"ups": n, "ratio": n / 8, "user": "u"} if n % 2 == 0 else {},
    }
    doc.update(over)
    return doc


def delivery_json(seq: int) -> dict[str, Any]:
    doc = event_json(seq)
    doc.update(
        seq=seq, topic_root=CID_T, topic_name="news", recovered=seq == 3, delivered_at=1767e6
    )
    return doc


def ndjson(*seqs: int) -> bytes:
    return b"".join(json.dumps(delivery_json(s)).encode() + b"\n" for s in seqs)


class Chunks(httpx.AsyncByteStream, httpx.SyncByteStream):
    """A response body sent in the given chunks, then optionally a dropped connection."""

    def __init__(self, chunks: list[bytes], *, drop: bool) -> None:
        self.chunks = chunks
        self.drop = drop

    def __iter__(self) -> Iterator[bytes]:
        yield from self.chunks
        if self.drop:
            raise httpx.ReadError("connection reset by peer")

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk
        if self.drop:
            raise httpx.ReadError("connection reset by peer")


Handler = Callable[[httpx.Request], httpx.Response]


def config(**over: Any) -> ClientConfig:
    return ClientConfig(api="http://sidecar.test:5050", reconnect_delay=0.0, **over)


def aclient(handler: Handler, **over: Any) -> AsyncClient:
    return AsyncClient(config=config(**over), transport=httpx.MockTransport(handler))


def sclient(handler: Handler, **over: Any) -> Client:
    return Client(config=config(**over), transport=httpx.MockTransport(handler))


def error(status: int, code: str, message: str = "nope") -> httpx.Response:
    return httpx.Response(status, json={"error": {"code": code, "message": message}})


# -- configuration -----------------------------------------------------------------------


def test_config_normalises_the_sidecar_address_form() -> None:
    assert ClientConfig(api="127.0.0.1:5050").api == "http://127.0.0.1:5050"
    assert ClientConfig(api="http://h:1/").api == "http://h:1"
    with pytest.raises(ValueError, match="http"):
        ClientConfig(api="ftp://h:1")
    with pytest.raises(ValueError, match="timeout"):
        ClientConfig(timeout=0)
    with pytest.raises(ValueError, match="token"):
        ClientConfig(token="  ")


def test_config_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PULSARCAST_API", "10.0.0.2:6000")
    monkeypatch.setenv("PULSARCAST_API_TOKEN", "s3cret")
    cfg = ClientConfig.from_env()
    assert (cfg.api, cfg.token) == ("http://10.0.0.2:6000", "s3cret")
    assert ClientConfig.from_env(api="http://x:1").api == "http://x:1"
    monkeypatch.delenv("PULSARCAST_API")
    assert ClientConfig.from_env().api == sdk.DEFAULT_API


def test_public_names_are_exported() -> None:
    exported = set(sdk.__all__)
    public = {n for n in dir(sdk) if not n.startswith("_")} - {"annotations"}
    assert public == exported
    for name in sdk.__all__:
        assert getattr(sdk, name) is not None


# -- requests ----------------------------------------------------------------------------


async def test_requests_carry_token_and_the_contract_bodies() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        path = request.url.path
        if path == "/v1/topics":
            return httpx.Response(201, json=topic_json())
        if path.endswith("/publish"):
            return httpx.Response(
                200, json={"status": "published", "event": f"{CID_E}1", "request_id": None}
            )
        if path.endswith("/subscribe"):
            return httpx.Response(200, json={"topic": CID_T, "subscribed": True})
        raise AssertionError(path)

    async with aclient(handler, token="tok") as pc:
        topic = await pc.create_topic(
            "news",
            allowed_publishers=[PEER],
            request_to_publish=True,
            event_linking=EventLinking.CUSTOM,
        )
        assert await pc.subscribe(topic.cid) == CID_T
        out_text = await pc.publish(topic.cid, "héllo")
        await pc.publish(topic.cid, b"\x00\xff", parent=f"{CID_E}0", inject_id="i-1")
        await pc.publish(topic.cid, "a", attributes={"ups": 12, "user": "alice", "r": 0.5})
        await pc.publish(topic.cid, "b", attributes={})

    assert all(r.headers["authorization"] == "Bearer tok" for r in seen)
    assert json.loads(seen[0].content) == {
        "name": "news",
        "allowed_publishers": {"enabled": True, "peers": [PEER]},
        "request_to_publish": {"enabled": True, "peers": []},
        "event_linking": "CUSTOM",
    }
    assert seen[1].url.path == f"/v1/topics/{CID_T}/subscribe"
    assert json.loads(seen[2].content) == {"text": "héllo"}
    assert json.loads(seen[3].content) == {
        "payload": "AP8=",
        "parent": f"{CID_E}0",
        "inject_id": "i-1",
    }
    assert json.loads(seen[4].content) == {
        "text": "a",
        "attributes": {"ups": 12, "user": "alice", "r": 0.5},
    }
    assert json.loads(seen[5].content) == {"text": "b"}  # no attributes: the older body
    assert out_text.published and out_text.event == f"{CID_E}1"
    assert topic.meta == "bafyreimeta" and topic.created.tzinfo is not None


def every_endpoint_handler(seen: list[httpx.Request]) -> Handler:
    """Answers each one-request endpoint of docs/http-api.md with a valid body."""

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        path = request.url.path
        if path == "/health":
            return httpx.Response(200, json={"status": "ok", "kubo": "up"})
        if path.endswith(("/subscribe", "/unsubscribe")):
            return httpx.Response(200, json={"topic": CID_T, "subscribed": "/sub" in path})
        if path.endswith("/publish"):
            return httpx.Response(
                200, json={"status": "published", "event": f"{CID_E}1", "request_id": None}
            )
        if path.endswith("/history"):
            page = {"events": [event_json(1)], "next": None, "complete": True, "missing": []}
            page.update(heads=[f"{CID_E}1"], retained=1, order="oldest")
            return httpx.Response(200, json=page)
        if path.startswith("/v1/events/"):
            return httpx.Response(200, json=event_json(1))
        if path.startswith("/v1/topics"):
            return httpx.Response(201 if request.method == "POST" else 200, json=topic_json())
        raise AssertionError(path)

    return handler


def _requests(seen: list[httpx.Request]) -> list[tuple[str, str, str, bytes, str]]:
    return [
        (r.method, r.url.path, str(r.url.params), r.content, r.headers["authorization"])
        for r in seen
    ]


async def test_both_clients_send_the_same_request_for_every_shared_method() -> None:
    """The one-request methods are written once (``sdk._endpoints``) for both clients:
    the blocking and the async one must send the same requests and parse the same."""
    a_seen: list[httpx.Request] = []
    s_seen: list[httpx.Request] = []
    async with aclient(every_endpoint_handler(a_seen), token="tok") as apc:
        a_out = [
            await apc.health(),
            await apc.create_topic("news", parent=CID_T, request_to_publish=[PEER]),
            await apc.get_topic(CID_T),
            await apc.update_topic(CID_T, event_linking=EventLinking.CUSTOM),
            await apc.subscribe(CID_T, fast=True, filter="ups > 1"),
            await apc.unsubscribe(CID_T),
            await apc.publish(CID_T, b"\x00", ack="local", attributes={"a": 1}),
            await apc.get_event(f"{CID_E}1"),
            await apc.history(CID_T, order="oldest", after=f"{CID_E}0", limit=3, where="a = 1"),
        ]
    with sclient(every_endpoint_handler(s_seen), token="tok") as spc:
        s_out = [
            spc.health(),
            spc.create_topic("news", parent=CID_T, request_to_publish=[PEER]),
            spc.get_topic(CID_T),
            spc.update_topic(CID_T, event_linking=EventLinking.CUSTOM),
            spc.subscribe(CID_T, fast=True, filter="ups > 1"),
            spc.unsubscribe(CID_T),
            spc.publish(CID_T, b"\x00", ack="local", attributes={"a": 1}),
            spc.get_event(f"{CID_E}1"),
            spc.history(CID_T, order="oldest", after=f"{CID_E}0", limit=3, where="a = 1"),
        ]
    assert len(a_seen) == len(s_seen) == 9
    assert _requests(a_seen) == _requests(s_seen)
    assert a_out == s_out
    assert s_out[4] == CID_T and s_out[6].published
    # the methods are the builders': their names, signatures and docstrings
    assert spc.publish.__name__ == apc.publish.__name__ == "publish"
    assert sdk.Client.history.__doc__ == sdk.AsyncClient.history.__doc__
    assert "before" in (sdk.Client.history.__doc__ or "")


async def test_both_clients_refuse_bad_arguments_when_called_or_awaited() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise AssertionError("no request expected")

    with sclient(handler) as spc, pytest.raises(ValueError, match="non-empty name"):
        spc.create_topic(" ")
    async with aclient(handler) as apc:
        pending = apc.create_topic(" ")  # nothing is checked before the await
        with pytest.raises(ValueError, match="non-empty name"):
            await pending


def test_the_deprecated_history_cursor_warning_names_the_callers_line() -> None:
    seen: list[httpx.Request] = []
    with sclient(every_endpoint_handler(seen)) as pc:
        with pytest.warns(DeprecationWarning) as caught:
            pc.history(CID_T, before=f"{CID_E}4")
        with pytest.warns(DeprecationWarning) as walked:
            list(pc.iter_history(CID_T, before=f"{CID_E}4"))
    assert caught[0].filename == walked[0].filename == __file__


async def test_bad_arguments_are_refused_before_any_request() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise AssertionError("no request expected")

    async with aclient(handler) as pc:
        with pytest.raises(ValueError, match="name"):
            await pc.create_topic(" ")
        with pytest.raises(ValueError, match="CID"):
            await pc.get_topic("")
        with pytest.raises(TypeError, match="bytes or str"):
            await pc.publish(CID_T, 42)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="a string or a number"):
            await pc.publish(CID_T, "x", attributes={"a": True})
        with pytest.raises(TypeError, match="mapping"):
            await pc.publish(CID_T, "x", attributes=[("a", 1)])  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="limit"):
            await pc.history(CID_T, limit=501)
        with pytest.raises(TypeError, match="list of peer"):
            await pc.create_topic("x", allowed_publishers=PEER)
        with pytest.raises(ValueError, match="LINK"):
            await pc.create_topic("x", event_linking="LINK")


async def test_cids_are_quoted_into_the_path() -> None:
    paths: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        paths.append(request.url.raw_path.decode())
        return error(400, "bad_request", "bad CID")

    async with aclient(handler) as pc:
        with pytest.raises(sdk.BadRequest):
            await pc.get_topic("../v1/status")
    assert paths == ["/v1/topics/..%2Fv1%2Fstatus"]


# -- errors ------------------------------------------------------------------------------

CODES = [
    (400, "bad_request", sdk.BadRequest),
    (401, "unauthorized", sdk.Unauthorized),
    (403, "not_allowed", sdk.NotAllowed),
    (404, "unknown_topic", sdk.UnknownTopic),
    (404, "unknown_event", sdk.UnknownEvent),
    (404, "not_found", sdk.NotFound),
    (409, "conflict", sdk.Conflict),
    (413, "payload_too_large", sdk.PayloadTooLarge),
    (422, "invalid_parent", sdk.InvalidParent),
    (503, "kubo_unavailable", sdk.KuboUnavailable),
    (504, "timeout", sdk.Timeout),
]


@pytest.mark.parametrize(("status", "code", "cls"), CODES)
async def test_every_contract_error_becomes_its_exception(
    status: int, code: str, cls: type[sdk.ApiError]
) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return error(status, code, f"because {code}")

    async with aclient(handler) as pc:
        with pytest.raises(cls) as info:
            await pc.publish(CID_T, "x")
    assert type(info.value) is cls
    assert (info.value.status, info.value.code, info.value.message) == (
        status,
        code,
        f"because {code}",
    )
    with sclient(handler) as spc, pytest.raises(cls):
        spc.publish(CID_T, "x")


@pytest.mark.parametrize(
    ("response", "cls", "code"),
    [
        (
            httpx.Response(409, json={"error": {"code": "brand_new", "message": "m"}}),
            sdk.Conflict,
            "brand_new",
        ),
        (httpx.Response(418, text="teapot"), sdk.ApiError, "http_418"),
        (httpx.Response(500, text="<html>boom</html>"), sdk.ApiError, "http_500"),
        (httpx.Response(404, text=""), sdk.NotFound, "not_found"),
    ],
)
async def test_unknown_codes_fall_back_on_the_status(
    response: httpx.Response, cls: type[sdk.ApiError], code: str
) -> None:
    async with aclient(lambda _r: response) as pc:
        with pytest.raises(cls) as info:
            await pc.status()
    assert type(info.value) is cls and info.value.code == code


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[]",
        json.dumps(
            {
                "peer_id": "p",
                "version": "v",
                "kubo_version": "k",
                "api": "a",
                "topics": [{"cid": 1}],
            }
        ).encode(),
    ],
)
async def test_garbage_answers_raise_invalid_response(body: bytes) -> None:
    async with aclient(lambda _r: httpx.Response(200, content=body)) as pc:
        with pytest.raises(sdk.InvalidResponse):
            await pc.status()


@pytest.mark.parametrize(
    "over",
    [
        {"payload": "!!not base64"},
        {"created": "yesterday"},
        {"created": "2026-11-21T09:00:00"},
        {"cid": ""},
        {"parents": 5},
        {"parents": [5]},
        {"parents": "bafyreievent0"},
        {"clock": -1},
        {"clock": "3"},
        {"clock": True},
        {"clock": None},
    ],
)
async def test_malformed_events_raise_invalid_response(over: dict[str, Any]) -> None:
    async with aclient(lambda _r: httpx.Response(200, json=event_json(1, **over))) as pc:
        with pytest.raises(sdk.InvalidResponse):
            await pc.get_event(f"{CID_E}1")


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_no_sidecar_is_sidecar_unavailable() -> None:
    api = f"http://127.0.0.1:{closed_port()}"
    async with AsyncClient(config=ClientConfig(api=api, timeout=2)) as pc:
        with pytest.raises(sdk.SidecarUnavailable, match="not reachable") as info:
            await pc.health()
    assert info.value.api == api and "refused" in info.value.reason
    assert isinstance(info.value.__cause__, httpx.ConnectError)
    with Client(config=ClientConfig(api=api, timeout=2)) as spc:
        with pytest.raises(sdk.SidecarUnavailable):
            spc.status()


async def test_publish_outcomes() -> None:
    answers = iter(
        [
            {"status": "requested", "event": None, "request_id": "r1"},
            {"status": "published", "event": None, "request_id": None},
            {"status": "queued", "event": None, "request_id": None},
        ]
    )
    async with aclient(lambda _r: httpx.Response(200, json=next(answers))) as pc:
        out = await pc.publish(CID_T, "x")
        assert (out.status, out.published, out.request_id) == ("requested", False, "r1")
        with pytest.raises(sdk.InvalidResponse, match="without an event"):
            await pc.publish(CID_T, "x")
        with pytest.raises(sdk.InvalidResponse, match="queued"):
            await pc.publish(CID_T, "x")


def test_peer_set_forms() -> None:
    assert PeerSet.of(False) == PeerSet(enabled=False)
    assert PeerSet.of(True) == PeerSet(enabled=True)
    assert PeerSet.of([PEER]) == PeerSet(enabled=True, peers=(PEER,))
    with pytest.raises(ValueError):
        PeerSet(enabled=True, peers=("",))


# -- history -----------------------------------------------------------------------------


def history_handler(total: int) -> tuple[Handler, list[dict[str, str]]]:
    """Pages of a topic of ``total`` events (event n has clock n - 1): ``next`` is the
    last event of the page, passed back as ``after`` (the next page starts strictly
    after it in the order asked for)."""
    asked: list[dict[str, str]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        params = dict(request.url.params)
        asked.append(params)
        limit = int(params["limit"])
        order = params.get("order", "newest")
        cursor = int(params["after"].removeprefix(CID_E)) if "after" in params else None
        if order == "newest":
            start = total if cursor is None else cursor - 1
            numbers = list(range(start, max(start - limit, 0), -1))
            more = bool(numbers) and numbers[-1] > 1
        else:
            start = 1 if cursor is None else cursor + 1
            numbers = list(range(start, min(start + limit, total + 1)))
            more = bool(numbers) and numbers[-1] < total
        return httpx.Response(
            200,
            json={
                "events": [event_json(n) for n in numbers],
                "next": f"{CID_E}{numbers[-1]}" if more else None,
                "complete": True,
                "missing": [],
                "heads": [f"{CID_E}{total}"],
                "retained": total,
                "order": order,
            },
        )

    return handler, asked


async def test_iter_history_walks_every_page() -> None:
    handler, asked = history_handler(7)
    async with aclient(handler) as pc:
        page = await pc.history(CID_T, limit=3)
        assert [e.text for e in page.events] == ["event 7", "event 6", "event 5"]
        assert page.next == f"{CID_E}5"
        assert (page.complete, page.heads, page.retained, page.order) == (
            True,
            (f"{CID_E}7",),
            7,
            "newest",
        )
        texts = [e.text async for e in pc.iter_history(CID_T, page_size=3)]
    assert texts == [f"event {n}" for n in range(7, 0, -1)]
    assert [a.get("after") for a in asked[1:]] == [None, f"{CID_E}5", f"{CID_E}2"]
    assert {a["order"] for a in asked} == {"newest"}
    with sclient(handler) as spc:
        assert [e.text for e in spc.iter_history(CID_T, page_size=2)] == texts


async def test_filtered_history_goes_on_after_an_empty_page_with_a_cursor() -> None:
    """A filtered page (``where``) may be empty and still have ``next``: the walk goes
    on from it; without ``where`` an empty page ends the walk as before."""
    pages = {
        None: ([1, 2], f"{CID_E}2"),
        f"{CID_E}2": ([], f"{CID_E}5"),  # examined 3..5, none matched
        f"{CID_E}5": ([7], None),
    }
    asked: list[dict[str, str]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        params = dict(request.url.params)
        asked.append(params)
        events, nxt = pages[params.get("after")]
        doc = {
            "events": [event_json(n) for n in events],
            "next": nxt,
            "complete": True,
            "missing": [],
            "heads": [],
            "retained": 7,
            "order": "oldest",
        }
        return httpx.Response(200, json=doc)

    where = "ups >= 10 and user in ['a', 'b']"
    async with aclient(handler) as pc:
        got = [e.text async for e in pc.iter_history(CID_T, order="oldest", where=where)]
    assert got == ["event 1", "event 2", "event 7"]
    assert all(a["where"] == where for a in asked) and len(asked) == 3
    with sclient(handler) as spc:
        assert [e.text for e in spc.iter_history(CID_T, order="oldest", where=where)] == got
        with pytest.raises(TypeError, match="where must be a string"):
            spc.history(CID_T, where=5)  # type: ignore[arg-type]


async def test_subscribe_sends_the_filter() -> None:
    bodies: list[Any] = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        doc = {"topic": CID_T, "subscribed": True, "filter": "ups >= 10"}
        return httpx.Response(200, json=doc)

    async with aclient(handler) as pc:
        assert await pc.subscribe(CID_T, filter="ups >= 10") == CID_T
        assert await pc.subscribe(CID_T) == CID_T
    with sclient(handler) as spc:
        spc.subscribe(CID_T, filter="user = 'x'")
        with pytest.raises(TypeError, match="filter must be a string"):
            spc.subscribe(CID_T, filter=1)  # type: ignore[arg-type]
    assert bodies == [{"filter": "ups >= 10"}, {}, {"filter": "user = 'x'"}]


async def test_history_oldest_first_and_cursor() -> None:
    handler, asked = history_handler(5)
    async with aclient(handler) as pc:
        page = await pc.history(CID_T, order="oldest", limit=2)
        assert [e.text for e in page.events] == ["event 1", "event 2"]
        assert (page.order, page.next) == ("oldest", f"{CID_E}2")
        page = await pc.history(CID_T, order="oldest", after=page.next, limit=2)
        assert [e.text for e in page.events] == ["event 3", "event 4"]
        texts = [e.text async for e in pc.iter_history(CID_T, order="oldest", page_size=2)]
    assert texts == [f"event {n}" for n in range(1, 6)]
    assert asked[1] == {"limit": "2", "order": "oldest", "after": f"{CID_E}2"}
    with sclient(handler) as spc:
        assert [e.text for e in spc.iter_history(CID_T, order="oldest")] == texts


async def test_history_before_is_a_deprecated_alias_of_after() -> None:
    handler, asked = history_handler(5)
    async with aclient(handler) as pc:
        with pytest.warns(DeprecationWarning, match="after="):
            page = await pc.history(CID_T, before=f"{CID_E}4", limit=2)
        assert [e.text for e in page.events] == ["event 3", "event 2"]
        assert asked[-1]["after"] == f"{CID_E}4" and "before" not in asked[-1]
        with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="not both"):
            await pc.history(CID_T, before=f"{CID_E}4", after=f"{CID_E}3")
        with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="oldest"):
            await pc.history(CID_T, before=f"{CID_E}4", order="oldest")
    with sclient(handler) as spc, pytest.warns(DeprecationWarning):
        assert [e.text for e in spc.iter_history(CID_T, before=f"{CID_E}3")] == [
            "event 2",
            "event 1",
        ]


async def test_bad_history_arguments_are_refused_before_any_request() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise AssertionError("no request expected")

    async with aclient(handler) as pc:
        with pytest.raises(ValueError, match="order"):
            await pc.history(CID_T, order="sideways")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="limit"):
            await pc.history(CID_T, limit=0)
        with pytest.raises(TypeError, match="limit"):
            await pc.history(CID_T, limit=True)
        with pytest.raises(ValueError, match="after"):
            await pc.history(CID_T, after=" ")
        with pytest.raises(ValueError, match="order"):
            _ = [e async for e in pc.iter_history(CID_T, order="up")]  # type: ignore[arg-type]


def test_history_page_fields_round_trip() -> None:
    doc = {
        "events": [event_json(3), event_json(2)],
        "next": f"{CID_E}2",
        "complete": False,
        "missing": [f"{CID_E}1"],
        "heads": [f"{CID_E}3", f"{CID_E}9"],
        "retained": 2,
        "order": "newest",
    }
    page = sdk.HistoryPage.from_json(doc)
    assert page.events[0].parents == (f"{CID_E}2",) and page.events[0].clock == 2
    assert (page.complete, page.missing, page.heads, page.retained) == (
        False,
        (f"{CID_E}1",),
        (f"{CID_E}3", f"{CID_E}9"),
        2,
    )
    assert sdk.HistoryPage.from_json(page.to_json()) == page
    assert sdk.HistoryPage.from_json({**doc, "order": "oldest"}).order == "oldest"


@pytest.mark.parametrize(
    "over",
    [
        {"complete": None},
        {"complete": "yes"},
        {"missing": "bafy"},
        {"heads": [1]},
        {"retained": -1},
        {"retained": None},
        {"order": "sideways"},
        {"events": {}},
    ],
)
def test_malformed_history_pages_raise_invalid_response(over: dict[str, Any]) -> None:
    doc = {"events": [], "next": None, "complete": True, "missing": [], "heads": []}
    doc.update(retained=0, order="newest")
    with pytest.raises(sdk.InvalidResponse):
        sdk.HistoryPage.from_json({**doc, **over})


def test_protocol_1_delivery_lines_still_parse() -> None:
    """Lines a protocol 1 sidecar wrote to its delivery log have one ``parent``."""
    old = delivery_json(2)
    del old["parents"], old["clock"]
    old["parent"] = f"{CID_E}1"
    d = Delivery.from_json(old)
    assert (d.event.parents, d.event.clock) == ((f"{CID_E}1",), 0)
    old["parent"] = None
    assert Delivery.from_json(old).event.parents == ()


async def test_iter_history_refuses_a_cursor_loop() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        doc = {"events": [event_json(2)], "next": f"{CID_E}1", "complete": True}
        return httpx.Response(200, json={**doc, "retained": 2})

    async with aclient(handler) as pc:
        with pytest.raises(sdk.InvalidResponse, match="repeats"):
            _ = [e async for e in pc.iter_history(CID_T, page_size=1)]


# -- deliveries --------------------------------------------------------------------------


def chopped(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


@pytest.mark.parametrize("chunk", [1, 7, 10_000])
async def test_delivery_lines_parse_whatever_the_chunking(chunk: int) -> None:
    body = ndjson(1, 2, 3)

    def handler(request: httpx.Request) -> httpx.Response:
        assert dict(request.url.params) == {"follow": "false", "topic": CID_T, "after": "0"}
        return httpx.Response(200, stream=Chunks(chopped(body, chunk), drop=False))

    async with aclient(handler) as pc:
        got = [d async for d in pc.deliveries(CID_T, after=0, follow=False)]
    assert [(d.seq, d.event.text, d.recovered) for d in got] == [
        (1, "event 1", False),
        (2, "event 2", False),
        (3, "event 3", True),
    ]
    assert all(isinstance(d, Delivery) and d.topic_name == "news" for d in got)


class ResumingSidecar:
    """Drops the stream mid-line after some deliveries, then resumes from ``after``
    replaying one delivery the client already has (which it must drop)."""

    def __init__(self, drops: int) -> None:
        self.drops = drops
        self.afters: list[str | None] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        after = request.url.params.get("after")
        self.afters.append(after)
        first = int(after) if after is not None else 0
        if len(self.afters) <= self.drops:
            seqs = [first + 1, first + 2]
            partial = json.dumps(delivery_json(first + 3)).encode()[:25]
            body = ndjson(*seqs) + partial
            return httpx.Response(200, stream=Chunks(chopped(body, 40), drop=True))
        replay = ndjson(first, first + 1, first + 2) if first else ndjson(1, 2)
        return httpx.Response(200, stream=Chunks([replay], drop=False))


async def test_a_dropped_stream_resumes_from_the_last_seq_without_duplicates() -> None:
    sidecar = ResumingSidecar(drops=2)
    async with aclient(sidecar) as pc:
        got = [d.seq async for d in pc.deliveries(follow=False)]
    assert got == [1, 2, 3, 4, 5, 6]
    assert sidecar.afters == [None, "2", "4"]
    sync_sidecar = ResumingSidecar(drops=2)
    with sclient(sync_sidecar) as spc:
        assert [d.seq for d in spc.deliveries(follow=False)] == got
    assert sync_sidecar.afters == sidecar.afters


async def test_a_stream_that_keeps_failing_gives_up() -> None:
    calls: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        raise httpx.ConnectError("[Errno 111] Connection refused")

    async with aclient(handler, reconnect_attempts=3) as pc:
        with pytest.raises(sdk.SidecarUnavailable, match="gave up after 4 tries"):
            _ = [d async for d in pc.deliveries()]
    assert len(calls) == 4
    with sclient(handler, reconnect_attempts=0) as spc:
        with pytest.raises(sdk.SidecarUnavailable):
            _ = list(spc.deliveries())


async def test_a_followed_stream_that_ends_is_reopened() -> None:
    afters: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        afters.append(request.url.params.get("after"))
        assert request.url.params["follow"] == "true"
        n = len(afters)
        return httpx.Response(200, content=ndjson(n))

    async with aclient(handler) as pc:
        got: list[int] = []
        async for d in pc.deliveries():
            got.append(d.seq)
            if len(got) == 3:
                break
    assert got == [1, 2, 3]
    assert afters == [None, "1", "2"]


async def test_stream_errors_are_not_retried() -> None:
    calls: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        return error(400, "bad_request", "bad cursor")

    async with aclient(handler) as pc:
        with pytest.raises(sdk.BadRequest, match="bad cursor"):
            _ = [d async for d in pc.deliveries(after=3)]
    assert calls == [1]
    async with aclient(handler) as pc:
        with pytest.raises(ValueError, match="after"):
            _ = [d async for d in pc.deliveries(after=-1)]
    assert calls == [1]


async def test_a_garbage_delivery_line_raises() -> None:
    body = ndjson(1) + b"{not json}\n"
    async with aclient(lambda _r: httpx.Response(200, content=body)) as pc:
        seen: list[int] = []
        with pytest.raises(sdk.InvalidResponse, match="not JSON"):
            async for d in pc.deliveries(follow=False):
                seen.append(d.seq)
    assert seen == [1]


def test_objects_round_trip_through_their_json() -> None:
    topic = sdk.Topic.from_json(topic_json(latest="bafyreinewer"))
    assert sdk.Topic.from_json(topic.to_json()) == topic
    assert topic.to_json()["created"] == "2026-11-21T09:00:00.000000Z"
    delivery = Delivery.from_json(delivery_json(4))
    assert Delivery.from_json(delivery.to_json()) == delivery
    assert delivery.to_json() == delivery_json(4) | {"created": "2026-11-21T09:00:01.500000Z"}
    assert dict(delivery.event.attributes) == {"ups": 4, "ratio": 0.5, "user": "u"}
    older = {k: v for k, v in delivery_json(4).items() if k != "attributes"}
    assert dict(Delivery.from_json(older).event.attributes) == {}  # an older sidecar's line
    for bad in ([1], {"a": True}, {"a": None}, {"a": [1]}):
        with pytest.raises(sdk.InvalidResponse, match="'attributes' must map names"):
            Delivery.from_json(delivery_json(4) | {"attributes": bad})
    status = sdk.NodeStatus.from_json(
        {
            "peer_id": PEER,
            "version": "0.1.0",
            "kubo_version": "0.43.0",
            "api": "127.0.0.1:5050",
            "topics": [
                {
                    "cid": CID_T,
                    "root_cid": CID_T,
                    "name": "news",
                    "role": "relay",
                    "parent": "12D3KooWParent",
                    "children": ["12D3KooWChild"],
                    "subscribed": False,
                    "acting_root": False,
                    "heads": [f"{CID_E}1"],
                }
            ],
        }
    )
    assert sdk.NodeStatus.from_json(status.to_json()) == status
    assert status.topic(CID_T) is status.topics[0] and status.topic("other") is None


# -- consumers (docs/sdk.md "Consumers") ---------------------------------------------------


def consumer_json(**over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "id": "reader",
        "name": "reader",
        "durable": True,
        "topic": CID_T,
        "filter": "ups >= 10",
        "fast": False,
        "cursor": 4,
        "streams": 0,
        "idle_since": 1767e6,
        "expires": 1767e6 + 604800,
    }
    doc.update(over)
    return doc


def consumer_handler(seen: list[httpx.Request]) -> Handler:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        path = request.url.path
        if path == f"/v1/topics/{CID_T}/consumers":
            return httpx.Response(201, json=consumer_json())
        if path == "/v1/consumers":
            return httpx.Response(200, json={"consumers": [consumer_json()]})
        if path == "/v1/consumers/reader" and request.method == "DELETE":
            return httpx.Response(
                200, json={"id": "reader", "closed": True, "topic": CID_T, "subscribed": False}
            )
        if path == "/v1/consumers/reader":
            return httpx.Response(200, json=consumer_json(streams=1, idle_since=None))
        if path == "/v1/deliveries":
            assert request.url.params["consumer"] == "reader"
            return httpx.Response(200, content=ndjson(5, 6))
        if path == "/v1/consumers/gone":
            return error(404, "not_found", "no consumer 'gone'")
        raise AssertionError(path)

    return handler


def _check_consumer_requests(seen: list[httpx.Request]) -> None:
    assert seen[0].method == "POST" and json.loads(seen[0].content) == {
        "filter": "ups >= 10",
        "name": "reader",
        "fast": True,
        "after": 0,
    }
    assert [(r.method, r.url.path) for r in seen[1:]] == [
        ("GET", "/v1/consumers/reader"),
        ("GET", "/v1/consumers"),
        ("GET", "/v1/deliveries"),
        ("DELETE", "/v1/consumers/reader"),
        ("GET", "/v1/consumers/gone"),
    ]
    # the stream asks for the consumer, not a topic, and no after: its own cursor
    assert dict(seen[3].url.params) == {"follow": "false", "consumer": "reader"}


async def test_the_async_client_opens_reads_and_closes_a_consumer() -> None:
    seen: list[httpx.Request] = []
    async with aclient(consumer_handler(seen)) as pc:
        c = await pc.open_consumer(CID_T, filter="ups >= 10", name="reader", fast=True, after=0)
        assert c.durable and c.cursor == 4 and c.filter == "ups >= 10"
        assert (await pc.get_consumer("reader")).idle_since is None
        assert [x.id for x in await pc.consumers()] == ["reader"]
        got = [d.seq async for d in pc.deliveries(consumer=c.id, follow=False)]
        assert got == [5, 6]
        assert await pc.close_consumer("reader") is False
        with pytest.raises(sdk.NotFound):
            await pc.get_consumer("gone")
    _check_consumer_requests(seen)


def test_the_sync_client_opens_reads_and_closes_a_consumer() -> None:
    seen: list[httpx.Request] = []
    with sclient(consumer_handler(seen)) as pc:
        c = pc.open_consumer(CID_T, filter="ups >= 10", name="reader", fast=True, after=0)
        assert c.to_json() == consumer_json()
        assert pc.get_consumer("reader").streams == 1
        assert len(pc.consumers()) == 1
        assert [d.seq for d in pc.deliveries(consumer=c.id, follow=False)] == [5, 6]
        assert pc.close_consumer("reader") is False
        with pytest.raises(sdk.NotFound):
            pc.get_consumer("gone")
    _check_consumer_requests(seen)


def test_consumer_arguments_are_checked_before_any_request() -> None:
    from pulsarcast_ipfs.sdk import _calls

    with pytest.raises(ValueError, match="not both"):
        _calls.DeliveryCursor(topic=CID_T, after=None, follow=True, consumer="x")
    with pytest.raises(ValueError, match="consumer id"):
        _calls.get_consumer(" ")
    with pytest.raises(ValueError, match="after"):
        _calls.open_consumer(CID_T, after=-1)
    with pytest.raises(TypeError, match="filter"):
        _calls.open_consumer(CID_T, filter=3)  # type: ignore[arg-type]
    with pytest.raises(sdk.InvalidResponse, match="consumer"):
        _calls.open_consumer(CID_T).parse(201, b'{"id": "x"}')


def anonymous_handler(seen: list[httpx.Request]) -> Handler:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path.endswith("/consumers"):
            asked = json.loads(request.content or b"{}")
            name = asked.get("name")
            return httpx.Response(201, json=consumer_json(id=name or "anon-1", name=name))
        if request.method == "DELETE":
            return httpx.Response(
                200, json={"id": "anon-1", "closed": True, "topic": CID_T, "subscribed": True}
            )
        raise AssertionError(request.url.path)

    return handler


async def test_an_async_subscription_closes_its_anonymous_consumer_even_on_error() -> None:
    seen: list[httpx.Request] = []
    async with aclient(anonymous_handler(seen)) as pc:
        with pytest.raises(RuntimeError, match="boom"):
            async with pc.subscription(CID_T, filter="ups >= 10") as c:
                assert c.id == "anon-1"
                raise RuntimeError("boom")
        async with pc.subscription(CID_T, name="keep") as c:
            assert c.durable
    assert [(r.method, r.url.path) for r in seen] == [
        ("POST", f"/v1/topics/{CID_T}/consumers"),
        ("DELETE", "/v1/consumers/anon-1"),
        ("POST", f"/v1/topics/{CID_T}/consumers"),  # named: not closed
    ]


def test_a_sync_subscription_closes_its_anonymous_consumer() -> None:
    seen: list[httpx.Request] = []
    with sclient(anonymous_handler(seen)) as pc:
        with pc.subscription(CID_T) as c:
            assert not c.durable
        with pc.subscription(CID_T, name="keep"):
            pass
    assert [r.method for r in seen] == ["POST", "DELETE", "POST"]
