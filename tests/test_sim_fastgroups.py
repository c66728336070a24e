"""Fast groups in the simulator: a few hundred nodes, crashes and loss,
every subscription with ``fast``, the group capacity far below the group sizes."""

from __future__ import annotations

from typing import Any

import pytest

from pulsarcast_ipfs.core import EventDescriptor, GroupEvent
from pulsarcast_ipfs.sim import CrashSpec, SimConfig, Simulation

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


class _Traced(Simulation):
    """Logs every GROUP_EVENT sent (sender, receiver, event, publisher)."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.group_sends: list[tuple[str, str, str, str]] = []

    def on_send_rpc(self, src: int, out: Any) -> None:
        if isinstance(out.rpc, GroupEvent):
            ev = EventDescriptor.decode(out.rpc.event)
            self.group_sends.append((self.peer_ids[src], out.peer, str(ev.cid), ev.publisher))
        super().on_send_rpc(src, out)


def _max_hops(sends: list[tuple[str, str, str, str]]) -> int:
    first: dict[tuple[str, str], str] = {}
    for s, r, e, _p in sends:
        first.setdefault((r, e), s)

    def hop(peer: str, e: str, pub: str, depth: int = 0) -> int:
        if peer == pub:
            return 0
        got = first.get((peer, e))
        return 99 if got is None or depth > 10 else 1 + hop(got, e, pub, depth + 1)

    return max(hop(s, e, p) + 1 for s, _r, e, p in sends)


def test_fast_groups_with_crashes_exactly_once_two_hops() -> None:
    # ordered topics: each topic's creator publishes every event, so every event goes
    # along a group whose size is far above the capacity (helpers, and refusals)
    config = SimConfig(
        nodes=300,
        topics=6,
        events=120,
        seed=3,
        rate=20.0,
        ordered=True,
        fast=True,
        group_capacity=4,
        crashes=(CrashSpec(at=3.0, fraction=0.10),),
        crash_roots=0,
        loss=0.02,
        grace=90.0,
        rpc_records=False,
    )
    sim = _Traced(config)
    s = sim.run()
    assert s.crashed == 30 and s.messages_lost > 0
    assert s.events_published > 0 and s.live_expected > 0
    assert s.live_delivered == s.live_expected  # every live subscriber, every event
    assert s.duplicates == 0  # exactly once
    paths = s.deliveries_by_path
    assert paths.get("group", 0) > 0 and paths.get("helper", 0) > 0, paths
    assert _max_hops(sim.group_sends) == 2
    # some of the crashed nodes were helpers: their members were placed again
    victims = {sim.peer_ids[i] for _, wave in sim.crash_plan for i in wave}
    helpers = {snd for snd, _r, _e, pub in sim.group_sends if snd != pub}
    assert victims & helpers
