"""Typed errors of the Kubo RPC client, and the one place that produces them.

Hierarchy::

    KuboError                         anything that went wrong talking to Kubo
    ├── KuboAPIError                  Kubo answered with an error ({"Message","Code"} or text)
    │   ├── KuboNotFound              the thing asked for does not exist / was not found
    │   ├── KuboInvalidArgument       Kubo rejected an argument (bad CID, bad peer ID, ...)
    │   ├── KuboFeatureDisabled       the endpoint needs a feature this daemon has off
    │   │   ├── KuboStreamMountingDisabled   Experimental.Libp2pStreamMounting=false
    │   │   └── KuboPubsubDisabled           Pubsub.Enabled=false
    │   └── KuboProtocolError         Kubo's answer could not be understood
    ├── BlockCIDMismatch              Kubo stored a block under a CID other than ours
    ├── KuboTimeout                   no answer within the configured timeout
    └── KuboUnavailable               cannot reach the daemon (refused, reset, down)

:func:`map_transport_errors` translates httpx's exceptions, :func:`transport_error`
words them (for httpx and for the lean HTTP path of :mod:`._http` alike), and
:func:`error_from_response` translates Kubo's error bodies; nothing else in the
client raises from httpx, so callers never see a traceback from it.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator

import httpx

__all__ = [
    "BlockCIDMismatch",
    "KuboAPIError",
    "KuboError",
    "KuboFeatureDisabled",
    "KuboInvalidArgument",
    "KuboNotFound",
    "KuboProtocolError",
    "KuboPubsubDisabled",
    "KuboStreamMountingDisabled",
    "KuboTimeout",
    "KuboUnavailable",
    "error_from_response",
    "map_transport_errors",
    "transport_error",
]


class KuboError(Exception):
    """Base class of every error raised by :class:`~pulsarcast_ipfs.kubo.KuboClient`."""

    def __init__(self, message: str, *, endpoint: str = "") -> None:
        super().__init__(f"{endpoint}: {message}" if endpoint else message)
        self.message = message
        self.endpoint = endpoint


class KuboAPIError(KuboError):
    """Kubo answered the call with an error.

    ``code`` is Kubo's ``Code`` field (0 = generic, 1 = client error, ...),
    ``status`` the HTTP status.
    """

    def __init__(self, message: str, *, endpoint: str = "", code: int = 0, status: int = 0) -> None:
        super().__init__(message, endpoint=endpoint)
        self.code = code
        self.status = status


class KuboNotFound(KuboAPIError):
    """The block, peer, key or listener asked for was not found."""


class KuboInvalidArgument(KuboAPIError):
    """Kubo rejected an argument: a malformed CID, peer ID, multiaddr, topic, ..."""


class KuboFeatureDisabled(KuboAPIError):
    """The endpoint needs a Kubo feature that this daemon has disabled."""


class KuboStreamMountingDisabled(KuboFeatureDisabled):
    """``p2p`` calls need ``Experimental.Libp2pStreamMounting=true`` (docs/protocol.md §2)."""


class KuboPubsubDisabled(KuboFeatureDisabled):
    """``pubsub`` calls need ``Pubsub.Enabled=true``."""


class KuboProtocolError(KuboAPIError):
    """Kubo's answer was not what the endpoint documents (unparseable JSON, missing field)."""


class BlockCIDMismatch(KuboError):
    """``block/put`` returned a CID different from the one computed locally from the bytes."""

    def __init__(self, *, expected: str, got: str) -> None:
        super().__init__(
            f"Kubo stored the block as {got}, expected {expected}", endpoint="block/put"
        )
        self.expected = expected
        self.got = got


class KuboTimeout(KuboError):
    """Kubo did not answer within the client's timeout."""


class KuboUnavailable(KuboError):
    """The daemon cannot be reached: connection refused or reset, daemon down."""


# Recognisable substrings of Kubo's messages, checked in order (lower case).
_KINDS: tuple[tuple[str, type[KuboAPIError]], ...] = (
    ("libp2p stream mounting not enabled", KuboStreamMountingDisabled),
    ("experimental pubsub feature not enabled", KuboPubsubDisabled),
    ("pubsub is disabled", KuboPubsubDisabled),
    ("not found", KuboNotFound),
    ("no such", KuboNotFound),
    ("no key by the given name", KuboNotFound),
    ("could not find", KuboNotFound),
    ("failed to find", KuboNotFound),
    ("no link named", KuboNotFound),
    ("not pinned", KuboNotFound),
    ("invalid", KuboInvalidArgument),
    ("failed to parse", KuboInvalidArgument),
    ("failed to decode", KuboInvalidArgument),
    ("malformed", KuboInvalidArgument),
    ("is required", KuboInvalidArgument),
    ("unknown", KuboInvalidArgument),
    ("illegal base", KuboInvalidArgument),
    ("selected encoding not supported", KuboInvalidArgument),
    ("could not parse", KuboInvalidArgument),
    ("path does not have enough components", KuboInvalidArgument),
    ("incorrect", KuboInvalidArgument),
)


def classify(message: str) -> type[KuboAPIError]:
    """The most specific :class:`KuboAPIError` subclass for one of Kubo's messages."""
    low = message.lower()
    for needle, kind in _KINDS:
        if needle in low:
            return kind
    return KuboAPIError


def error_from_response(endpoint: str, status: int, body: bytes) -> KuboError:
    """Turn an error answer of Kubo into a typed error.

    Kubo writes errors as ``{"Message": str, "Code": int, "Type": "error"}``; some
    (argument parsing, unknown endpoints) as plain text.
    """
    text = body.decode("utf-8", "replace").strip()
    message, code = text, 0
    try:
        parsed = json.loads(text.splitlines()[-1]) if text else None
    except (json.JSONDecodeError, IndexError):
        parsed = None
    if isinstance(parsed, dict) and isinstance(parsed.get("Message"), str):
        message = parsed["Message"]
        raw_code = parsed.get("Code", 0)
        code = raw_code if isinstance(raw_code, int) else 0
    if not message:
        message = f"HTTP {status} with an empty body"
    if "context deadline exceeded" in message:
        # The server-side `timeout` option of a call ran out.
        return KuboTimeout(message, endpoint=endpoint)
    if status == 404 and "404 page not found" in message:
        return KuboAPIError(
            "endpoint not available in this Kubo", endpoint=endpoint, code=code, status=status
        )
    return classify(message)(message, endpoint=endpoint, code=code, status=status)


# httpx's names of the failures that mean the daemon cannot be reached at all.
_UNREACHABLE = frozenset({"ConnectError", "RemoteProtocolError", "ReadError"})


def transport_error(kind: str, detail: str = "", *, endpoint: str) -> KuboTimeout | KuboUnavailable:
    """The error for a failed HTTP exchange, ``kind`` named as httpx names its
    exceptions (``ConnectTimeout``, ``ReadTimeout``, ``ConnectError``, ``ReadError``,
    ``RemoteProtocolError``, ``WriteError``, ...), so that both HTTP paths raise the
    same types with the same words."""
    if kind.endswith("Timeout") or kind == "TimeoutException":
        return KuboTimeout(f"no answer in time ({kind})", endpoint=endpoint)
    if kind in _UNREACHABLE:
        return KuboUnavailable(
            f"cannot reach the Kubo daemon ({kind}: {detail})", endpoint=endpoint
        )
    return KuboUnavailable(f"transport error talking to Kubo ({kind}: {detail})", endpoint=endpoint)


@contextlib.contextmanager
def map_transport_errors(endpoint: str) -> Iterator[None]:
    """Translate httpx's exceptions raised inside the block into :class:`KuboError`\\ s."""
    try:
        yield
    except httpx.TransportError as exc:
        raise transport_error(type(exc).__name__, str(exc), endpoint=endpoint) from exc
