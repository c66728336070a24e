"""The API's error codes are one table (pulsarcast_ipfs/api_errors.py): the sidecar's
answers, the OpenAPI document, the SDK's exceptions and docs/http-api.md agree with it,
and the sidecar picks an answer by the type of an error, never by its message text."""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from starlette.requests import Request
from starlette.responses import Response

import pulsarcast_ipfs.sdk as sdk
from pulsarcast_ipfs.api_errors import ERROR_CODES, ErrorCode, markdown_table
from pulsarcast_ipfs.core import (
    EventLinking,
    InvalidParent,
    LocalProtocolError,
    NotAllowedToPublish,
    PulsarcastError,
    TopicConflict,
    TopicOptions,
    UnknownTopic,
    compute_cid,
)
from pulsarcast_ipfs.core.testing import CoreNet
from pulsarcast_ipfs.kubo import KuboError, KuboNotFound, KuboTimeout, KuboUnavailable
from pulsarcast_ipfs.sdk._errors import error_from_response
from sidecar._api import REFUSALS, _wrap
from sidecar._openapi import openapi_document
from sidecar._signing import SigningFailed

ROOT = Path(__file__).resolve().parents[1]
ROWS = {(e.status, e.code): e for e in ERROR_CODES}


def test_the_table_names_each_status_and_code_once() -> None:
    assert len(ROWS) == len(ERROR_CODES)
    for e in ERROR_CODES:  # a code becomes one SDK class, whatever its status
        assert {r.sdk_class for r in ERROR_CODES if r.code == e.code} == {e.sdk_class}
    with pytest.raises(ValueError):
        ErrorCode(status=200, code="ok", sdk_class="Ok", meaning="not an error")


# -- the SDK -------------------------------------------------------------------------------


@pytest.mark.parametrize("row", ERROR_CODES, ids=lambda e: f"{e.status}-{e.code}")
def test_every_code_has_its_sdk_class(row: ErrorCode) -> None:
    cls = getattr(sdk, row.sdk_class)
    assert row.sdk_class in sdk.__all__
    assert issubclass(cls, sdk.ApiError) and cls.code_name == row.code
    body = json.dumps({"error": {"code": row.code, "message": "because"}}).encode()
    err = error_from_response(row.status, body)
    assert type(err) is cls
    assert (err.status, err.code, err.message) == (row.status, row.code, "because")


def test_every_sdk_api_error_is_in_the_table() -> None:
    classes = {
        name
        for name in sdk.__all__
        if inspect.isclass(obj := getattr(sdk, name))
        and issubclass(obj, sdk.ApiError)
        and obj is not sdk.ApiError
    }
    assert classes == {e.sdk_class for e in ERROR_CODES}


def test_signing_failed_is_its_own_class_and_still_a_kubo_unavailable() -> None:
    body = b'{"error": {"code": "signing_failed", "message": "key/sign timed out"}}'
    err = error_from_response(503, body)
    assert type(err) is sdk.SigningFailed and isinstance(err, sdk.KuboUnavailable)


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (400, sdk.BadRequest),
        (404, sdk.NotFound),
        (405, sdk.BadRequest),
        (409, sdk.Conflict),
        (503, sdk.KuboUnavailable),
        (418, sdk.ApiError),
    ],
)
def test_an_unknown_code_becomes_the_base_class_of_its_status(
    status: int, cls: type[sdk.ApiError]
) -> None:
    err = error_from_response(status, b'{"error": {"code": "brand_new", "message": "m"}}')
    assert type(err) is cls and err.code == "brand_new"


# -- the sidecar ---------------------------------------------------------------------------


def test_every_exception_the_api_maps_is_in_the_table() -> None:
    assert {row for _, row, _ in REFUSALS} <= set(ERROR_CODES)
    kinds = [kind for kind, _, _ in REFUSALS]
    for i, kind in enumerate(kinds):  # no entry is hidden by an earlier, broader one
        assert not any(issubclass(kind, earlier) for earlier in kinds[:i]), kind
    for exc in (UnknownTopic, NotAllowedToPublish, InvalidParent, TopicConflict, SigningFailed):
        assert exc in kinds


def test_every_status_and_code_the_api_writes_is_in_the_table() -> None:
    """The refusals written as literals (``ApiError(400, "bad_request", ...)``)."""
    pairs = set()
    for path in sorted((ROOT / "sidecar").glob("*.py")):
        text = path.read_text()
        for m in re.finditer(r'(?:ApiError|_error_response)\(\s*(\d{3}),\s*"(\w+)"', text):
            pairs.add((int(m[1]), m[2]))
    assert len(pairs) >= 8 and pairs <= set(ROWS), pairs - set(ROWS)


def test_the_api_never_matches_message_text() -> None:
    text = (ROOT / "sidecar" / "_api.py").read_text()
    assert not re.search(r'"\s+in\s+(msg|message|str\(exc\)|exc\.message)\b', text)
    assert "msg = str(exc)" not in text


async def _answer(exc: Exception) -> tuple[int, str, str]:
    async def fails(request: Request) -> Response:
        raise exc

    handler: Callable[[Request], Awaitable[Response]] = _wrap(fails)
    scope = {"type": "http", "method": "POST", "path": "/", "headers": [], "query_string": b""}
    resp = await handler(Request(scope))
    err = json.loads(bytes(resp.body))["error"]
    return resp.status_code, err["code"], err["message"]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("exc", "status", "code"),
    [
        # the message says the opposite: the type decides
        (InvalidParent("parent event x belongs to another topic"), 422, "invalid_parent"),
        (TopicConflict("unknown parent event x"), 409, "conflict"),
        (LocalProtocolError("unknown parent event x"), 400, "bad_request"),
        (LocalProtocolError("parent event x belongs to another topic"), 400, "bad_request"),
        (UnknownTopic("unknown topic x"), 404, "unknown_topic"),
        (NotAllowedToPublish("may not"), 403, "not_allowed"),
        (SigningFailed("key/sign timed out"), 503, "signing_failed"),
        (KuboUnavailable("refused"), 503, "kubo_unavailable"),
        (KuboTimeout("slow"), 504, "timeout"),
        (KuboNotFound("no block"), 503, "kubo_unavailable"),
        (KuboError("odd"), 503, "kubo_unavailable"),
    ],
)
async def test_the_api_answers_an_error_by_its_type(exc: Exception, status: int, code: str) -> None:
    assert (status, code) in ROWS
    got = await _answer(exc)
    assert got[:2] == (status, code)
    assert str(exc) in got[2]


@pytest.mark.anyio
async def test_an_error_the_api_does_not_map_is_not_answered() -> None:
    with pytest.raises(PulsarcastError):
        await _answer(PulsarcastError("a bug, not a refusal"))


# -- the OpenAPI document and the docs ------------------------------------------------------


def test_the_openapi_document_lists_every_error() -> None:
    spec = openapi_document()
    codes = spec["components"]["schemas"]["Error"]["properties"]["error"]["properties"]["code"]
    assert set(codes["enum"]) == {e.code for e in ERROR_CODES}
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            errors = {s: r for s, r in op["responses"].items() if int(s) >= 400}
            assert set(errors) == {str(e.status) for e in ERROR_CODES}, (method, path)
            for status, resp in errors.items():
                schema = resp["content"]["application/json"]["schema"]["allOf"]
                enum = schema[1]["properties"]["error"]["properties"]["code"]["enum"]
                assert enum == [e.code for e in ERROR_CODES if e.status == int(status)]


def _documented_errors() -> list[tuple[int, str, str, str]]:
    text = (ROOT / "docs" / "http-api.md").read_text()
    section = text.split("\n## Errors\n", 1)[1].split("\n## ", 1)[0]
    return [
        (int(m[1]), m[2], m[3], m[4])
        for m in re.finditer(
            r"^\| (\d{3}) \| `(\w+)` \| `(\w+)` \| (.*?) \|$", section, re.MULTILINE
        )
    ]


def test_the_docs_error_table_is_the_table() -> None:
    documented = _documented_errors()
    assert documented == [(e.status, e.code, e.sdk_class, e.meaning) for e in ERROR_CODES], (
        "docs/http-api.md's error table differs; `python -m pulsarcast_ipfs.api_errors`"
        " prints it:\n" + markdown_table()
    )
    assert markdown_table() in (ROOT / "docs" / "http-api.md").read_text()


# -- the core raises the typed refusals ------------------------------------------------------


def test_the_core_refuses_a_custom_parent_with_a_typed_error() -> None:
    net = CoreNet(2, seed=1)
    author = net.peers[0]
    opts = TopicOptions(event_linking=EventLinking.CUSTOM)
    topic = net.call(author, "create_topic", "news", options=opts)
    other = net.call(author, "create_topic", "other", options=opts)
    net.run_for(0.5)
    elsewhere = net.call(author, "publish", other, b"o").event_cid
    with pytest.raises(InvalidParent):
        net.call(author, "publish", topic, b"x", parent=compute_cid(b"never published"))
    with pytest.raises(TopicConflict):
        net.call(author, "publish", topic, b"x", parent=elsewhere)
    assert issubclass(InvalidParent, LocalProtocolError)
    assert issubclass(TopicConflict, LocalProtocolError)
