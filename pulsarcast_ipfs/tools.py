"""Where the external tools live: Kubo (``ipfs``) and ``toxiproxy-server``.

``scripts/setup.sh`` (``make setup``) builds both from their pinned Go modules into
``.tools/bin`` of the project. A user who already has a Kubo binary points the
project at it with ``PULSARCAST_IPFS_BIN``; likewise ``PULSARCAST_TOXIPROXY_BIN``.
A missing tool is a :class:`ToolNotFound` that says how to get it.

The Kubo matrix (:data:`KUBO_MATRIX`, README.md "Supported Kubo versions") is the
Kubo releases the end-to-end flow is tested on; ``scripts/build-kubo.sh VERSION``
builds one into ``.tools/kubo/VERSION/ipfs`` (:func:`kubo_release_binary`).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Final

__all__ = [
    "KUBO_MATRIX",
    "KUBO_PINNED",
    "ToolNotFound",
    "ipfs_binary",
    "kubo_release_binary",
    "project_root",
    "toxiproxy_binary",
]

KUBO_PINNED: Final = "v0.43.0"
"""The Kubo of ``tools/kubo/go.mod``, which ``make setup`` builds into ``.tools/bin``."""
KUBO_MATRIX: Final = ("v0.41.0", "v0.42.0", KUBO_PINNED)
"""Kubo releases the end-to-end flow is tested on (tests/test_kubo_matrix.py): the
oldest the project supports (``pin/add --fast-provide-root`` came with 0.39; 0.39.0
does not compile with Go 1.26 and the module proxy serves no 0.40.0) to the newest
the proxy serves that builds (0.43.1 replaces go-libp2p with a fork the proxy
refuses)."""

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


def kubo_release_binary(version: str) -> Path:
    """The Kubo ``version`` of the matrix: the pinned one (:func:`ipfs_binary`, unless
    ``PULSARCAST_IPFS_BIN`` is set) or ``.tools/kubo/VERSION/ipfs``."""
    if version == KUBO_PINNED and not os.environ.get(IPFS_ENV):
        return ipfs_binary()
    path = project_root() / ".tools" / "kubo" / version / "ipfs"
    if version == KUBO_PINNED and not path.is_file():
        return ipfs_binary()
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise ToolNotFound(
            f"Kubo {version} not found at {path}; build it with "
            f"`bash scripts/build-kubo.sh {version}`"
        )
    return path


def toxiproxy_binary() -> Path:
    """The Toxiproxy server: ``$PULSARCAST_TOXIPROXY_BIN`` or ``.tools/bin/toxiproxy-server``."""
    try:
        return _locate(TOXIPROXY_ENV, "toxiproxy-server", "Toxiproxy (toxiproxy-server)")
    except ToolNotFound:
        found = shutil.which("toxiproxy-server")
        if found and not os.environ.get(TOXIPROXY_ENV):
            return Path(found)
        raise
