"""Shared pytest fixtures: the anyio backend, real Kubo daemons and a sidecar on fakes.

Async tests use anyio's pytest plugin (``@pytest.mark.anyio``); the backend is
asyncio unless a test module overrides ``anyio_backend``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from pulsarcast_ipfs.cluster import ClusterConfig, LocalCluster
from pulsarcast_ipfs.core.testing import make_signers
from pulsarcast_ipfs.testing import FakeKubo, Sidecar, sidecar_at


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def kubo_pair(anyio_backend: str) -> AsyncIterator[LocalCluster]:
    """Two connected Kubo daemons (stream mounting and gossipsub on), one per test module."""
    async with LocalCluster(config=ClusterConfig(nodes=2, pubsub_router="gossipsub")) as cluster:
        yield cluster


@pytest.fixture
async def sc(tmp_path: Path) -> AsyncIterator[Sidecar]:
    """A real driver and its HTTP API on a :class:`FakeKubo` and fake peers (no daemon);
    the cluster tests' own ``sc`` fixtures override it."""
    async with sidecar_at(tmp_path, FakeKubo(make_signers(1, seed=3)[0])) as sidecar:
        yield sidecar
