"""Ed25519 signatures checked against a peer ID (docs/security.md "Signatures").

Groundwork for ``protocolVersion`` 1.1.0; the node does not require signatures yet.

A libp2p Ed25519 peer ID (``12D3KooW…``) is an *identity* multihash of the protobuf
``PublicKey {Type = Ed25519 (1), Data = 32 bytes}``, so a verifier needs nothing but
the peer ID. Kubo's ``key/sign`` (the sidecar signs through it and never sees the
private key) signs ``b"libp2p-key signed message:" + data``; :func:`verify_signature` checks
exactly that, and :class:`Ed25519Signer` produces the same signatures from a
private key (the simulator's nodes, tests). Pure: no I/O, no clock, no global random.
"""

from __future__ import annotations

import functools
from typing import Final

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from pulsarcast_ipfs.kademlia import InvalidPeerId, peer_id_bytes, peer_id_from_bytes

from ._ed25519 import verify as ed25519_verify
from ._errors import LocalProtocolError, RemoteProtocolError

__all__ = [
    "KUBO_SIGN_PREFIX",
    "Ed25519Signer",
    "SignatureError",
    "peer_public_key",
    "verify_signature",
]

KUBO_SIGN_PREFIX: Final = b"libp2p-key signed message:"
"""What Kubo's ``key/sign`` puts before the data it signs."""

# identity multihash (0x00), length 36, protobuf: field 1 varint 1 (Ed25519), field 2 len 32
_ED25519_PEER_PREFIX: Final = bytes((0x00, 0x24, 0x08, 0x01, 0x12, 0x20))


class SignatureError(RemoteProtocolError):
    """A peer ID that carries no Ed25519 key, or a malformed signature."""


def peer_public_key(peer: str) -> bytes:
    """The 32-byte Ed25519 public key inside an identity-multihash peer ID."""
    try:
        raw = peer_id_bytes(peer)
    except InvalidPeerId as exc:
        raise SignatureError(str(exc)) from exc
    if len(raw) != 38 or not raw.startswith(_ED25519_PEER_PREFIX):
        raise SignatureError(f"{peer} is not an Ed25519 peer ID (no inline public key)")
    return raw[6:]


@functools.lru_cache(maxsize=4096)
def _public_key(peer: str) -> bytes:
    """The key of ``peer`` (memoised: every hop verifies the same few peers)."""
    return peer_public_key(peer)


def verify_signature(peer: str, data: bytes, signature: bytes) -> bool:
    """Whether ``signature`` is ``peer``'s Kubo ``key/sign`` signature over ``data``."""
    if not isinstance(signature, bytes) or len(signature) != 64:
        return False
    try:
        key = _public_key(peer)
    except (SignatureError, ValueError):
        return False
    return ed25519_verify(key, signature, KUBO_SIGN_PREFIX + data)


class Ed25519Signer:
    """Signs like Kubo's ``key/sign`` with a private key held in memory (simulator, tests)."""

    __slots__ = ("_key", "peer_id")

    def __init__(self, seed: bytes) -> None:
        if not isinstance(seed, bytes) or len(seed) != 32:
            raise LocalProtocolError("an Ed25519 seed is 32 bytes")
        self._key = Ed25519PrivateKey.from_private_bytes(seed)
        pub = self._key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self.peer_id = peer_id_from_bytes(_ED25519_PEER_PREFIX + pub)

    def sign(self, data: bytes) -> bytes:
        return self._key.sign(KUBO_SIGN_PREFIX + data)
