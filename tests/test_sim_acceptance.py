"""Acceptance runs of the simulator (docs/simulator.md), on the real ``PulsarcastNode`` (slow).

1,000 simulated nodes, the 23 topics of ``reddit-2007-25k.jsonl`` with its
subscription and event distribution scaled to the node count, and a scaled-down
number of publish calls (``EVENTS``) to keep each run within the test budget.

- fault-free: 100 % of published events reach 100 % of subscribers;
- 10 % of the nodes crashed mid-run (including the root of the largest topic)
  and 5 % message loss: every live subscriber eventually receives every
  published event, and no application sees a duplicate;
- order: only topic creators publish (``LAST_SEEN``), everyone else requests to
  publish: every subscriber sees one chain, in the same order;
- history: with the workload's concurrent publishers, every live node that
  keeps a topic's history lists the same events in the same order, each once, in the
  history order (newest first), and (fault-free) exactly the published events.
"""

from __future__ import annotations

import itertools

import pytest

from pulsarcast_ipfs.core import EventDescriptor
from pulsarcast_ipfs.sim import CrashSpec, SimConfig, SimSummary, Simulation
from pulsarcast_ipfs.workload import Workload, load_workload

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

NODES = 1000
EVENTS = 100
RATE = 50.0  # publish calls per virtual second: publication lasts ~EVENTS / RATE seconds


@pytest.fixture(scope="module")
def workload() -> Workload:
    return load_workload()


def _run(workload: Workload, **kw: object) -> tuple[Simulation, SimSummary]:
    config = SimConfig(nodes=NODES, topics=23, events=EVENTS, seed=1, rate=RATE, **kw)  # type: ignore[arg-type]
    sim = Simulation(config, workload=workload)
    return sim, sim.run()


def _explain(sim: Simulation) -> str:
    return "; ".join(
        f"call {j} (topic {sim.topic_names[t]}) missed by {len(nodes)} live nodes, e.g. {nodes[:5]}"
        for j, t, nodes in sim.stats.missing_report(5)
    )


def _histories(sim: Simulation) -> dict[int, list[str]]:
    """Topic index -> its history, checked to be the same on every live node that keeps
    one (each event once, keys strictly descending); the callers check that every
    topic with events has one."""
    out: dict[int, list[str]] = {}
    for ti in range(len(sim.topic_cids)):
        for i in range(len(sim.nodes)):
            if not sim.alive[i]:
                continue
            got = sim.history(i, ti)
            if got is None:
                continue
            text = [str(c) for c in got]
            assert len(set(text)) == len(text), f"node {i}, topic {ti}: a duplicate"
            if ti not in out:
                keys = [EventDescriptor.decode(sim.blocks[c]).order_key for c in got]
                assert all(a > b for a, b in itertools.pairwise(keys))
                out[ti] = text
            assert text == out[ti], f"node {i} lists topic {ti} otherwise"
    return out


def _published(sim: Simulation) -> dict[int, set[str]]:
    by_topic: dict[int, set[str]] = {}
    for event, j in sim.stats.event_call.items():
        by_topic.setdefault(sim.stats.call_topic[j], set()).add(event)
    return by_topic


def test_fault_free_full_coverage(workload: Workload) -> None:
    sim, s = _run(workload, grace=30.0)
    assert s.events_injected == EVENTS
    assert s.events_published == EVENTS
    assert s.expected_published > 0
    assert s.delivered_published == s.expected_published, _explain(sim)
    assert s.coverage_published == 1.0
    assert s.duplicates == 0
    histories = _histories(sim)
    published = _published(sim)
    assert len(published) > 1  # several topics, with concurrent publishers
    for ti, events in published.items():
        assert set(histories[ti]) == events, f"topic {sim.topic_names[ti]}"


def test_crashes_and_loss_every_live_subscriber_gets_every_event(workload: Workload) -> None:
    mid = EVENTS / RATE / 2
    sim, s = _run(
        workload,
        crashes=(CrashSpec(at=mid, fraction=0.10),),
        crash_roots=1,
        loss=0.05,
        grace=150.0,
    )
    assert s.crashed == NODES // 10
    assert s.crashed_roots >= 1
    root_of_largest = sim.scaled.topics[0].creator
    assert not sim.alive[root_of_largest]
    assert s.messages_lost > 0
    assert s.events_published > 0 and s.live_expected > 0
    assert s.live_delivered == s.live_expected, _explain(sim)
    assert s.duplicates == 0
    # gap repair walked every branch: each live node's history is the same, and holds
    # every event some live subscriber was expected to get
    histories = _histories(sim)
    for ti, events in _published(sim).items():
        held = set(histories.get(ti, []))
        assert held <= events
        reached = {
            e
            for e in events
            if any(
                sim.alive[i]
                and sim.stats.call_delivered[sim.stats.event_call[e]][i >> 3] >> (i & 7) & 1
                for i in range(len(sim.nodes))
            )
        }
        assert reached <= held, f"topic {sim.topic_names[ti]}: {len(reached - held)} not in history"


def test_ordered_topics_one_chain_same_order(workload: Workload) -> None:
    sim, s = _run(workload, ordered=True, grace=30.0)
    assert s.events_published == EVENTS and s.events_refused == 0
    assert s.coverage_published == 1.0, _explain(sim)
    assert s.chain_breaks == 0
    # every (subscriber, topic) that received anything received the whole chain, in order
    assert s.order_checked == len(sim.stats.seq_state) > 0
    assert s.order_same == s.order_checked
    assert s.duplicates == 0
