"""The core's Ed25519 check (libsodium, ``core._ed25519``) against ``cryptography``'s
(OpenSSL), which signs: the same answer on every honest signature and on every
alteration of one; stricter only where the signer cheats (small-order keys)."""

from __future__ import annotations

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from hypothesis import given, settings
from hypothesis import strategies as st

from pulsarcast_ipfs.core._ed25519 import verify

_L = 2**252 + 27742317777372353535851937790883648493
"""The order of the Ed25519 base point: a signature's S must be below it."""


def _openssl(public_key: bytes, signature: bytes, data: bytes) -> bool:
    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(signature, data)
    except (InvalidSignature, ValueError):
        return False
    return True


def _key(seed: bytes) -> tuple[Ed25519PrivateKey, bytes]:
    key = Ed25519PrivateKey.from_private_bytes(seed)
    return key, key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


@settings(max_examples=300, deadline=None)
@given(
    seed=st.binary(min_size=32, max_size=32),
    other=st.binary(min_size=32, max_size=32),
    data=st.binary(max_size=600),
    flip=st.integers(0, 64 * 8 - 1),
    extra=st.binary(min_size=1, max_size=8),
)
def test_the_same_answer_as_openssl_on_honest_and_altered_signatures(
    seed: bytes, other: bytes, data: bytes, flip: int, extra: bytes
) -> None:
    key, public = _key(seed)
    _, other_public = _key(other)
    signature = key.sign(data)
    bad = bytearray(signature)
    bad[flip // 8] ^= 1 << (flip % 8)
    cases = [
        (public, signature, data),  # honest
        (public, bytes(bad), data),  # one bit of the signature
        (public, signature, data + extra),  # the data
        (public, signature, data[:-1]),
        (other_public, signature, data),  # another key
        (public, signature[:63], data),  # lengths
        (public[:31], signature, data),
    ]
    for case in cases:
        assert verify(*case) == _openssl(*case), case
    assert verify(public, signature, data)
    assert not verify(public, bytes(bad), data)


def test_a_non_canonical_s_is_refused_by_both() -> None:
    key, public = _key(bytes(range(32)))
    signature = key.sign(b"event")
    s = int.from_bytes(signature[32:], "little") + _L  # the same point, S not reduced
    forged = signature[:32] + s.to_bytes(32, "little")
    assert _openssl(public, forged, b"event") is False
    assert verify(public, forged, b"event") is False


def test_a_small_order_key_is_refused() -> None:
    """The identity point as a public key with R = identity, S = 0 "signs" anything for
    a check of [S]B = R + [k]A (OpenSSL 3.0 takes it); libsodium refuses the key."""
    identity = (1).to_bytes(32, "little")
    signature = identity + bytes(32)
    assert verify(identity, signature, b"anything") is False
