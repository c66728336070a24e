"""Signature groundwork (docs/security.md "Signatures"): an Ed25519 public key read
from a peer ID verifies what a real Kubo signs with ``key/sign`` (the exact message
format, prefix included), and refuses tampered data, other peers and bad input."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from pulsarcast_ipfs.cluster import ClusterConfig, LocalCluster
from pulsarcast_ipfs.core import (
    KUBO_SIGN_PREFIX,
    Ed25519Signer,
    SignatureError,
    peer_public_key,
    verify_signature,
)
from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.kademlia import peer_id_bytes, peer_id_from_bytes
from pulsarcast_ipfs.kubo import KuboClient, KuboConfig

DATA = b"\xa1dnamefnews"  # any bytes: the canonical encoding of a descriptor, later


def test_pure_signer_round_trip_and_refusals() -> None:
    a, b = Ed25519Signer(b"\x01" * 32), Ed25519Signer(b"\x02" * 32)
    assert a.peer_id.startswith("12D3KooW") and len(peer_public_key(a.peer_id)) == 32
    sig = a.sign(DATA)
    assert verify_signature(a.peer_id, DATA, sig)
    assert not verify_signature(a.peer_id, DATA + b"x", sig)  # tampered
    assert not verify_signature(b.peer_id, DATA, sig)  # another peer
    assert not verify_signature(a.peer_id, DATA, sig[:-1] + bytes((sig[-1] ^ 1,)))
    assert not verify_signature(a.peer_id, DATA, sig[:63])
    assert not verify_signature("nope", DATA, sig)
    rsa_style = peer_id_from_bytes(b"\x12\x20" + bytes(range(32)))  # Qm…: sha2-256, no key
    with pytest.raises(SignatureError):
        peer_public_key(rsa_style)
    with pytest.raises(SignatureError):
        peer_public_key("not a peer id")


@pytest.fixture(scope="module")
async def kubo(anyio_backend: str) -> AsyncIterator[tuple[KuboClient, str]]:
    async with (
        LocalCluster(config=ClusterConfig(nodes=1)) as cluster,
        KuboClient(config=KuboConfig(base_url=cluster[0].api_url)) as client,
    ):
        yield client, cluster[0].peer_id


@pytest.mark.kubo
@pytest.mark.anyio
async def test_kubo_key_sign_verifies_from_the_peer_id(kubo: tuple[KuboClient, str]) -> None:
    client, peer = kubo
    signed = await client.key_sign(DATA)
    assert CID.decode(signed.key_id).digest == peer_id_bytes(peer)  # libp2p-key CID of self
    assert verify_signature(peer, DATA, signed.signature)
    assert not verify_signature(peer, DATA[:-1], signed.signature)
    assert not verify_signature(Ed25519Signer(b"\x03" * 32).peer_id, DATA, signed.signature)
    # The prefix is part of what Kubo signs: a bare Ed25519 check over DATA fails.
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    key = Ed25519PublicKey.from_public_bytes(peer_public_key(peer))
    key.verify(signed.signature, KUBO_SIGN_PREFIX + DATA)
    with pytest.raises(InvalidSignature):
        key.verify(signed.signature, DATA)
    # And Kubo accepts what the pure signer would produce for its own key format.
    assert await client.key_verify(DATA, signed.signature)


def test_sidecar_requires_signatures_unless_told_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    from sidecar.__main__ import config_from_args

    monkeypatch.delenv("PULSARCAST_REQUIRE_SIGNATURES", raising=False)
    assert config_from_args([]).require_signatures is True
    assert config_from_args(["--no-require-signatures"]).require_signatures is False
    monkeypatch.setenv("PULSARCAST_REQUIRE_SIGNATURES", "false")
    assert config_from_args([]).require_signatures is False
    assert config_from_args(["--require-signatures"]).require_signatures is True  # flags win
