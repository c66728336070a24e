"""One Kubo daemon of a local cluster, and the faults it can be put through.

With Toxiproxy on, the node's proxy sits in front of its swarm port and the node
announces the proxy's address: connections *into* the node pass it and its toxics
(latency, bandwidth, cut).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from pulsarcast_ipfs.cluster._errors import ClusterError
from pulsarcast_ipfs.cluster._process import alive, log_tail
from pulsarcast_ipfs.cluster._toxiproxy import ToxiproxyAPI
from pulsarcast_ipfs.kubo import KuboClient, KuboConfig, KuboError

__all__ = ["ClusterNode"]


@dataclass(slots=True, kw_only=True)
class ClusterNode:
    """One Kubo daemon of a :class:`LocalCluster`.

    ``multiaddr`` is the address other nodes dial (the proxy when Toxiproxy is on),
    ``/p2p/<peer_id>`` included.
    """

    index: int
    repo: Path
    pid: int = 0
    api_url: str = ""
    peer_id: str = ""
    swarm_address: str = ""
    announce_address: str = ""
    proxy_name: str = ""
    _toxiproxy: ToxiproxyAPI | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return f"node{self.index}"

    @property
    def log_path(self) -> Path:
        return self.repo.parent / f"{self.name}.log"

    @property
    def multiaddr(self) -> str:
        return f"{self.announce_address or self.swarm_address}/p2p/{self.peer_id}"

    def client(self, **config: Any) -> KuboClient:
        """A new :class:`KuboClient` of this node (use it with ``async with``)."""
        return KuboClient(config=KuboConfig(base_url=self.api_url, **config))

    def is_running(self) -> bool:
        return self.pid > 0 and alive(self.pid)

    def memory_rss(self) -> int:
        """Resident memory of the daemon in bytes."""
        try:
            return int(psutil.Process(self.pid).memory_info().rss)
        except psutil.Error as exc:
            raise ClusterError(f"{self.name} (pid {self.pid}) is not running") from exc

    def log_tail(self, lines: int = 20) -> str:
        return log_tail(self.log_path, lines)

    def _require_proxy(self) -> ToxiproxyAPI:
        if self._toxiproxy is None or not self.proxy_name:
            raise ClusterError(f"{self.name}: the cluster was started without toxiproxy=True")
        return self._toxiproxy

    async def set_latency(self, ms: int, jitter: int = 0) -> None:
        """Delay everything this node sends on connections into it by ``ms`` (± ``jitter``).

        A round trip started by either side over such a connection gets ``ms`` longer.
        ``ms=0`` removes the toxic.
        """
        api = self._require_proxy()
        if ms < 0 or jitter < 0:
            raise ValueError("latency and jitter must be >= 0")
        if ms == 0 and jitter == 0:
            await api.remove_toxic(self.proxy_name, "latency")
        else:
            await api.set_toxic(
                self.proxy_name, "latency", "latency", "downstream", latency=ms, jitter=jitter
            )

    async def set_bandwidth(self, kbps: int | None) -> None:
        """Limit both directions of connections into this node to ``kbps`` KB/s (None: lift)."""
        api = self._require_proxy()
        for stream in ("upstream", "downstream"):
            name = f"bandwidth_{stream}"
            if kbps is None:
                await api.remove_toxic(self.proxy_name, name)
            elif kbps <= 0:
                raise ValueError("kbps must be positive (use cut() to stop traffic)")
            else:
                await api.set_toxic(self.proxy_name, name, "bandwidth", stream, rate=kbps)

    async def cut(self) -> None:
        """Isolate the node: its proxy drops and refuses connections, and the node's
        own dials and connections to loopback peers are filtered (``swarm/filters``)."""
        api = self._require_proxy()
        await api.update_proxy(self.proxy_name, enabled=False)
        async with self.client() as kubo:
            await kubo.swarm_filters_add("/ip4/127.0.0.1/ipcidr/32")
            for peer in await kubo.swarm_peers():
                with contextlib.suppress(KuboError):
                    await kubo.swarm_disconnect(f"/p2p/{peer.peer_id}")

    async def restore(self) -> None:
        """Undo :meth:`cut` (connections are re-established by the DHT or by the caller)."""
        api = self._require_proxy()
        listen = self.announce_address.split("/")
        await api.update_proxy(self.proxy_name, enabled=True, listen=f"{listen[2]}:{listen[4]}")
        async with self.client() as kubo:
            with contextlib.suppress(KuboError):
                await kubo.swarm_filters_rm("/ip4/127.0.0.1/ipcidr/32")

    def to_state(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "repo": str(self.repo),
            "pid": self.pid,
            "api_url": self.api_url,
            "peer_id": self.peer_id,
            "swarm_address": self.swarm_address,
            "announce_address": self.announce_address,
            "proxy_name": self.proxy_name,
        }
