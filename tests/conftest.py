"""Shared pytest fixtures: the anyio backend and real Kubo daemons.

Async tests use anyio's pytest plugin (``@pytest.mark.anyio``); the backend is
asyncio unless a test module overrides ``anyio_backend``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from pulsarcast_ipfs.cluster import ClusterConfig, LocalCluster


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def kubo_pair(anyio_backend: str) -> AsyncIterator[LocalCluster]:
    """Two connected Kubo daemons (stream mounting and gossipsub on), one per test module."""
    async with LocalCluster(config=ClusterConfig(nodes=2, pubsub_router="gossipsub")) as cluster:
        yield cluster
