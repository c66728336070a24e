"""The Kubo side of a cluster node: its repo, its configuration, its daemon command.

A node is ``ipfs init --profile=test,pebbleds --empty-repo`` (:data:`INIT_PROFILES`)
plus :func:`kubo_settings`
(docs/protocol.md §2), written into the repo's ``config`` file before the daemon starts
(compose/kubo-init.sh applies the same keys; tests/test_compose.py keeps them equal).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio

from pulsarcast_ipfs.cluster._errors import ClusterError
from pulsarcast_ipfs.cluster._process import child_env

__all__ = ["INIT_PROFILES", "configure_repo", "daemon_command", "init_repo", "kubo_settings"]

INIT_PROFILES = "test,pebbleds"
"""``ipfs init --profile=…`` of every node. ``pebbleds``: Kubo's Pebble datastore
for blocks, pins and the rest, instead of the default flatfs (one file per block) +
LevelDB. Every Pulsarcast subscriber stores and pins each event it keeps (docs/protocol.md
§5); with flatfs Kubo's block store was 65-70 % of Kubo's CPU at 20 events/s
(docs/benchmark-history.md "The gossipsub-parity work, session 10"), and a
``block/put`` cost 395-540 µs of
Kubo CPU against 70-130 µs with Pebble (``benchmarks/kubo_store.py``). The
pub-sub baselines store nothing, so the datastore does not change their figures."""


def kubo_settings(
    *, stream_mounting: bool, pubsub_router: str | None, announce: Sequence[str]
) -> dict[str, Any]:
    """The configuration keys a cluster node gets on top of :data:`INIT_PROFILES` (§2)."""
    return {
        "Addresses.API": "/ip4/127.0.0.1/tcp/0",
        "Addresses.Gateway": [],
        "Addresses.Swarm": ["/ip4/127.0.0.1/tcp/0"],
        "Addresses.Announce": list(announce),
        "Bootstrap": [],
        "AutoConf.Enabled": False,
        "AutoNAT.ServiceMode": "disabled",
        "AutoTLS.Enabled": False,
        "Discovery.MDNS.Enabled": False,
        "Routing.Type": "dhtserver",
        "Routing.LoopbackAddressesOnLanDHT": True,
        "Provide.DHT.SweepEnabled": False,
        "Provide.Strategy": "pinned",
        # No periodic reprovide: its first round, a minute after start, re-announced
        # every pinned block, i.e. every subscriber's retained events:
        # 130 MB of LAN DHT and a p50 of 1.3 s in a 20-node bench at 5 events/s.
        # Pins are still announced when pinned (fast-provide-root), `provide once` works.
        "Provide.Enabled": True,
        "Provide.DHT.Interval": "0s",
        "Experimental.Libp2pStreamMounting": stream_mounting,
        "Pubsub.Enabled": pubsub_router is not None,
        "Pubsub.Router": pubsub_router or "",
        "Swarm.RelayClient.Enabled": False,
        "Swarm.RelayService.Enabled": False,
        "Swarm.DisableNatPortMap": True,
        "Swarm.ConnMgr.Type": "basic",
        "Swarm.ConnMgr.LowWater": 250,
        "Swarm.ConnMgr.HighWater": 400,
        "Swarm.ConnMgr.GracePeriod": "2m",
        "Swarm.ResourceMgr.MaxMemory": "1GB",
        "Swarm.ResourceMgr.MaxFileDescriptors": 4096,
    }


async def init_repo(ipfs: Path, repo: Path, *, name: str) -> None:
    """``ipfs init --profile=test,pebbleds --empty-repo`` in ``repo``; :class:`ClusterError`
    if it fails."""
    result = await anyio.run_process(
        [str(ipfs), "init", f"--profile={INIT_PROFILES}", "--empty-repo"],
        env=child_env(repo),
        check=False,
    )
    if result.returncode != 0:
        out = (result.stdout + result.stderr).decode(errors="replace").strip()
        raise ClusterError(f"{name}: `ipfs init` failed: {out[-2000:]}")


def _set(config: dict[str, Any], dotted: str, value: Any) -> None:
    node = config
    *parents, last = dotted.split(".")
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value


def configure_repo(repo: Path, values: Mapping[str, Any]) -> None:
    """Set the dotted keys ``values`` (``"Routing.Type"``) in the repo's config file."""
    config_path = repo / "config"
    config = json.loads(config_path.read_text())
    for key, value in values.items():
        _set(config, key, value)
    config_path.write_text(json.dumps(config, indent=2))


def daemon_command(ipfs: Path) -> list[str]:
    """The command of a node's daemon (its repo comes from ``IPFS_PATH``)."""
    return [str(ipfs), "daemon", "--migrate=false"]
