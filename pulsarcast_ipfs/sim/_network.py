"""Simulated membership: Kademlia routing tables (docs/protocol.md §3).

Theory of operation
-------------------
Node ``i`` of a run has an Ed25519 peer ID from the core's one generator
(:func:`pulsarcast_ipfs.core.make_signers`, or
:func:`~pulsarcast_ipfs.core.make_peer_ids` without signatures): the identity
multihash ``00 24 08 01 12 20`` + 32 bytes, in base58btc (``12D3KooW…``), exactly
the shape of a Kubo peer ID. Its keyspace position is
``sha256(multihash bytes)`` (:func:`pulsarcast_ipfs.kademlia.peer_position`).

Routing tables are those of a well-bootstrapped DHT: node ``a`` keeps, for each
common-prefix length ``c`` (:func:`pulsarcast_ipfs.kademlia.bucket_index`), a
k-bucket of up to ``k`` peers whose position shares exactly ``c`` leading bits
with ``a``'s. Peers of one bucket are a contiguous range of the positions in
sorted order, so a table is built with a few binary searches instead of
``N`` distance computations: the buckets' members are drawn from the range
with a seeded stream (``k`` members plus a replacement cache of ``k`` more).

Liveness as the DHT perceives it: a crashed peer leaves every table after a
detection delay and re-enters when it comes back; a bucket then shows its
first ``k`` live candidates, as Kademlia refills a bucket from its
replacement cache.
"""

from __future__ import annotations

import bisect
import random

from pulsarcast_ipfs.kademlia import bucket_index, peer_position

__all__ = ["RoutingTables"]


class RoutingTables:
    """The k-bucket routing tables of all nodes of a run, with perceived liveness."""

    def __init__(self, peer_ids: list[str], *, k: int, rng: random.Random) -> None:
        if k < 1:
            raise ValueError("k must be at least 1")
        self.k = k
        self.peer_ids = peer_ids
        self.positions = [peer_position(p) for p in peer_ids]
        n = len(peer_ids)
        order = sorted(range(n), key=lambda i: self.positions[i])
        sorted_pos = [self.positions[i] for i in order]
        self.buckets: list[list[list[int]]] = []
        """node -> its non-empty buckets (farthest first) -> candidates, best first."""
        self.holders: list[list[int]] = [[] for _ in range(n)]
        """peer -> nodes whose buckets list it as a candidate."""
        for a in range(n):
            pa = self.positions[a]
            node_buckets: list[list[int]] = []
            for c in range(256):
                # Peers sharing exactly c leading bits with a: prefix (a's c bits, flipped bit c).
                shift = 255 - c
                prefix = ((pa >> shift) ^ 1) << shift
                lo = bisect.bisect_left(sorted_pos, prefix)
                hi = bisect.bisect_left(sorted_pos, prefix + (1 << shift))
                if hi > lo:
                    size = hi - lo
                    want = min(size, 2 * k)
                    picks = [order[lo + j] for j in rng.sample(range(size), want)]
                    node_buckets.append(picks)
                    for p in picks:
                        self.holders[p].append(a)
                # Nobody else shares more than c bits once a's own range holds only a.
                own = prefix ^ (1 << shift)
                lo2 = bisect.bisect_left(sorted_pos, own)
                hi2 = bisect.bisect_left(sorted_pos, own + (1 << shift))
                if hi2 - lo2 <= 1:
                    break
            self.buckets.append(node_buckets)
        self.alive = [True] * n
        """Liveness as the DHT currently perceives it (after detection delays)."""

    def table(self, node: int) -> list[str]:
        """Peer IDs of ``node``'s routing table: per bucket, the first ``k`` live candidates."""
        out: list[str] = []
        alive = self.alive
        ids = self.peer_ids
        k = self.k
        for bucket in self.buckets[node]:
            taken = 0
            for p in bucket:
                if alive[p]:
                    out.append(ids[p])
                    taken += 1
                    if taken == k:
                        break
        return out

    def table_size(self, node: int) -> int:
        return len(self.table(node))

    def set_alive(self, peers: list[int], alive: bool) -> list[int]:
        """Mark ``peers`` as (not) alive; return the nodes whose tables may have changed."""
        affected: set[int] = set()
        for p in peers:
            if self.alive[p] != alive:
                self.alive[p] = alive
                affected.update(self.holders[p])
        return sorted(affected)

    def check_bucket(self, node: int, peer: int) -> int:
        """The common-prefix length of ``peer`` in ``node``'s table (for tests)."""
        return bucket_index(self.positions[node], self.positions[peer])
