"""Closest-peer routing from Kubo's routing table (docs/protocol.md §3).

The sidecar gives the core the union of Kubo's routing table (``stats/dht``, the
local k-buckets, no network traffic) and its connected peers (``swarm/peers``)
(``node.set_known_peers``). With ``routing_k`` only that many peers per bucket
(common-prefix length with this node) are kept, closest to this node first: a
sparser view, like a real Kademlia table in a large network, which makes trees
deeper in small test clusters. Joins still make progress: a node whose bucket
containing the author is non-empty keeps a peer there, and every such peer is
strictly closer to the author than the node itself. When that bucket is empty
the node would act as root (§6 failover); the driver then adds the author itself
to the known peers (``p2p forward`` reaches it by peer ID).

:class:`RoutingView` keeps that union up to date cheaply: ``swarm/peers``
every routing interval, ``stats/dht`` only every :data:`TABLE_INTERVAL`. Kubo adds a
peer to its table when connected to it, so a new peer shows in ``swarm/peers``
first; a peer that went away stays in Kubo's table for minutes (measured on Kubo
0.43: still there 90 s after its daemon was killed), so an older table copy drops
nobody sooner. The per-bucket limit is computed again only when the union changed.

The same ``swarm/peers`` read gives each connected peer's address: its colocation
key (``colocation_key``: the /24 or /64 of a public IP; none for loopback and
private networks) goes to the core with ``node.set_peer_subnets``, which bounds what
one network may take of a tree (docs/protocol-notes.md "Sybil joins").
:attr:`RoutingView.subnets` is a new mapping whenever a key changed.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from typing import Final

from pulsarcast_ipfs.core import cid_from_str, colocation_key
from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.kademlia import InvalidPeerId, bucket_index, peer_position
from pulsarcast_ipfs.kubo import KuboClient

__all__ = ["TABLE_INTERVAL", "RoutingView", "limit_per_bucket", "topic_cid"]

TABLE_INTERVAL: Final = 30.0
"""Seconds between two ``stats/dht`` reads (``swarm/peers`` is read at every refresh)."""


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


@functools.lru_cache(maxsize=4096)
def topic_cid(root: str) -> CID:
    """``CID.decode`` of a topic root's text, memoised: ``multiformats`` takes about
    200 µs a call, which was 85 % of a routing refresh (one per topic each time).
    ValueError if ``root`` is not a CID."""
    return cid_from_str(root)


class RoutingView:
    """This node's known peers, read from Kubo incrementally (see the module docstring).

    ``refresh`` returns the peers to give the core; ``given`` is the list the driver
    last gave it (a refresh that changes nothing need not be given again).
    """

    def __init__(
        self, *, self_id: str, k: int | None, table_interval: float = TABLE_INTERVAL
    ) -> None:
        self.self_id = self_id
        self.k = k
        self.table_interval = table_interval
        self.given: list[str] | None = None
        self.table_reads = 0
        """``stats/dht`` calls made."""
        self.swarm_reads = 0
        """``swarm/peers`` calls made."""
        self.limits = 0
        """Times the per-bucket limit was computed (the union had changed)."""
        self._table: frozenset[str] = frozenset()
        self._table_at = -math.inf
        self._union: frozenset[str] | None = None
        self._peers: list[str] = []
        self.subnets: dict[str, str] = {}
        """Connected peer -> colocation key (peers with a public address only)."""
        self.subnets_changed = False
        """The last refresh changed :attr:`subnets` (the driver gives it to the core)."""

    async def refresh(self, kubo: KuboClient, now: float, *, table: bool = False) -> list[str]:
        """Read ``swarm/peers``, and ``stats/dht`` if ``table``, never read, or last read
        ``table_interval`` or more before ``now`` (monotonic seconds); return the known
        peers limited per bucket (a new list). KuboError if a read failed."""
        if table or not self._table_at <= now < self._table_at + self.table_interval:
            self.table_reads += 1
            snapshot = await kubo.stats_dht()
            self._table = frozenset(snapshot.peers())
            self._table_at = now
        self.swarm_reads += 1
        connected = await kubo.swarm_peers()
        subnets: dict[str, str] = {}
        for p in connected:
            key = colocation_key(p.address)
            if key is not None:
                subnets[p.peer_id] = key
        self.subnets_changed = subnets != self.subnets
        if self.subnets_changed:
            self.subnets = subnets
        union = self._table.union(p.peer_id for p in connected)
        if union != self._union:
            self.limits += 1
            self._union = union
            self._peers = limit_per_bucket(self.self_id, union, self.k)
        return list(self._peers)
