"""Test helpers shipped with the package (like ``trio.testing``): a local Kubo cluster.

``async with LocalCluster(config=ClusterConfig(nodes=4, toxiproxy=True)) as cluster:``
starts real Kubo daemons on loopback (PROTOCOL.md §2), connected into a LAN DHT,
optionally behind per-node Toxiproxy proxies; ``cluster[3].client()`` talks to one.
"""

from __future__ import annotations

from pulsarcast_ipfs.testing._cluster import (
    ClusterConfig,
    ClusterError,
    ClusterNode,
    LocalCluster,
    default_state_dir,
    kubo_settings,
)
from pulsarcast_ipfs.testing._faults import SCENARIOS, FaultResult, fault_cluster
from pulsarcast_ipfs.testing._sidecars import LocalSidecarCluster, SidecarProcess
from pulsarcast_ipfs.testing._toxiproxy import ToxiproxyAPI, ToxiproxyError
from pulsarcast_ipfs.testing._wait import wait_until

__all__ = [
    "SCENARIOS",
    "ClusterConfig",
    "ClusterError",
    "ClusterNode",
    "FaultResult",
    "LocalCluster",
    "LocalSidecarCluster",
    "SidecarProcess",
    "ToxiproxyAPI",
    "ToxiproxyError",
    "default_state_dir",
    "fault_cluster",
    "kubo_settings",
    "wait_until",
]
