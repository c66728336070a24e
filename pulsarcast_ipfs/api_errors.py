"""The error codes of the sidecar's HTTP API: one table, as data (docs/http-api.md "Errors").

Every error answer is ``{"error": {"code", "message"}}`` with an HTTP status. This
table is the one place where the pairs ``(status, code)`` are written, with the
name of the SDK exception each becomes and when it is answered. It is read by

- the sidecar (``sidecar/_api.py``), which maps its refusals and the core's typed
  errors to rows of this table by exception type, never by message text;
- the OpenAPI document (``sidecar/_openapi.py``), whose error responses are
  generated from it;
- the SDK (``pulsarcast_ipfs.sdk._errors``), which turns a code into the class
  named here (and an unknown code into its status's class);
- docs/http-api.md, whose error table a test checks against
  :func:`markdown_table` (``python -m pulsarcast_ipfs.api_errors`` prints it).

It imports nothing of the project, so that the SDK does not depend on the sidecar
or the core.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "BAD_REQUEST",
    "CONFLICT",
    "ERROR_CODES",
    "INVALID_PARENT",
    "KUBO_UNAVAILABLE",
    "METHOD_NOT_ALLOWED",
    "NOT_ACKNOWLEDGED",
    "NOT_ALLOWED",
    "NOT_FOUND",
    "PAYLOAD_TOO_LARGE",
    "SIGNING_FAILED",
    "TIMEOUT",
    "UNAUTHORIZED",
    "UNKNOWN_EVENT",
    "UNKNOWN_TOPIC",
    "ErrorCode",
    "markdown_table",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorCode:
    """One row of the table: an HTTP ``status`` with the contract's ``code``."""

    status: int
    code: str
    sdk_class: str
    """Name of the exception class in :mod:`pulsarcast_ipfs.sdk` it becomes."""
    meaning: str
    """When the sidecar answers it (the "when" column of docs/http-api.md)."""

    def __post_init__(self) -> None:
        if not 400 <= self.status <= 599:
            raise ValueError(f"{self.code}: {self.status} is not an error status")
        if not self.code or not self.code.replace("_", "").isalpha() or not self.code.islower():
            raise ValueError(f"error code {self.code!r} is not snake_case")
        if not self.sdk_class.isidentifier() or not self.meaning or "|" in self.meaning:
            raise ValueError(f"{self.code}: bad SDK class name or meaning")


BAD_REQUEST = ErrorCode(
    status=400,
    code="bad_request",
    sdk_class="BadRequest",
    meaning="malformed JSON, missing/invalid field, bad CID, bad peer ID, bad cursor",
)
UNAUTHORIZED = ErrorCode(
    status=401,
    code="unauthorized",
    sdk_class="Unauthorized",
    meaning="token required and missing/wrong",
)
NOT_ALLOWED = ErrorCode(
    status=403,
    code="not_allowed",
    sdk_class="NotAllowed",
    meaning="this node may neither publish nor request to publish on the topic",
)
UNKNOWN_TOPIC = ErrorCode(
    status=404,
    code="unknown_topic",
    sdk_class="UnknownTopic",
    meaning="no topic descriptor with that CID (or the topic is not known to this node)",
)
UNKNOWN_EVENT = ErrorCode(
    status=404,
    code="unknown_event",
    sdk_class="UnknownEvent",
    meaning="no event descriptor with that CID",
)
NOT_FOUND = ErrorCode(
    status=404,
    code="not_found",
    sdk_class="NotFound",
    meaning="no such endpoint, a block that cannot be found, or a consumer that is closed"
    " (or expired)",
)
METHOD_NOT_ALLOWED = ErrorCode(
    status=405,
    code="bad_request",
    sdk_class="BadRequest",
    meaning="the path does not take that method",
)
CONFLICT = ErrorCode(
    status=409,
    code="conflict",
    sdk_class="Conflict",
    meaning="CUSTOM parent is an event of another topic; a consumer name that follows"
    " another topic",
)
PAYLOAD_TOO_LARGE = ErrorCode(
    status=413,
    code="payload_too_large",
    sdk_class="PayloadTooLarge",
    meaning="an event's payload over 512 KiB (524288 bytes, core `MAX_PAYLOAD_SIZE`), or a "
    "request body over `max_body` (2 MiB). A publish says `payload over the limit of "
    "524288 bytes (512 KiB)` in both cases",
)
INVALID_PARENT = ErrorCode(
    status=422,
    code="invalid_parent",
    sdk_class="InvalidParent",
    meaning="CUSTOM parent unknown / not fetchable",
)
KUBO_UNAVAILABLE = ErrorCode(
    status=503,
    code="kubo_unavailable",
    sdk_class="KuboUnavailable",
    meaning="Kubo's API cannot be reached (or failed)",
)
SIGNING_FAILED = ErrorCode(
    status=503,
    code="signing_failed",
    sdk_class="SigningFailed",
    meaning="Kubo's `key/sign` failed or timed out: the topic or event was not created",
)
TIMEOUT = ErrorCode(
    status=504,
    code="timeout",
    sdk_class="Timeout",
    meaning="fetching a descriptor from IPFS (or resolving a topic) took too long",
)
NOT_ACKNOWLEDGED = ErrorCode(
    status=504,
    code="not_acknowledged",
    sdk_class="NotAcknowledged",
    meaning="a publish at `ack` N: fewer than N other nodes said they hold the event within "
    "`ack_timeout`. The event exists (`event`), the holders that answered are listed "
    "(`holders`); it stays in the outbox and is offered again",
)

ERROR_CODES: tuple[ErrorCode, ...] = (
    BAD_REQUEST,
    UNAUTHORIZED,
    NOT_ALLOWED,
    UNKNOWN_TOPIC,
    UNKNOWN_EVENT,
    NOT_FOUND,
    METHOD_NOT_ALLOWED,
    CONFLICT,
    PAYLOAD_TOO_LARGE,
    INVALID_PARENT,
    KUBO_UNAVAILABLE,
    SIGNING_FAILED,
    TIMEOUT,
    NOT_ACKNOWLEDGED,
)
"""Every error answer of the API, by status."""

_HEADER = "| status | code | SDK exception | when |\n|---|---|---|---|\n"


def markdown_table() -> str:
    """The error table of docs/http-api.md, as it must read there."""
    rows = (f"| {e.status} | `{e.code}` | `{e.sdk_class}` | {e.meaning} |\n" for e in ERROR_CODES)
    return _HEADER + "".join(rows)


if __name__ == "__main__":
    print(markdown_table(), end="")
