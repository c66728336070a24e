"""Kademlia helpers over a Kubo routing-table snapshot (docs/protocol.md §3).

"The 'closest known peer' to X is computed by the sidecar from ``stats/dht``
plus currently connected peers, and includes the node itself in the ranking."
The keyspace arithmetic itself lives in :mod:`pulsarcast_ipfs.kademlia`.
"""

from __future__ import annotations

from collections.abc import Iterable

from pulsarcast_ipfs.core import compute_cid
from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.kademlia import closest_peers, key_position, peer_position
from pulsarcast_ipfs.kubo._types import RoutingTableEntry, RoutingTableSnapshot

__all__ = ["closest_known_peers", "dag_cbor_cid", "parse_stats_dht"]


def dag_cbor_cid(data: bytes) -> CID:
    """The CIDv1 (dag-cbor, sha2-256) of exact block bytes (docs/protocol.md §3).

    The core's codec builds it without ``multiformats``' run-time type validation
    (~100 µs a call, once per block stored, in a profile of the sidecar);
    ``tests/test_kubo_client.py`` checks it against ``multiformats``."""
    return compute_cid(data)


def parse_stats_dht(docs: Iterable[object]) -> RoutingTableSnapshot:
    """Parse the ``{"Name", "Buckets": [{"Peers": [...]}, ...]}`` documents of ``stats/dht``."""
    entries: list[RoutingTableEntry] = []
    for doc in docs:
        if not isinstance(doc, dict):
            raise ValueError(f"stats/dht: expected an object, got {doc!r}")
        name = str(doc.get("Name", ""))
        for index, bucket in enumerate(doc.get("Buckets") or []):
            if not isinstance(bucket, dict):
                raise ValueError(f"stats/dht: bucket {index} of {name} is not an object")
            for peer in bucket.get("Peers") or []:
                if not isinstance(peer, dict) or not isinstance(peer.get("ID"), str):
                    raise ValueError(f"stats/dht: malformed peer in bucket {index} of {name}")
                entries.append(
                    RoutingTableEntry(
                        dht=name,
                        bucket=index,
                        peer_id=peer["ID"],
                        connected=bool(peer.get("Connected", False)),
                        agent_version=str(peer.get("AgentVersion") or ""),
                        last_useful_at=str(peer.get("LastUsefulAt") or ""),
                        last_queried_at=str(peer.get("LastQueriedAt") or ""),
                    )
                )
    return RoutingTableSnapshot(entries=tuple(entries))


def closest_known_peers(
    target: int | bytes | str,
    snapshot: RoutingTableSnapshot,
    *,
    self_id: str | None = None,
    connected: Iterable[str] = (),
    dht: str | None = None,
    count: int | None = None,
) -> list[str]:
    """Known peers nearest to ``target`` by XOR distance, nearest first.

    ``target`` is a keyspace position (int), raw key bytes, or a peer ID (text).
    The candidates are the snapshot's peers (of one DHT if ``dht`` is given), the
    ``connected`` peers and, when ``self_id`` is given, the node itself.
    """
    if isinstance(target, str):
        position = peer_position(target)
    elif isinstance(target, bytes):
        position = key_position(target)
    else:
        position = target
    candidates = list(snapshot.peers(dht))
    candidates.extend(connected)
    if self_id is not None:
        candidates.append(self_id)
    return closest_peers(position, candidates, count=count)
