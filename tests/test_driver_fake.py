"""The sidecar driver against in-process fakes of Kubo and of its peers.

``benchmarks/driver_bench.py`` at a tiny size: a real :class:`sidecar.Driver` (core,
block store, Kubo client, state, API) with a fake Kubo behind ``httpx.MockTransport``
and a fake p2p transport. These tests check what its scenarios did, never how fast:
every event delivered to the application once and in order, forwarded to each child
exactly once, written to and pinned in Kubo.
"""

from __future__ import annotations

import json
from collections import Counter

import dag_cbor
import pytest

from benchmarks import driver_bench as bench
from pulsarcast_ipfs.core import compute_cid
from pulsarcast_ipfs.core.testing import make_signers
from pulsarcast_ipfs.testing import FakeKubo

EVENTS = 50
CHILDREN = 3


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_leaf_delivers_every_received_event_once_in_order() -> None:
    o = await bench.run_scenario("receive", events=EVENTS, children=CHILDREN)
    assert o.children == 0 and o.forwarded == {}
    assert len(set(o.expected)) == EVENTS
    assert o.delivered == o.expected
    assert o.stored == set(o.expected) and o.pinned == set(o.expected)  # retained: pinned
    assert o.kubo_calls["dag/import"] >= 1 and o.bad_frames == 0
    assert o.problems() == []


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_relay_forwards_every_event_to_each_child_exactly_once() -> None:
    o = await bench.run_scenario("forward", events=EVENTS, children=CHILDREN)
    assert len(o.forwarded) == CHILDREN
    for child, got in o.forwarded.items():
        assert got == Counter(o.expected), child
    assert o.delivered == o.expected
    assert o.stored == set(o.expected) and o.pinned == set(o.expected)
    assert o.frames_out >= EVENTS * CHILDREN and o.bytes_out > 0
    assert o.problems() == []


@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.parametrize("delegate_ttl", [86400.0, 0.0], ids=["delegated", "kubo-signs"])
async def test_a_publisher_signs_sends_stores_and_delivers_each_event(
    delegate_ttl: float,
) -> None:
    o = await bench.run_scenario(
        "publish", events=EVENTS, children=CHILDREN, delegate_ttl=delegate_ttl
    )
    assert len(set(o.expected)) == EVENTS
    if delegate_ttl:  # Kubo signed the delegation at start; the sidecar signs each event
        assert o.kubo_calls.get("key/sign", 0) == 0
    else:  # publisher and author signature of each event through Kubo
        assert o.kubo_calls["key/sign"] == 2 * EVENTS
    for child, got in o.forwarded.items():
        assert got == Counter(o.expected), child
    assert len(o.forwarded) == CHILDREN
    assert o.delivered == o.expected  # the author is subscribed to its topic
    assert o.stored == set(o.expected) and o.pinned == set(o.expected)  # own: pinned
    assert o.problems() == []


@pytest.mark.anyio
async def test_the_fake_kubo_answers_a_multipart_block_put_line_by_line() -> None:
    """One ``{"Key","Size"}`` line per multipart file, as Kubo does for ``block/put``."""
    kubo = FakeKubo(make_signers(1)[0])
    blocks = [dag_cbor.encode({"n": i}) for i in range(3)]
    async with kubo.client() as client:
        cids = await client.block_put_many(blocks)
        assert list(cids) == [compute_cid(b) for b in blocks]
        assert await client.block_get(cids[1]) == blocks[1]
        await client.pin_add_many(list(cids), fast_provide_root=False)
    assert kubo.calls["block/put"] == 1 and kubo.blocks_put == 3
    assert kubo.pinned == {str(c) for c in cids}
    costs = await bench.kubo_call_costs(calls=3)
    assert len(costs) == 5 and all(us > 0 for us in costs.values())


@pytest.mark.slow
def test_the_command_line_prints_a_table_json_and_a_profile(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert bench.main(["--events", "20", "--children", "2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    rows = {r["scenario"]: r for r in doc["results"]}
    assert set(rows) == {"receive", "forward", "publish"}
    assert all(r["problems"] == [] and r["cpu_us_per_event"] > 0 for r in rows.values())
    assert bench.main(["--events", "10", "--scenarios", "forward", "--profile"]) == 0
    out = capsys.readouterr().out
    assert "CPU µs/event" in out and "cumulative" in out
