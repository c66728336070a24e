"""The live dashboard: one static page (vanilla JS and SVG, shipped as package data,
nothing loaded from elsewhere) fed by server-sent events.

Two servers use it: the sidecar, at ``/dashboard`` of its API, with a snapshot of its
own node (``sidecar._dashboard``); and ``pulsarcast dashboard``, whose snapshot is
every sidecar's of a cluster (:class:`ClusterView`). The page takes the same
document from either: ``{"ts": seconds, "nodes": [node, ...]}`` (docs/dashboard.md).
"""

from __future__ import annotations

from ._cluster import ClusterView
from ._routes import EVENTS_PATH, PAGE_PATH, SNAPSHOT_PATH, TICK, Snapshot, dashboard_routes

__all__ = [
    "EVENTS_PATH",
    "PAGE_PATH",
    "SNAPSHOT_PATH",
    "TICK",
    "ClusterView",
    "Snapshot",
    "dashboard_routes",
]
