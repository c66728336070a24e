"""Filters in the simulator: per-subscription filters from the spec; the
checks expect of a filtered subscriber only the events its filter matches, and count
any other delivery as ``unwanted``."""

from __future__ import annotations

from typing import Any

import pytest

from pulsarcast_ipfs.core import matches
from pulsarcast_ipfs.sim import (
    CrashSpec,
    SimConfig,
    SimSummary,
    Simulation,
    SpecError,
    parse_latency,
)
from pulsarcast_ipfs.workload import Workload, load_workload

FILTERS = ("ups >= 2", "controversiality = 1", "*", "downs between 0 and 1 and ups < 5")


@pytest.fixture(scope="module")
def workload() -> Workload:
    return load_workload()


def _run(workload: Workload, **kw: Any) -> tuple[Simulation, SimSummary]:
    base: dict[str, Any] = {
        "nodes": 30,
        "topics": 5,
        "events": 40,
        "seed": 2,
        "rate": 10.0,
        "grace": 30.0,
        "latency": parse_latency("20ms..120ms"),
        "filters": FILTERS,
    }
    base.update(kw)
    sim = Simulation(SimConfig(**base), workload=workload)
    return sim, sim.run()


def test_filtered_subscribers_get_exactly_their_matches(workload: Workload) -> None:
    sim, s = _run(workload)
    assert s.filtered_subscriptions > 0 and s.unwanted == 0 and s.duplicates == 0
    assert s.coverage_published == 1.0
    # the expected sets are the matching ones: recount them from the workload
    pubs = sim.scaled.publications
    expected = 0
    for pub in pubs[: s.events_injected]:
        ti = sim._topic_pos[pub.topic]
        for i, names in enumerate(sim.scaled.subscriptions):
            if pub.topic in names:
                where = sim.sub_filters.get((i, ti))
                expected += where is None or matches(where, pub.attributes())
    assert s.expected_published == expected == s.delivered_published
    _, plain = _run(workload, filters=())
    assert plain.filtered_subscriptions == 0
    assert s.deliveries < plain.deliveries  # some subscribers did not want some events


def test_filters_hold_under_loss_and_crashes(workload: Workload) -> None:
    _, s = _run(
        workload,
        loss=0.05,
        crashes=(CrashSpec(at=1.0, fraction=0.1),),
        grace=90.0,
    )
    assert s.unwanted == 0 and s.duplicates == 0 and s.recovered > 0
    assert s.coverage_live == 1.0 and s.crashed == 3


def test_tree_filters_prune_and_deliver_the_same(workload: Workload) -> None:
    _, s = _run(workload, tree_filters=True)
    assert s.unwanted == 0 and s.coverage_published == 1.0 and s.duplicates == 0
    assert s.forwards_pruned > 0 and s.forwards_false_positive < s.forwards_down
    _, plain = _run(workload, tree_filters=False)
    assert plain.forwards_down == plain.forwards_false_positive == plain.forwards_pruned == 0
    assert plain.deliveries == s.deliveries  # pruning does not change what is delivered
    assert s.rpcs_total < plain.rpcs_total


def test_a_bad_filter_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match="at position 5: expected a value"):
        SimConfig(filters=("ups >",))
