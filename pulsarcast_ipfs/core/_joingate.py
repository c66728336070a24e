"""Sybil and JOIN admission: colocation bounds, subnet buckets, established peers first
(docs/protocol-notes.md "Sybil joins", docs/security.md "Sybil join and admission").

Theory of operation
-------------------
Peer IDs cost nothing: an attacker can JOIN a topic with thousands of them, early,
to take the slots near the root (the root's children, and its MEMBERS list, which
every publisher pushes to directly). Addresses cost more. As gossipsub v1.1 scores
IP colocation (P6), this node bounds what one *colocation key* — the sender's
network, a /24 for IPv4 and a /64 for IPv6, handed in by the driver
(:meth:`~._node.PulsarcastNode.set_peer_subnets`) — can take:

- **Children per subnet.** A JOIN from a peer that is not yet a child is refused
  (``JOIN_ACK ok=false``, reason ``colocated``) while ``subnet_children`` children
  of that tree share its key. The refused peer joins through its next hop, so it
  still gets in, one level lower, and every node it tries applies the same bound.
- **A subnet's JOIN allowance.** JOINs from new children of one key spend one token
  bucket (``subnet_join_rate``, ``subnet_join_burst``: by default what a single peer
  may send, so many identities on one network JOIN no faster than one peer). Over
  it the JOIN is dropped unanswered (``event_dropped`` reason ``join_flood``): a
  flood costs this node a bucket lookup, the joiner's timeout sends it elsewhere,
  and JOINs from every other network are untouched.
- **A network's lies count against it.** Each of its peers this node drops as a
  silent child or leaves as a withholding parent takes one of the network's
  ``subnet_children`` places at this node for ``penalty_ttl``: a network whose
  Sybils are dropped one by one is shut out of this node's children after
  ``subnet_children`` of them, rather than refilling the places with fresh
  identities (cf. gossipsub's behaviour penalty, P7, on the IP).
- **Established peers first.** A root whose children are more than its MEMBERS list
  holds (``MAX_MEMBERS - 1``) lists them by rank: first the earliest-adopted child
  of each key (peers without a key each count as their own), then those adopted
  ``established_after`` ago or more before fresher ones, then by peer ID. Fresh
  identities thus fill only what the established ones leave, and one network gets
  one slot before any other network gets a second. While the list holds every
  child nothing changes (the list is the sorted children, as before).

A peer with no key (the driver did not say: an address on a private network or
loopback, a peer that connected since the last routing refresh, or a driver that
gives none) is bounded only by the per-peer buckets (:mod:`._admission`): without
an address there is nothing to colocate. The mapping is the driver's; this object
reads it and never writes it, so a simulator may share one between all its nodes.

Silent Sybils that did get a slot are dropped by the parent's silent-child check
(:mod:`._guard`), which counts across LEAVE and re-JOIN.

This object owns its state and touches no other part's; the node asks it and carries
out what it answers (:class:`~._node.PulsarcastNode`).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping

from pulsarcast_ipfs.core._cid import CID

from ._bucket import TokenBucket
from ._tree import LRU

__all__ = ["JoinGate", "colocation_key"]

_ADOPTED_KEPT = 65536
"""(tree, peer) adoption times remembered (LRU): a child's age survives a re-JOIN."""


def colocation_key(multiaddr: str) -> str | None:
    """The colocation key of a peer's address (a multiaddr such as Kubo's
    ``swarm/peers`` ``Addr``): ``ip4:a.b.c.0/24`` or ``ip6:xxxx:…::/64``; ``None``
    for an address with no public IP (loopback, private, link-local), a relay
    circuit (its IP is the relay's, not the peer's) or one that does not parse."""
    parts = multiaddr.split("/")
    if len(parts) < 3 or parts[0] != "" or "p2p-circuit" in parts:
        return None
    proto, host = parts[1], parts[2]
    if proto not in ("ip4", "ip6"):
        return None
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return None
    if not ip.is_global:
        return None
    if isinstance(ip, ipaddress.IPv4Address):
        net = ipaddress.ip_network(f"{ip}/24", strict=False)
        return f"ip4:{net}"
    net6 = ipaddress.ip_network(f"{ip}/64", strict=False)
    return f"ip6:{net6}"


class JoinGate:
    """Admission of JOINs by colocation key, and the rank of a root's children (see
    the module docstring)."""

    def __init__(
        self,
        *,
        subnet_children: int,
        subnet_join_rate: float,
        subnet_join_burst: float,
        established_after: float,
        buckets: int,
    ) -> None:
        self.subnet_children = subnet_children
        """Children of one tree that may share a key (0: no bound)."""
        self.subnet_join_rate = subnet_join_rate
        self.subnet_join_burst = subnet_join_burst
        self.established_after = established_after
        self._subnets: Mapping[str, str] = {}
        self._buckets = LRU(buckets)  # key -> TokenBucket
        self._adopted = LRU(_ADOPTED_KEPT)  # (tree, peer) -> first adopted at
        self._struck = LRU(buckets)  # key -> [until, ...]: its peers found lying
        self.refused_colocated = 0
        self.refused_flood = 0

    # ------------------------------------------------------------------ inputs

    @property
    def counts(self) -> dict[str, int]:
        """JOINs refused as colocated, and dropped as a subnet's flood."""
        return {"colocated": self.refused_colocated, "join_flood": self.refused_flood}

    def set_subnets(self, subnets: Mapping[str, str]) -> None:
        """The driver's peer -> colocation key mapping (replaces the previous one)."""
        self._subnets = subnets

    def subnet(self, peer: str) -> str | None:
        return self._subnets.get(peer)

    # --------------------------------------------------------------- decisions

    def admit(self, now: float, key: CID, peer: str, children: Iterable[str]) -> str | None:
        """A JOIN from ``peer``, not a child of tree ``key`` yet: ``None`` (admit), or
        why not: ``colocated`` (answer no) or ``join_flood`` (drop unanswered)."""
        subnet = self._subnets.get(peer)
        if subnet is None:
            return None
        bucket: TokenBucket | None = self._buckets.get(subnet)
        if bucket is None:
            bucket = TokenBucket(self.subnet_join_burst, now)
        self._buckets.put(subnet, bucket)
        if not bucket.take(now, self.subnet_join_rate, self.subnet_join_burst):
            self.refused_flood += 1
            return "join_flood"
        if self.subnet_children > 0:
            allowed = self.subnet_children
            strikes: list[float] | None = self._struck.get(subnet)
            if strikes:
                strikes[:] = [t for t in strikes if t > now]
                allowed -= len(strikes)
            same = 0
            if allowed > 0:
                subnets = self._subnets
                for c in children:
                    if subnets.get(c) == subnet:
                        same += 1
                        if same >= allowed:
                            break
            if same >= allowed:
                self.refused_colocated += 1
                return "colocated"
        return None

    def struck(self, now: float, peer: str, until: float) -> None:
        """``peer`` was found lying (a silent child, a withholding parent): its
        network's share of this node's children shrinks by one until ``until``."""
        subnet = self._subnets.get(peer)
        if subnet is None:
            return
        strikes: list[float] | None = self._struck.get(subnet)
        if strikes is None:
            strikes = []
        strikes[:] = [t for t in strikes if t > now]
        if len(strikes) < self.subnet_children:
            strikes.append(until)
        self._struck.put(subnet, strikes)

    def adopted(self, now: float, key: CID, peer: str) -> None:
        """``peer`` became a child of tree ``key`` (its age counts from its first time)."""
        if (key, peer) not in self._adopted:
            self._adopted.put((key, peer), now)

    def ranked(self, now: float, key: CID, children: Iterable[str], limit: int) -> list[str]:
        """(a root) The ``limit`` children its MEMBERS list names, sorted: all of them
        if they fit, else the first by rank (see the module docstring)."""
        kids = sorted(children)
        if len(kids) <= limit:
            return kids
        subnets = self._subnets
        adopted = self._adopted
        horizon = now - self.established_after

        def since(p: str) -> float:
            t = adopted.get((key, p))
            return now if t is None else t

        first_of: dict[str, tuple[float, str]] = {}
        for p in kids:
            s = subnets.get(p)
            if s is not None:
                cand = (since(p), p)
                best = first_of.get(s)
                if best is None or cand < best:
                    first_of[s] = cand

        def rank(p: str) -> tuple[int, int, str]:
            s = subnets.get(p)
            extra = 0 if s is None or first_of[s][1] == p else 1
            fresh = 0 if since(p) <= horizon else 1
            return (extra, fresh, p)

        return sorted(sorted(kids, key=rank)[:limit])
