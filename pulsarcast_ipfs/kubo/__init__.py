"""Async client of Kubo's HTTP RPC API and Kademlia helpers over its routing table.

Quick use::

    async with KuboClient(config=KuboConfig(base_url="http://127.0.0.1:5001")) as kubo:
        me = await kubo.id()
        cid = await kubo.block_put(dag_cbor_bytes)
        table = await kubo.stats_dht()
        nearest = closest_known_peers(author_id, table, self_id=me.peer_id)

Errors are the typed :class:`KuboError` hierarchy drawn in :mod:`._errors`.
"""

from __future__ import annotations

from pulsarcast_ipfs.kademlia import closest_peers, distance, peer_position
from pulsarcast_ipfs.kubo._client import (
    KuboClient,
    KuboConfig,
    PubsubSubscription,
    decode_topic,
    encode_topic,
)
from pulsarcast_ipfs.kubo._errors import (
    BlockCIDMismatch,
    KuboAPIError,
    KuboError,
    KuboFeatureDisabled,
    KuboInvalidArgument,
    KuboNotFound,
    KuboProtocolError,
    KuboPubsubDisabled,
    KuboStreamMountingDisabled,
    KuboTimeout,
    KuboUnavailable,
)
from pulsarcast_ipfs.kubo._routing import closest_known_peers, dag_cbor_cid, parse_stats_dht
from pulsarcast_ipfs.kubo._types import (
    BandwidthStats,
    KuboVersion,
    NodeIdentity,
    P2PListener,
    PeerAddrs,
    PeerInfo,
    PubsubMessage,
    RoutingTableEntry,
    RoutingTableSnapshot,
    SignedMessage,
)

__all__ = [
    "BandwidthStats",
    "BlockCIDMismatch",
    "KuboAPIError",
    "KuboClient",
    "KuboConfig",
    "KuboError",
    "KuboFeatureDisabled",
    "KuboInvalidArgument",
    "KuboNotFound",
    "KuboProtocolError",
    "KuboPubsubDisabled",
    "KuboStreamMountingDisabled",
    "KuboTimeout",
    "KuboUnavailable",
    "KuboVersion",
    "NodeIdentity",
    "P2PListener",
    "PeerAddrs",
    "PeerInfo",
    "PubsubMessage",
    "PubsubSubscription",
    "RoutingTableEntry",
    "RoutingTableSnapshot",
    "SignedMessage",
    "closest_known_peers",
    "closest_peers",
    "dag_cbor_cid",
    "decode_topic",
    "distance",
    "encode_topic",
    "parse_stats_dht",
    "peer_position",
]
