"""Where the external tools live: Kubo (``ipfs``) and ``toxiproxy-server``.

``scripts/setup.sh`` (``make setup``) builds both from their pinned Go modules into
``.tools/bin`` of the project. A user who already has a Kubo binary points the
project at it with ``PULSARCAST_IPFS_BIN``; likewise ``PULSARCAST_TOXIPROXY_BIN``.
A missing tool is a :class:`ToolNotFound` that says how to get it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

__all__ = ["ToolNotFound", "ipfs_binary", "project_root", "toxiproxy_binary"]

IPFS_ENV = "PULSARCAST_IPFS_BIN"
TOXIPROXY_ENV = "PULSARCAST_TOXIPROXY_BIN"


class ToolNotFound(RuntimeError):
    """An external tool (Kubo, Toxiproxy) is not installed where the project looks for it."""


def project_root() -> Path:
    """The source checkout this package runs from (where ``.tools/`` is)."""
    return Path(__file__).resolve().parent.parent


def _locate(env: str, name: str, what: str) -> Path:
    override = os.environ.get(env)
    if override:
        path = Path(override).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise ToolNotFound(f"{env}={override} is not an executable file")
        return path
    local = project_root() / ".tools" / "bin" / name
    if local.is_file() and os.access(local, os.X_OK):
        return local
    raise ToolNotFound(
        f"{what} not found at {local}; run `make setup` to build it, "
        f"or set {env} to an existing `{name}` binary"
    )


def ipfs_binary() -> Path:
    """The Kubo binary: ``$PULSARCAST_IPFS_BIN`` or ``.tools/bin/ipfs``."""
    return _locate(IPFS_ENV, "ipfs", "Kubo (ipfs)")


def toxiproxy_binary() -> Path:
    """The Toxiproxy server: ``$PULSARCAST_TOXIPROXY_BIN`` or ``.tools/bin/toxiproxy-server``."""
    try:
        return _locate(TOXIPROXY_ENV, "toxiproxy-server", "Toxiproxy (toxiproxy-server)")
    except ToolNotFound:
        found = shutil.which("toxiproxy-server")
        if found and not os.environ.get(TOXIPROXY_ENV):
            return Path(found)
        raise
