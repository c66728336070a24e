"""What cluster to start: :class:`ClusterConfig`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["ClusterConfig"]

_PUBSUB_ROUTERS = ("gossipsub", "floodsub")


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterConfig:
    """What cluster to start.

    ``pubsub_router`` turns Kubo's own pubsub on (``gossipsub``/``floodsub``, for
    baselines). ``stream_mounting=False`` starts nodes without
    ``Experimental.Libp2pStreamMounting`` (to test that error). ``min_table_peers``
    is how many LAN routing-table peers every node needs before start returns
    (default: ``min(nodes - 1, 4)``). ``base_dir`` holds the repos (a fresh temp
    dir by default; removed on stop either way).
    """

    nodes: int = 4
    toxiproxy: bool = False
    pubsub_router: str | None = None
    stream_mounting: bool = True
    min_table_peers: int | None = None
    seeds: int = 3
    start_timeout: float = 60.0
    table_timeout: float = 90.0
    base_dir: Path | None = None

    def __post_init__(self) -> None:
        if not (isinstance(self.nodes, int) and 1 <= self.nodes <= 200):
            raise ValueError(f"nodes must be an integer in 1..200, got {self.nodes!r}")
        if self.pubsub_router is not None and self.pubsub_router not in _PUBSUB_ROUTERS:
            raise ValueError(f"pubsub_router must be one of {_PUBSUB_ROUTERS} or None")
        if self.min_table_peers is not None and not 0 <= self.min_table_peers < self.nodes:
            raise ValueError("min_table_peers must be in 0..nodes-1")
        if self.seeds < 1:
            raise ValueError("seeds must be at least 1")
        if self.start_timeout <= 0 or self.table_timeout <= 0:
            raise ValueError("timeouts must be positive")

    @property
    def table_target(self) -> int:
        if self.min_table_peers is not None:
            return self.min_table_peers
        return min(self.nodes - 1, 4)
