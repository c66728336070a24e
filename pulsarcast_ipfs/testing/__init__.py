"""Test helpers shipped with the package (like ``trio.testing``).

:func:`wait_until` polls a condition on real daemons with a deadline;
:class:`Scrape` reads a sidecar's ``/metrics`` back with prometheus_client's parser;
:class:`RecordSources` stands in for sidecars' ``/v1/records`` (``pulsarcast collect``);
:class:`FakeKubo` and :class:`StrictKubo` stand in for Kubo's RPC API in process,
:class:`FakePeers` and :class:`FakeTransport` for the p2p network, and :func:`sidecar_at`
runs a real driver and its HTTP API on them. The pure core's own test networks are
:class:`pulsarcast_ipfs.core.testing.CoreNet`; :class:`SigningWorld`, :func:`subscribed_tree`,
:data:`GOLDEN_SCENARIOS` and their kin set it up as several core tests need;
:func:`api`, :func:`ok`, :func:`deliveries` and :func:`wait_joined` call a local
cluster's sidecars;
:func:`to_mf` and :func:`from_mf` convert CIDs for checks against ``dag_cbor``;
:data:`SPARK_TEST_JVM_OPTIONS` are the JVM options of the tests' Spark. The local
Kubo and sidecar clusters the tests start are production code and live in
:mod:`pulsarcast_ipfs.cluster`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pulsarcast_ipfs.testing._cluster_http import api, deliveries, ok, wait_joined
    from pulsarcast_ipfs.testing._corenets import (
        DELEGATE_SEED_A,
        DELEGATE_SEED_B,
        GOLDEN_SCENARIOS,
        ORPHAN_EVENTS,
        FetchLog,
        SigningWorld,
        below_a_relay,
        delegate,
        delegated_event,
        orphaned_topic,
        relay_below_author,
        subscribed_tree,
        xor_distance,
    )
    from pulsarcast_ipfs.testing._fakekubo import FAKE_KUBO_URL, FakeKubo, StrictKubo
    from pulsarcast_ipfs.testing._fakenet import FakePeers, FakeTransport, running
    from pulsarcast_ipfs.testing._multiformats import from_mf, to_mf
    from pulsarcast_ipfs.testing._record_sets import (
        ReportRecord,
        records_r1,
        records_random,
        report_record,
    )
    from pulsarcast_ipfs.testing._records import RecordSources
    from pulsarcast_ipfs.testing._scrape import Scrape
    from pulsarcast_ipfs.testing._sidecar import (
        CLOCK_OFFSET,
        Sidecar,
        create_topic,
        expect_error,
        sidecar_at,
    )
    from pulsarcast_ipfs.testing._spark import SPARK_TEST_JVM_OPTIONS
    from pulsarcast_ipfs.testing._wait import wait_until

_WHERE: dict[str, str] = {
    "CLOCK_OFFSET": "_sidecar",
    "DELEGATE_SEED_A": "_corenets",
    "DELEGATE_SEED_B": "_corenets",
    "FAKE_KUBO_URL": "_fakekubo",
    "FakeKubo": "_fakekubo",
    "FakePeers": "_fakenet",
    "FakeTransport": "_fakenet",
    "FetchLog": "_corenets",
    "GOLDEN_SCENARIOS": "_corenets",
    "ORPHAN_EVENTS": "_corenets",
    "RecordSources": "_records",
    "ReportRecord": "_record_sets",
    "SPARK_TEST_JVM_OPTIONS": "_spark",
    "Scrape": "_scrape",
    "Sidecar": "_sidecar",
    "SigningWorld": "_corenets",
    "StrictKubo": "_fakekubo",
    "api": "_cluster_http",
    "below_a_relay": "_corenets",
    "create_topic": "_sidecar",
    "delegate": "_corenets",
    "delegated_event": "_corenets",
    "deliveries": "_cluster_http",
    "expect_error": "_sidecar",
    "from_mf": "_multiformats",
    "ok": "_cluster_http",
    "orphaned_topic": "_corenets",
    "records_r1": "_record_sets",
    "records_random": "_record_sets",
    "relay_below_author": "_corenets",
    "report_record": "_record_sets",
    "running": "_fakenet",
    "sidecar_at": "_sidecar",
    "subscribed_tree": "_corenets",
    "to_mf": "_multiformats",
    "wait_joined": "_cluster_http",
    "wait_until": "_wait",
    "xor_distance": "_corenets",
}
"""Each name's module, imported on first use: the helpers import the sidecar, whose
test-only ``--misbehave`` option imports :mod:`pulsarcast_ipfs.testing._misbehave`,
so this package imports nothing itself (``python -m sidecar`` would find it half-made)."""


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"pulsarcast_ipfs.testing.{module}"), name)


__all__ = [
    "CLOCK_OFFSET",
    "DELEGATE_SEED_A",
    "DELEGATE_SEED_B",
    "FAKE_KUBO_URL",
    "GOLDEN_SCENARIOS",
    "ORPHAN_EVENTS",
    "SPARK_TEST_JVM_OPTIONS",
    "FakeKubo",
    "FakePeers",
    "FakeTransport",
    "FetchLog",
    "RecordSources",
    "ReportRecord",
    "Scrape",
    "Sidecar",
    "SigningWorld",
    "StrictKubo",
    "api",
    "below_a_relay",
    "create_topic",
    "delegate",
    "delegated_event",
    "deliveries",
    "expect_error",
    "from_mf",
    "ok",
    "orphaned_topic",
    "records_r1",
    "records_random",
    "relay_below_author",
    "report_record",
    "running",
    "sidecar_at",
    "subscribed_tree",
    "to_mf",
    "wait_joined",
    "wait_until",
    "xor_distance",
]
