"""Ed25519 signature checks through libsodium (PyNaCl): every hop checks one per event.

Why not ``cryptography`` (OpenSSL 3.0), which makes the signatures: on this project's
2-core machine one check cost 117 µs there and 61 µs in libsodium, and a received
event's check was ~28 % of the sidecar's CPU for it in the micro-benchmark
(``benchmarks/driver_bench.py``). Signing stays with ``cryptography``.

The two agree on every signature an honest signer makes and on every alteration of
one (``tests/test_core_ed25519.py``). libsodium is stricter in two places, both
where the signer itself cheats: it refuses a public key of small order (OpenSSL
takes some) and a signature whose ``R`` is of small order. No honest key or
signature is either. Pure: no I/O, no clock, no global random.
"""

from __future__ import annotations

from nacl.bindings import crypto_sign_open
from nacl.exceptions import CryptoError

__all__ = ["verify"]


def verify(public_key: bytes, signature: bytes, data: bytes) -> bool:
    """Whether ``signature`` (64 bytes) is ``public_key``'s (32 bytes) over ``data``."""
    if len(public_key) != 32 or len(signature) != 64:
        return False
    try:
        crypto_sign_open(signature + data, public_key)
    except CryptoError:
        return False
    return True
