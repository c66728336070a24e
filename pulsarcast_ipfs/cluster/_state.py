"""A cluster's state on disk, so that another process can find it.

``pulsarcast cluster up`` starts a detached cluster and writes ``cluster.json`` into
its state directory (:func:`write_state`); ``status`` and ``down`` read it back
(:func:`read_state`). An in-process cluster marks its temp directory with its
owner's pid, so that a later cluster removes the directory of one whose owner was
SIGKILLed (:func:`sweep_stale_dirs`).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from pulsarcast_ipfs.cluster._config import ClusterConfig
from pulsarcast_ipfs.cluster._errors import ClusterError
from pulsarcast_ipfs.cluster._node import ClusterNode
from pulsarcast_ipfs.cluster._toxiproxy import ToxiproxyAPI

__all__ = [
    "OWNER_FILE",
    "STATE_FILE",
    "SavedCluster",
    "default_state_dir",
    "read_state",
    "sweep_stale_dirs",
    "write_state",
]

STATE_FILE = "cluster.json"
OWNER_FILE = "owner.pid"


def default_state_dir() -> Path:
    """Where ``pulsarcast cluster up`` keeps its state when no ``--state-dir`` is given."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = Path(runtime) if runtime else Path(tempfile.gettempdir()) / f"pulsarcast-{os.getuid()}"
    return base / "pulsarcast-cluster"


def sweep_stale_dirs(parent: Path) -> None:
    """Remove temp cluster dirs left by a process that was killed (SIGKILL skips cleanup;
    its daemons died with it through PR_SET_PDEATHSIG)."""
    for d in parent.glob("pulsarcast-cluster-*"):
        try:
            owner = int((d / OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue
        if not psutil.pid_exists(owner):
            shutil.rmtree(d, ignore_errors=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class SavedCluster:
    """What :func:`read_state` found: enough to inspect and stop the processes."""

    config: ClusterConfig
    toxiproxy_pid: int
    toxiproxy_url: str
    startup_seconds: float
    nodes: tuple[ClusterNode, ...]


def write_state(
    state_dir: Path,
    *,
    config: ClusterConfig,
    base_dir: Path,
    toxiproxy_pid: int,
    toxiproxy_url: str,
    startup_seconds: float,
    nodes: Sequence[ClusterNode],
) -> Path:
    """Write ``cluster.json`` into ``state_dir``; return its path."""
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_dir / STATE_FILE
    doc = {
        "base_dir": str(base_dir),
        "toxiproxy_pid": toxiproxy_pid,
        "toxiproxy_url": toxiproxy_url,
        "config": {
            "nodes": config.nodes,
            "toxiproxy": config.toxiproxy,
            "pubsub_router": config.pubsub_router,
            "stream_mounting": config.stream_mounting,
        },
        "startup_seconds": startup_seconds,
        "nodes": [n.to_state() for n in nodes],
    }
    path.write_text(json.dumps(doc, indent=2))
    return path


def read_state(state_dir: Path) -> SavedCluster:
    """The cluster described by ``state_dir`` (from :func:`write_state`)."""
    path = state_dir / STATE_FILE
    try:
        doc = json.loads(path.read_text())
        raw = doc["config"]
        config = ClusterConfig(
            nodes=int(raw["nodes"]),
            toxiproxy=bool(raw["toxiproxy"]),
            pubsub_router=raw.get("pubsub_router"),
            stream_mounting=bool(raw.get("stream_mounting", True)),
            base_dir=Path(doc["base_dir"]),
        )
    except FileNotFoundError as exc:
        raise ClusterError(f"no cluster is running (no {path})") from exc
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ClusterError(f"unreadable cluster state {path}: {exc}") from exc
    toxiproxy_url = str(doc.get("toxiproxy_url") or "")
    api = ToxiproxyAPI(toxiproxy_url) if toxiproxy_url else None
    nodes = tuple(
        ClusterNode(
            index=int(n["index"]),
            repo=Path(n["repo"]),
            pid=int(n["pid"]),
            api_url=str(n["api_url"]),
            peer_id=str(n["peer_id"]),
            swarm_address=str(n["swarm_address"]),
            announce_address=str(n["announce_address"]),
            proxy_name=str(n["proxy_name"]),
            _toxiproxy=api if n["proxy_name"] else None,
        )
        for n in doc["nodes"]
    )
    return SavedCluster(
        config=config,
        toxiproxy_pid=int(doc.get("toxiproxy_pid") or 0),
        toxiproxy_url=toxiproxy_url,
        startup_seconds=float(doc.get("startup_seconds") or 0.0),
        nodes=nodes,
    )
