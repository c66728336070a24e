"""Closest-peer routing from Kubo's routing table (PROTOCOL.md §3).

Every ``interval`` the sidecar reads ``stats/dht`` (the local k-buckets, no
network traffic) and ``swarm/peers`` and gives the union to the core
(``node.set_known_peers``). With ``routing_k`` only that many peers per bucket
(common-prefix length with this node) are kept, closest to this node first: a
sparser view, like a real Kademlia table in a large network, which makes trees
deeper in small test clusters. Joins still make progress: a node whose bucket
containing the author is non-empty keeps a peer there, and every such peer is
strictly closer to the author than the node itself. When that bucket is empty
the node would act as root (§6 failover); the driver then adds the author itself
to the known peers (``p2p forward`` reaches it by peer ID).
"""

from __future__ import annotations

from collections.abc import Iterable

from pulsarcast_ipfs.kademlia import InvalidPeerId, bucket_index, peer_position
from pulsarcast_ipfs.kubo import KuboClient

__all__ = ["known_peers", "limit_per_bucket"]


def limit_per_bucket(self_id: str, peers: Iterable[str], k: int | None) -> list[str]:
    """At most ``k`` peers per k-bucket of ``self_id``, closest first (all if ``k`` is None)."""
    me = peer_position(self_id)
    ranked: list[tuple[int, str]] = []
    for p in set(peers):
        if p == self_id:
            continue
        try:
            ranked.append((peer_position(p) ^ me, p))
        except InvalidPeerId:
            continue
    ranked.sort()
    if k is None:
        return [p for _, p in ranked]
    kept: list[str] = []
    per: dict[int, int] = {}
    for d, p in ranked:
        b = bucket_index(me, me ^ d)
        if per.get(b, 0) < k:
            per[b] = per.get(b, 0) + 1
            kept.append(p)
    return kept


async def known_peers(kubo: KuboClient, self_id: str, k: int | None) -> list[str]:
    """The routing-table snapshot plus the connected peers, limited per bucket."""
    table = await kubo.stats_dht()
    connected = await kubo.swarm_peers()
    peers = list(table.peers()) + [p.peer_id for p in connected]
    return limit_per_bucket(self_id, peers, k)
