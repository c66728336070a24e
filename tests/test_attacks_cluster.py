"""Relays that lie on real Kubo (docs/protocol-notes.md "Relays that lie"): relays with
children restarted with the test-only ``--misbehave silent`` on a 10-node cluster
(``flat_fanout`` 2, ``pulsarcast_ipfs.cluster._attacks``); every honest subscriber
must get every event, and the attackers' children must have left them
(``peer_penalised``). ``benchmarks/faults.py --scenario silent_relays`` repeats it
on 20 nodes. With ``witnesses`` 0 (the defence off: ``attack_cluster(...,
witnesses=0)``) the same scenario fails, the attackers' subtrees getting nothing.
"""

from __future__ import annotations

import pytest

from pulsarcast_ipfs.cluster import attack_cluster
from pulsarcast_ipfs.cluster._attacks import scenario_lying_relays

pytestmark = [pytest.mark.kubo, pytest.mark.cluster, pytest.mark.slow, pytest.mark.anyio]


async def test_silent_relays_with_children_cannot_hold_back_their_subtrees() -> None:
    async with attack_cluster(nodes=10, run="attacks-test", flat_fanout=2) as sc:
        res = await scenario_lying_relays(sc, kind="silent", seconds=12)
    print(res.describe())
    assert res.published > 0, "nothing was published"
    assert res.figures["attackers"] == 2 and res.figures["attackers_children"] > 0, res.describe()
    assert res.ok, res.describe()
    assert res.figures["penalties_by_attackers_children"] > 0, res.describe()
