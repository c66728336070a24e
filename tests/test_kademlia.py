from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pulsarcast_ipfs import kademlia

# A real Kubo ed25519 peer ID and its multihash (identity of the protobuf key).
PEER = "12D3KooWD3eckifWpRn9wQpMG9R9hX3sD158z7EqHWmweQAJU5SA"


def test_peer_id_round_trip() -> None:
    raw = kademlia.peer_id_bytes(PEER)
    assert raw[:2] == b"\x00\x24"
    assert kademlia.peer_id_from_bytes(raw) == PEER
    assert kademlia.validate_peer_id(PEER) == PEER


def test_peer_id_cid_form_is_accepted() -> None:
    from multiformats import CID

    raw = kademlia.peer_id_bytes(PEER)
    cid = CID("base32", 1, "libp2p-key", raw)
    assert kademlia.validate_peer_id(str(cid)) == PEER


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "Qm",
        "12D3KooW0OIl",
        "bafyreigafbvsiy7kbqltt4qbq2rdhxkuhmw2obrpqolt3tsjtbvjv557wq",
        "x" * 300,
    ],
)
def test_invalid_peer_ids_are_refused(bad: str) -> None:
    with pytest.raises(kademlia.InvalidPeerId):
        kademlia.peer_id_bytes(bad)
    for _ in range(2):  # memoised: refused the second time too
        with pytest.raises(kademlia.InvalidPeerId):
            kademlia.validate_peer_id(bad)


@pytest.mark.parametrize("bad", [None, 12, b"Qm", ["Qm"], {"a": 1}])
def test_a_peer_id_that_is_not_text_is_refused_as_one(bad: object) -> None:
    with pytest.raises(kademlia.InvalidPeerId, match="expected a non-empty string"):
        kademlia.validate_peer_id(bad)  # type: ignore[arg-type]


def test_position_is_sha256_of_multihash() -> None:
    raw = kademlia.peer_id_bytes(PEER)
    assert kademlia.peer_position(PEER) == int.from_bytes(hashlib.sha256(raw).digest(), "big")


def _peer(seed: int) -> str:
    key = hashlib.sha256(seed.to_bytes(8, "big")).digest()
    return kademlia.peer_id_from_bytes(b"\x00\x24\x08\x01\x12\x20" + key)


def test_closest_peers_orders_by_xor_distance() -> None:
    peers = [_peer(i) for i in range(50)]
    target = kademlia.key_position(b"some key")
    ranked = kademlia.closest_peers(target, peers)
    dists = [kademlia.peer_position(p) ^ target for p in ranked]
    assert dists == sorted(dists)
    assert kademlia.closest_peers(target, peers + peers, count=3) == ranked[:3]


@given(st.integers(0, 2**256 - 1), st.integers(0, 2**256 - 1))
def test_bucket_index_is_common_prefix_length(a: int, b: int) -> None:
    idx = kademlia.bucket_index(a, b)
    if a == b:
        assert idx == 256
    else:
        assert format(a, "0256b")[:idx] == format(b, "0256b")[:idx]
        assert format(a, "0256b")[idx] != format(b, "0256b")[idx]


@given(st.sampled_from(["", "Qm", "1", "b", "z", "bafz", "12D3KooW"]), st.text(max_size=60))
def test_any_text_is_a_peer_id_or_invalid_peer_id(prefix: str, text: str) -> None:
    """Peer IDs come from the wire and the API: garbage raises ``InvalidPeerId`` and
    nothing else (the multibase and CID decoders are caught by their own error types,
    so a bug of ours would escape as itself)."""
    try:
        kademlia.validate_peer_id(prefix + text)
    except kademlia.InvalidPeerId:
        pass
