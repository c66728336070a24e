"""Peer IDs and the Kademlia keyspace (docs/protocol.md §3).

Pure helpers shared by the protocol core, the simulator and the Kubo client.

- A peer ID's text form (``12D3KooW…`` / ``Qm…``) is the base58btc encoding of
  its multihash; the CIDv1 ``libp2p-key`` form (``bafz…``/``k51…``) is accepted too.
- A key's position in the keyspace is ``sha256(key bytes)``; for a peer that is
  ``sha256(multihash bytes of the peer ID)``, exactly as Kubo's k-buckets use it.
  The distance between two positions is their XOR read as a big-endian integer.
- "Closest known peers to X" ranks a routing-table snapshot by that distance;
  callers that want the node itself in the ranking include it in the snapshot.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable

from multiformats import CID, multibase

__all__ = [
    "InvalidPeerId",
    "bucket_index",
    "closest_peers",
    "distance",
    "key_position",
    "peer_id_bytes",
    "peer_id_from_bytes",
    "peer_position",
    "validate_peer_id",
]

_LIBP2P_KEY = 0x72


class InvalidPeerId(ValueError):
    """A string is not a valid libp2p peer ID."""


def _check_multihash(raw: bytes, text: str) -> None:
    # A multihash is <varint code><varint length><digest>; peer IDs use
    # identity (0x00, inlined public key) or sha2-256 (0x12, 32 bytes).
    if len(raw) < 2:
        raise InvalidPeerId(f"invalid peer ID {text!r}: too short")
    code, length = raw[0], raw[1]
    if code == 0x00:
        if length != len(raw) - 2 or length == 0:
            raise InvalidPeerId(f"invalid peer ID {text!r}: bad identity multihash length")
    elif code == 0x12:
        if length != 32 or len(raw) != 34:
            raise InvalidPeerId(f"invalid peer ID {text!r}: bad sha2-256 multihash length")
    else:
        raise InvalidPeerId(f"invalid peer ID {text!r}: unsupported multihash code {code:#x}")


def peer_id_bytes(peer_id: str) -> bytes:
    """The multihash bytes of a peer ID given in text form."""
    if not isinstance(peer_id, str) or not peer_id:
        raise InvalidPeerId(f"invalid peer ID {peer_id!r}: expected a non-empty string")
    if len(peer_id) > 200:
        raise InvalidPeerId("invalid peer ID: longer than 200 characters")
    if peer_id.startswith(("Qm", "1")):
        try:
            raw = bytes(multibase.decode("z" + peer_id))
        except (ValueError, LookupError) as exc:  # what multibase raises on bad text
            raise InvalidPeerId(f"invalid peer ID {peer_id!r}: not base58btc") from exc
    else:
        try:
            cid = CID.decode(peer_id)
        except (ValueError, LookupError) as exc:  # multiformats' errors (and an IndexError)
            raise InvalidPeerId(
                f"invalid peer ID {peer_id!r}: neither base58btc nor a CID"
            ) from exc
        if cid.codec.code != _LIBP2P_KEY:
            raise InvalidPeerId(f"invalid peer ID {peer_id!r}: CID codec is not libp2p-key")
        raw = bytes(cid.digest)
    _check_multihash(raw, peer_id)
    return raw


def peer_id_from_bytes(raw: bytes) -> str:
    """The canonical text form (base58btc) of a peer ID's multihash bytes."""
    _check_multihash(raw, raw.hex())
    return str(multibase.encode(raw, "base58btc"))[1:]


def validate_peer_id(peer_id: str) -> str:
    """Return the canonical base58btc form of ``peer_id`` or raise :class:`InvalidPeerId`.

    Memoised (a bounded LRU of the valid ones): every descriptor and MEMBERS list names
    peers, and multibase's validated base58 codec was 6 % of the sidecars' CPU while
    20 of them subscribed (py-spy, 20 nodes, 256 subscriptions)."""
    if not isinstance(peer_id, str):
        raise InvalidPeerId(f"invalid peer ID {peer_id!r}: expected a non-empty string")
    return _validate_peer_id(peer_id)


@functools.lru_cache(maxsize=65536)
def _validate_peer_id(peer_id: str) -> str:
    return peer_id_from_bytes(peer_id_bytes(peer_id))


def key_position(key: bytes) -> int:
    """Position of arbitrary key bytes in the keyspace: sha256, as an integer."""
    return int.from_bytes(hashlib.sha256(key).digest(), "big")


@functools.lru_cache(maxsize=65536)
def peer_position(peer_id: str) -> int:
    """Position of a peer in the keyspace: sha256 of its multihash bytes (memoised)."""
    return key_position(peer_id_bytes(peer_id))


def distance(a: int, b: int) -> int:
    """XOR distance between two keyspace positions."""
    return a ^ b


def bucket_index(a: int, b: int) -> int:
    """Index of the k-bucket of ``b`` in ``a``'s table: the common-prefix length (0-255).

    Equal positions give 256.
    """
    d = a ^ b
    return 256 - d.bit_length()


def closest_peers(target: int, peers: Iterable[str], *, count: int | None = None) -> list[str]:
    """Peers sorted by XOR distance of their position to ``target`` (ties by ID), nearest first."""
    ranked = sorted({p: None for p in peers}, key=lambda p: (peer_position(p) ^ target, p))
    return ranked if count is None else ranked[:count]
