"""Shared pytest fixtures: the anyio backend, real Kubo daemons, a sidecar on fakes and
a PySpark session in local mode.

Async tests use anyio's pytest plugin (``@pytest.mark.anyio``); the backend is
asyncio unless a test module overrides ``anyio_backend``.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pulsarcast_ipfs.cluster import ClusterConfig, LocalCluster
from pulsarcast_ipfs.core.testing import make_signers
from pulsarcast_ipfs.testing import SPARK_TEST_JVM_OPTIONS, FakeKubo, Sidecar, sidecar_at

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """PySpark in local mode, two cores, one shuffle partition, the JVM with
    :data:`SPARK_TEST_JVM_OPTIONS` (the spark-marked tests; PySpark is imported only when one
    runs). A ``PYSPARK_SUBMIT_ARGS`` of the caller's own is left as it is."""
    import spark as job

    own = "PYSPARK_SUBMIT_ARGS" not in os.environ
    if own:
        os.environ["PYSPARK_SUBMIT_ARGS"] = (
            f'--driver-java-options "{SPARK_TEST_JVM_OPTIONS}" pyspark-shell'
        )
    try:
        session = job.get_session(job.SessionConfig(master="local[2]", shuffle_partitions=1))
    finally:
        if own:
            del os.environ["PYSPARK_SUBMIT_ARGS"]
    yield session
    session.stop()


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
