"""Test helpers shipped with the package (like ``trio.testing``).

:func:`wait_until` polls a condition on real daemons with a deadline;
:class:`Scrape` reads a sidecar's ``/metrics`` back with prometheus_client's parser;
:class:`RecordSources` stands in for sidecars' ``/v1/records`` (``pulsarcast collect``);
:class:`FakeKubo` and :class:`StrictKubo` stand in for Kubo's RPC API in process,
:class:`FakePeers` and :class:`FakeTransport` for the p2p network, and :func:`sidecar_at`
runs a real driver and its HTTP API on them. The pure core's own test networks are
:class:`pulsarcast_ipfs.core.testing.CoreNet`; :class:`SigningWorld`, :func:`subscribed_tree`,
:data:`GOLDEN_SCENARIOS` and their kin set it up as several core tests need;
:func:`ok`, :func:`deliveries` and :func:`wait_joined` call a local cluster's sidecars;
:func:`to_mf` and :func:`from_mf` convert CIDs for checks against ``dag_cbor``. The local
Kubo and sidecar clusters the tests start are production code and live in
:mod:`pulsarcast_ipfs.cluster`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pulsarcast_ipfs.testing._fakekubo import FAKE_KUBO_URL, FakeKubo, StrictKubo
    from pulsarcast_ipfs.testing._fakenet import FakePeers, FakeTransport, running
    from pulsarcast_ipfs.testing._sidecar import (
        CLOCK_OFFSET,
        Sidecar,
        create_topic,
        expect_error,
        sidecar_at,
    )

from pulsarcast_ipfs.testing._cluster_http import deliveries, ok, wait_joined
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
from pulsarcast_ipfs.testing._multiformats import from_mf, to_mf
from pulsarcast_ipfs.testing._record_sets import ReportRecord, records_r1, report_record
from pulsarcast_ipfs.testing._records import RecordSources
from pulsarcast_ipfs.testing._scrape import Scrape
from pulsarcast_ipfs.testing._wait import wait_until

__all__ = [
    "CLOCK_OFFSET",
    "DELEGATE_SEED_A",
    "DELEGATE_SEED_B",
    "FAKE_KUBO_URL",
    "GOLDEN_SCENARIOS",
    "ORPHAN_EVENTS",
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

# The sidecar imports pulsarcast_ipfs.testing._misbehave, so the fakes that import the
# sidecar load on first use (PEP 562), not with this package.
_LAZY = {
    "FAKE_KUBO_URL": "_fakekubo",
    "FakeKubo": "_fakekubo",
    "StrictKubo": "_fakekubo",
    "FakePeers": "_fakenet",
    "FakeTransport": "_fakenet",
    "running": "_fakenet",
    "CLOCK_OFFSET": "_sidecar",
    "Sidecar": "_sidecar",
    "create_topic": "_sidecar",
    "expect_error": "_sidecar",
    "sidecar_at": "_sidecar",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
