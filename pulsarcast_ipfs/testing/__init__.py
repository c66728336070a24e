"""Test helpers shipped with the package (like ``trio.testing``).

:func:`wait_until` polls a condition on real daemons with a deadline;
:class:`Scrape` reads a sidecar's ``/metrics`` back with prometheus_client's parser;
:class:`RecordSources` stands in for sidecars' ``/v1/records`` (``pulsarcast collect``);
:class:`FakeKubo` and :class:`StrictKubo` stand in for Kubo's RPC API in process,
:class:`FakePeers` and :class:`FakeTransport` for the p2p network, and :func:`sidecar_at`
runs a real driver and its HTTP API on them. The local
Kubo and sidecar clusters the tests start are production code and live in
:mod:`pulsarcast_ipfs.cluster`.
"""

from __future__ import annotations

from pulsarcast_ipfs.testing._fakekubo import FAKE_KUBO_URL, FakeKubo, StrictKubo
from pulsarcast_ipfs.testing._fakenet import FakePeers, FakeTransport, running
from pulsarcast_ipfs.testing._records import RecordSources
from pulsarcast_ipfs.testing._scrape import Scrape
from pulsarcast_ipfs.testing._sidecar import (
    CLOCK_OFFSET,
    Sidecar,
    create_topic,
    expect_error,
    sidecar_at,
)
from pulsarcast_ipfs.testing._wait import wait_until

__all__ = [
    "CLOCK_OFFSET",
    "FAKE_KUBO_URL",
    "FakeKubo",
    "FakePeers",
    "FakeTransport",
    "RecordSources",
    "Scrape",
    "Sidecar",
    "StrictKubo",
    "create_topic",
    "expect_error",
    "running",
    "sidecar_at",
    "wait_until",
]
