"""The SDK's errors, translated from the sidecar's answers in one place.

Hierarchy (docs/http-api.md "Errors")::

    SdkError
    ├── SidecarUnavailable          no answer: connection refused, reset, timed out
    ├── InvalidResponse             the sidecar answered something the contract does not allow
    └── ApiError(status, code, message)     the sidecar answered with an error object
        ├── BadRequest              400 bad_request
        ├── Unauthorized            401 unauthorized
        ├── NotAllowed              403 not_allowed
        ├── NotFound                404 not_found
        │   ├── UnknownTopic        404 unknown_topic
        │   └── UnknownEvent        404 unknown_event
        ├── Conflict                409 conflict
        ├── PayloadTooLarge         413 payload_too_large
        ├── InvalidParent           422 invalid_parent
        ├── KuboUnavailable         503 kubo_unavailable
        │   └── SigningFailed       503 signing_failed
        └── Timeout                 504 timeout
            └── NotAcknowledged     504 not_acknowledged

The codes, their statuses and the class each becomes are the table of
:mod:`pulsarcast_ipfs.api_errors` (``sdk_class``); a test checks that every row
names a class here whose ``code_name`` is its code. :func:`error_from_response`
is the single place where an HTTP answer becomes one of these; the clients
translate httpx's transport errors into :class:`SidecarUnavailable` with
``raise ... from exc``.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from pulsarcast_ipfs.api_errors import ERROR_CODES

__all__ = [
    "ApiError",
    "BadRequest",
    "Conflict",
    "InvalidParent",
    "InvalidResponse",
    "KuboUnavailable",
    "NotAcknowledged",
    "NotAllowed",
    "NotFound",
    "PayloadTooLarge",
    "SdkError",
    "SidecarUnavailable",
    "SigningFailed",
    "Timeout",
    "Unauthorized",
    "UnknownEvent",
    "UnknownTopic",
    "error_from_response",
]


class SdkError(Exception):
    """Base class of every error the SDK raises."""


class SidecarUnavailable(SdkError):
    """The sidecar's HTTP API could not be reached (refused, reset, timed out)."""

    def __init__(self, api: str, reason: str) -> None:
        super().__init__(f"sidecar not reachable at {api} ({reason})")
        self.api = api
        self.reason = reason


class InvalidResponse(SdkError):
    """The sidecar answered, but not as docs/http-api.md says it would."""


class ApiError(SdkError):
    """The sidecar refused a request with ``{"error": {"code", "message"}}``."""

    code_name: ClassVar[str] = ""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{message} ({status} {code})" if message else f"{status} {code}")
        self.status = status
        self.code = code
        self.message = message


class BadRequest(ApiError):
    """400: malformed JSON, a missing or invalid field, a bad CID, peer ID or cursor."""

    code_name = "bad_request"


class Unauthorized(ApiError):
    """401: the sidecar wants a bearer token and got none or a wrong one."""

    code_name = "unauthorized"


class NotAllowed(ApiError):
    """403: this node may neither publish nor request to publish on the topic."""

    code_name = "not_allowed"


class NotFound(ApiError):
    """404: the thing named does not exist (or is not fetchable)."""

    code_name = "not_found"


class UnknownTopic(NotFound):
    """404: no topic descriptor with that CID."""

    code_name = "unknown_topic"


class UnknownEvent(NotFound):
    """404: no event descriptor with that CID."""

    code_name = "unknown_event"


class Conflict(ApiError):
    """409: e.g. a CUSTOM parent that is not in this topic."""

    code_name = "conflict"


class PayloadTooLarge(ApiError):
    """413: the body or the payload is over the limit."""

    code_name = "payload_too_large"


class InvalidParent(ApiError):
    """422: a CUSTOM parent that is unknown or cannot be fetched."""

    code_name = "invalid_parent"


class KuboUnavailable(ApiError):
    """503: the sidecar cannot reach its Kubo node's API."""

    code_name = "kubo_unavailable"


class SigningFailed(KuboUnavailable):
    """503: Kubo's ``key/sign`` failed or timed out; the topic or event was not created.

    A :class:`KuboUnavailable`, as the SDK raised it before it had its own class.
    """

    code_name = "signing_failed"


class Timeout(ApiError):
    """504: fetching a descriptor from IPFS took too long."""

    code_name = "timeout"


class NotAcknowledged(Timeout):
    """504: a publish at ``ack`` N got fewer than N holders in time. The event exists
    (:attr:`event`) and stays in the sidecar's outbox, offered again; :attr:`holders`:
    the other nodes that did say they hold it. Retrying with the same idempotency key
    makes no second event."""

    code_name = "not_acknowledged"
    event: str | None = None
    holders: tuple[str, ...] = ()


_CLASSES: dict[str, type[ApiError]] = {
    cls.__name__: cls
    for cls in (
        BadRequest,
        Unauthorized,
        NotAllowed,
        NotFound,
        UnknownTopic,
        UnknownEvent,
        Conflict,
        PayloadTooLarge,
        InvalidParent,
        KuboUnavailable,
        SigningFailed,
        Timeout,
        NotAcknowledged,
    )
}
_BY_CODE: dict[str, type[ApiError]] = {e.code: _CLASSES[e.sdk_class] for e in ERROR_CODES}


def _status_class(status: int) -> type[ApiError]:
    """The class of an unknown code at ``status``: the base of that status's classes."""
    classes = {_BY_CODE[e.code] for e in ERROR_CODES if e.status == status}
    for cls in classes:
        if all(issubclass(other, cls) for other in classes):
            return cls
    return ApiError


_BY_STATUS: dict[int, type[ApiError]] = {e.status: _status_class(e.status) for e in ERROR_CODES}


def error_from_response(status: int, body: bytes) -> ApiError:
    """The typed error for a non-2xx answer (``body`` is the raw response body).

    The contract's ``code`` decides the class; an unknown code or a body that is not
    the contract's error object falls back on the status (plain :class:`ApiError`
    for statuses the contract does not name), so nothing the sidecar says is lost.
    """
    code, message = "", ""
    try:
        doc: Any = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        doc = None
    err = doc.get("error") if isinstance(doc, dict) else None
    if isinstance(err, dict):
        code = str(err.get("code") or "")
        message = str(err.get("message") or "")
    if not message:
        message = body[:500].decode("utf-8", errors="replace").strip()
    cls = _BY_CODE.get(code) or _BY_STATUS.get(status, ApiError)
    error = cls(status, code or cls.code_name or f"http_{status}", message)
    if isinstance(error, NotAcknowledged) and isinstance(err, dict):
        ev, holders = err.get("event"), err.get("holders")
        error.event = ev if isinstance(ev, str) else None
        if isinstance(holders, list):
            error.holders = tuple(str(h) for h in holders)
    return error
