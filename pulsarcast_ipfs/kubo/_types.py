"""Typed results of the Kubo RPC client (frozen, slotted, keyword-only)."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = [
    "BandwidthStats",
    "KuboVersion",
    "NodeIdentity",
    "P2PListener",
    "PeerAddrs",
    "PeerInfo",
    "PubsubMessage",
    "RoutingTableEntry",
    "RoutingTableSnapshot",
    "SignedMessage",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeIdentity:
    """``id``: who the node is and the addresses it announces."""

    peer_id: str
    public_key: str
    addresses: tuple[str, ...]
    agent_version: str
    protocols: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class KuboVersion:
    """``version``."""

    version: str
    commit: str
    repo: str
    system: str
    golang: str


@dataclass(frozen=True, slots=True, kw_only=True)
class PeerInfo:
    """One connected peer from ``swarm/peers``."""

    peer_id: str
    address: str
    latency: str = ""
    direction: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class PeerAddrs:
    """A peer and the addresses the DHT knows for it (``routing/findpeer``, ``findprovs``)."""

    peer_id: str
    addresses: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class RoutingTableEntry:
    """One peer in one k-bucket of one DHT's routing table (``stats/dht``).

    ``dht`` is ``"lan"`` or ``"wan"``; ``bucket`` is the bucket index Kubo reports
    (the common-prefix length with the local node, last bucket collects the rest).
    """

    dht: str
    bucket: int
    peer_id: str
    connected: bool
    agent_version: str = ""
    last_useful_at: str = ""
    last_queried_at: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class RoutingTableSnapshot:
    """The local routing tables as dumped by ``stats/dht`` (no network traffic)."""

    entries: tuple[RoutingTableEntry, ...] = ()

    def peers(self, dht: str | None = None) -> tuple[str, ...]:
        """Distinct peer IDs, optionally of one DHT only, in table order."""
        seen: dict[str, None] = {}
        for e in self.entries:
            if dht is None or e.dht == dht:
                seen.setdefault(e.peer_id, None)
        return tuple(seen)

    def dhts(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(e.dht for e in self.entries))


@dataclass(frozen=True, slots=True, kw_only=True)
class BandwidthStats:
    """``stats/bw``: totals in bytes and current rates in bytes/s (of one protocol if given)."""

    total_in: int
    total_out: int
    rate_in: float
    rate_out: float
    protocol: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class P2PListener:
    """One entry of ``p2p/ls``.

    For a ``listen`` (incoming) listener ``listen_address`` is ``/p2p/<self>`` and
    ``target_address`` the local TCP target; for a ``forward`` (outgoing) one
    ``listen_address`` is the local TCP address and ``target_address`` ``/p2p/<peer>``.
    """

    protocol: str
    listen_address: str
    target_address: str

    @property
    def is_forward(self) -> bool:
        return not self.listen_address.startswith("/p2p/")


@dataclass(frozen=True, slots=True, kw_only=True)
class PubsubMessage:
    """A message from ``pubsub/sub``: the sender, payload, sequence number and topics."""

    from_peer: str
    data: bytes
    seqno: bytes
    topics: tuple[str, ...] = field(default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class SignedMessage:
    """``key/sign``: the signature (raw bytes) and the key that made it."""

    key_name: str
    key_id: str
    signature: bytes
