"""The measures module on run r1 (:func:`~pulsarcast_ipfs.testing.records_r1`), whose
figures are counted by hand in the comments (the Spark report's tests count the same).
"""

from __future__ import annotations

import pytest

from pulsarcast_ipfs import measures
from pulsarcast_ipfs.testing import records_r1


@pytest.fixture
def r1() -> measures.RunRecords:
    run = measures.RunRecords()
    for rec in records_r1():
        run.add(rec)
    return run


def test_topic_t1_late_subscriber_duplicates_unpublished(r1: measures.RunRecords) -> None:
    t1 = measures.topic_table(r1)["t1"]
    # injected i1@10 {A,B}, i2@20 {A,B}, i3@60 {A,C}; published e1@11 {A,B}, e2@35 {A,B,C}
    assert (t1.injected, t1.published, t1.expected_injected, t1.expected_published) == (3, 2, 6, 5)
    # distinct: (A,e1) (B,e1) (C,e1) (A,e2) (B,e2) (C,e2) (A,e9); counted: not (C,e1) (A,e9)
    assert (t1.deliveries, t1.received, t1.duplicates) == (7, 5, 2)
    assert (t1.late, t1.unpublished, t1.recovered, t1.subscribers) == (1, 1, 1, 3)
    assert (t1.coverage_published, t1.coverage_injected) == (1.0, 5 / 6)


def test_resubscription_and_no_subscriber(r1: measures.RunRecords) -> None:
    table = measures.topic_table(r1)
    t2, t3 = table["t2"], table["t3"]
    # e5@10 {D,A}; e6@30 {D} (A unsubscribed on [20,40)): A's recovered e6 is late
    assert (t2.expected_published, t2.received, t2.late) == (3, 3, 1)
    assert t3.expected_published == 0 and t3.coverage_published is None
    assert measures.coverage(0, 0) is None and r1.duplicates == 2


def test_latency_nearest_rank(r1: measures.RunRecords) -> None:
    table = measures.latency_table(r1)
    # t1 live, first copy of each pair: 0, .05, .2, .3, .4, .5
    assert table[("t1", "live")] == measures.Latency(6, 0.2, 0.5, 0.5, 0.5)
    assert table[(measures.ALL, "all")] == measures.Latency(12, 0.3, 20.0, 20.0, 20.0)
    hist = {2: 1, 3: 2, 9: 1}  # in tenths of a second
    assert measures.latency_of_counts(hist, 10, 0.93) == measures.Latency(4, 0.3, 0.9, 0.9, 0.93)


def test_bytes_and_cpu() -> None:
    assert measures.wire_bytes(1000, 3000) == 2000
    assert measures.cpu_cores(5.0, 7.0, 10.0, 20.0) == pytest.approx(0.2)
    assert measures.cpu_cores(1.0, 0.5, 15.0, 16.0) == 0.0  # restarted: the counter went back
    assert measures.cpu_cores(1.0, 2.0, 15.0, 15.0) is None
    assert measures.cpu_us_per_delivery(2.0, 4) == 500_000


def test_rpc_bytes(r1: measures.RunRecords) -> None:
    table = measures.rpc_bytes_table(r1)
    assert table["t1"] == (150, 150) and table["(none)"] == (10, 0)
    assert table[measures.ALL] == (360, 350)
