"""Delegated signing keys: a node's events signed without a Kubo round trip.

Signing every event through Kubo's ``key/sign`` costs two HTTP calls per publish
and makes the publish wait for a (possibly busy) Kubo daemon. Instead the sidecar
makes an Ed25519 key of its own at start, asks Kubo to sign *once* a delegation
statement that binds that key to the node's peer ID until ``expires``, and from then
on signs its own events in memory (docs/security.md "Delegated signing keys").

An event signed that way has ``protocolVersion`` :data:`ONE_SIGNATURE_VERSION`
(2.3.0; 2.2.0 before it, still accepted) and its ``signatures`` map carries the
:class:`Delegation` beside one signature over ``{tree, event}`` (2.2.0: two, the
author's and the publisher's). A verifier checks the delegation against the
publisher's peer ID (once per delegation: cached), that the event was created
before ``expires``, then the signature(s) against the delegated key. Only a
node's *own* events use it (author == publisher): a requester's author signature
still comes from the requester's Kubo.

Pure: no I/O, no clock, no global random (the caller brings the key's seed).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Final

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from . import _dagcbor
from ._ed25519 import verify as ed25519_verify
from ._errors import LocalProtocolError
from ._signing import KUBO_SIGN_PREFIX, verify_signature

__all__ = [
    "DELEGATION_PURPOSE",
    "DelegateKey",
    "Delegation",
    "delegation_statement",
    "verify_delegated",
    "verify_delegation",
]

DELEGATION_PURPOSE: Final = "pulsarcast/event-signing"
"""The ``purpose`` of a delegation statement: a key set no descriptor or author
statement has, so no other signature can be taken for a delegation."""
_KEY_SIZE: Final = 32
_SIGNATURE_SIZE: Final = 64
_MAX_EXPIRES: Final = 2**40


def delegation_statement(*, peer: str, key: bytes, expires: int) -> bytes:
    """What the peer signs (through Kubo ``key/sign``) to delegate to ``key``."""
    return _dagcbor.encode(
        {"purpose": DELEGATION_PURPOSE, "peer": peer, "key": key, "expires": expires}
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Delegation:
    """``{"key": 32 bytes, "expires": int, "signature": 64 bytes}`` inside an event's
    ``signatures``: the publisher's peer key says that ``key`` signs its events
    created before ``expires`` (seconds since the epoch)."""

    key: bytes
    expires: int
    signature: bytes

    def __post_init__(self) -> None:
        if not isinstance(self.key, bytes) or len(self.key) != _KEY_SIZE:
            raise LocalProtocolError(f"delegation.key: expected {_KEY_SIZE} bytes")
        if type(self.expires) is not int or not 0 < self.expires < _MAX_EXPIRES:
            raise LocalProtocolError("delegation.expires: expected seconds since the epoch")
        if not isinstance(self.signature, bytes) or len(self.signature) != _SIGNATURE_SIZE:
            raise LocalProtocolError(f"delegation.signature: expected {_SIGNATURE_SIZE} bytes")

    def statement(self, peer: str) -> bytes:
        return delegation_statement(peer=peer, key=self.key, expires=self.expires)

    def to_ipld(self) -> dict[str, Any]:
        return {"key": self.key, "expires": self.expires, "signature": self.signature}


@functools.lru_cache(maxsize=4096)
def verify_delegation(peer: str, delegation: Delegation) -> bool:
    """Whether ``peer`` (its Kubo key) signed ``delegation`` (memoised: every event
    of a publisher carries the same one)."""
    return verify_signature(peer, delegation.statement(peer), delegation.signature)


def verify_delegated(delegation: Delegation, data: bytes, signature: bytes) -> bool:
    """Whether ``signature`` is the delegated key's over ``data`` (same framing as
    Kubo's ``key/sign``: ``b"libp2p-key signed message:" + data``)."""
    if not isinstance(signature, bytes) or len(signature) != _SIGNATURE_SIZE:
        return False
    return ed25519_verify(delegation.key, signature, KUBO_SIGN_PREFIX + data)


class DelegateKey:
    """A delegated private key with its :class:`Delegation` (the node holds one)."""

    __slots__ = ("_key", "delegation", "public_key")

    def __init__(self, seed: bytes, delegation: Delegation | None = None) -> None:
        if not isinstance(seed, bytes) or len(seed) != _KEY_SIZE:
            raise LocalProtocolError("an Ed25519 seed is 32 bytes")
        self._key = Ed25519PrivateKey.from_private_bytes(seed)
        self.public_key: bytes = self._key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self.delegation = delegation
        if delegation is not None and delegation.key != self.public_key:
            raise LocalProtocolError("the delegation names another key")

    def with_delegation(self, delegation: Delegation) -> DelegateKey:
        """This key with its delegation (the peer's signature over :meth:`statement`)."""
        if delegation.key != self.public_key:
            raise LocalProtocolError("the delegation names another key")
        out = DelegateKey.__new__(DelegateKey)
        out._key = self._key
        out.public_key = self.public_key
        out.delegation = delegation
        return out

    def statement(self, peer: str, expires: int) -> bytes:
        """What ``peer`` signs to delegate to this key until ``expires``."""
        return delegation_statement(peer=peer, key=self.public_key, expires=expires)

    def sign(self, data: bytes) -> bytes:
        return self._key.sign(KUBO_SIGN_PREFIX + data)
