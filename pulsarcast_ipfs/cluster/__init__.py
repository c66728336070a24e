"""Local clusters of real Kubo daemons on loopback, with or without sidecars.

The supervisor behind ``pulsarcast cluster up``, the demo, the benchmark runner,
the fault scenarios and the integration tests::

    async with LocalCluster(config=ClusterConfig(nodes=4, toxiproxy=True)) as cluster:
        async with cluster[3].client() as kubo: ...

starts real Kubo daemons (docs/protocol.md §2), connected into a LAN DHT, optionally
behind per-node Toxiproxy proxies. :class:`LocalSidecarCluster` adds a
``pulsarcast-sidecar`` subprocess beside each daemon; :data:`SCENARIOS` are the
fault scenarios run on one (docs/faults.md), :data:`ATTACK_SCENARIOS` those with
relays that lie, on an :func:`attack_cluster`.
"""

from __future__ import annotations

from pulsarcast_ipfs.cluster._attacks import ATTACK_SCENARIOS, attack_cluster
from pulsarcast_ipfs.cluster._config import ClusterConfig
from pulsarcast_ipfs.cluster._errors import ClusterError
from pulsarcast_ipfs.cluster._faults import (
    RELAY_CHOICES,
    RELAY_FANOUT,
    SCENARIOS,
    FaultResult,
    fault_cluster,
    relay_round,
)
from pulsarcast_ipfs.cluster._kubo import INIT_PROFILES, kubo_settings
from pulsarcast_ipfs.cluster._node import ClusterNode
from pulsarcast_ipfs.cluster._sidecars import LocalSidecarCluster, SidecarProcess
from pulsarcast_ipfs.cluster._state import default_state_dir
from pulsarcast_ipfs.cluster._supervisor import LocalCluster
from pulsarcast_ipfs.cluster._toxiproxy import ToxiproxyAPI, ToxiproxyError

__all__ = [
    "ATTACK_SCENARIOS",
    "INIT_PROFILES",
    "RELAY_CHOICES",
    "RELAY_FANOUT",
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
    "attack_cluster",
    "default_state_dir",
    "fault_cluster",
    "kubo_settings",
    "relay_round",
]
