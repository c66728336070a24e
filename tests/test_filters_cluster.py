"""On a real cluster: attributes on events and filtered subscriptions.

Four Kubo daemons, a sidecar on each. Node 0 creates the topic; node 1 subscribes
with a filter, node 2 without, node 3 with another filter. Nodes 0 and 2 publish
events with attributes (Reddit-like: ``ups``, ``controversiality``, ``user``), some
without any. Then:

1. live: each filtered subscriber's deliveries are exactly the events its filter
   matches (checked once the unfiltered subscriber has received every event);
2. history: ``?where=`` pages (limit 2) list exactly the matching events, in the
   history order, on a filtered subscriber and on the author alike;
3. restart: node 1's sidecar is stopped while more events are published, then
   started again: it keeps its filter, and recovers exactly the matching ones.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from _cluster_http import deliveries, ok, wait_joined

from pulsarcast_ipfs.cluster import LocalSidecarCluster
from pulsarcast_ipfs.core import matches, parse_filter
from pulsarcast_ipfs.testing import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.anyio, pytest.mark.timeout(600)]

WHERE_1 = "ups >= 10 and controversiality = 1"
WHERE_3 = "user in ['alice', 'carol'] and ups < 50"
FILTERED = {1: WHERE_1, 3: WHERE_3}
PLAIN = 2


def attrs_of(k: int) -> dict[str, Any] | None:
    """Event k's attributes: varied, a few without any."""
    if k % 7 == 3:
        return None
    return {
        "ups": (k * 13) % 60,
        "controversiality": k % 2,
        "user": ["alice", "bob", "carol"][k % 3],
        "ratio": k / 4,
    }


@pytest.fixture(scope="module")
async def sc(anyio_backend: str) -> AsyncIterator[LocalSidecarCluster]:
    async with LocalSidecarCluster(nodes=4, run="filters") as cluster:
        yield cluster


@pytest.fixture(scope="module")
async def topic(sc: LocalSidecarCluster) -> str:
    created = await ok(sc, 0, "POST", "/v1/topics", json={"name": "reddit"})
    cid = str(created["cid"])
    for i, where in FILTERED.items():
        got = await ok(sc, i, "POST", f"/v1/topics/{cid}/subscribe", json={"filter": where})
        assert got["filter"] == str(parse_filter(where))
    await ok(sc, PLAIN, "POST", f"/v1/topics/{cid}/subscribe")
    await wait_joined(sc, cid, (1, 2, 3))
    return cid


async def publish(sc: LocalSidecarCluster, topic: str, ks: range) -> dict[str, dict[str, Any]]:
    """Nodes 0 and 2 publish events ``ks`` (alternately); CID -> attributes ({} none)."""
    out: dict[str, dict[str, Any]] = {}
    for k in ks:
        body: dict[str, Any] = {"ack": "local", "text": f"post {k}"}
        attrs = attrs_of(k)
        if attrs is not None:
            body["attributes"] = attrs
        res = await ok(sc, (0, PLAIN)[k % 2], "POST", f"/v1/topics/{topic}/publish", json=body)
        out[res["event"]] = attrs or {}
    return out


def wanted(sent: dict[str, dict[str, Any]], where: str) -> set[str]:
    f = parse_filter(where)
    return {cid for cid, attrs in sent.items() if matches(f, attrs)}


async def wait_for(sc: LocalSidecarCluster, i: int, topic: str, want: set[str]) -> None:
    async def there() -> bool:
        return want <= {d["cid"] for d in await deliveries(sc, i, topic)}

    await wait_until(there, deadline=60, what=f"{len(want)} deliveries on node{i}", interval=0.5)


async def filtered_history(sc: LocalSidecarCluster, i: int, topic: str, where: str) -> list[str]:
    out: list[str] = []
    params: dict[str, Any] = {"limit": 2, "where": where, "order": "oldest"}
    while True:
        page = await ok(sc, i, "GET", f"/v1/topics/{topic}/history", params=params)
        assert len(page["events"]) <= 2
        out += [e["cid"] for e in page["events"]]
        if page["next"] is None:
            return out
        params["after"] = page["next"]


async def test_filtered_subscribers_get_exactly_the_matching_events(
    sc: LocalSidecarCluster, topic: str
) -> None:
    sent = await publish(sc, topic, range(40))
    await wait_for(sc, PLAIN, topic, set(sent))
    for i, where in FILTERED.items():
        want = wanted(sent, where)
        assert 0 < len(want) < len(sent), "the workload does not exercise the filter"
        await wait_for(sc, i, topic, want)
    await anyio.sleep(2)  # anything else would have come by now (the plain node has all)
    for i, where in FILTERED.items():
        got = await deliveries(sc, i, topic)
        assert [d["cid"] for d in got if d["cid"] in sent] == [d["cid"] for d in got], (
            f"node{i}: an event of another topic?"
        )
        assert {d["cid"] for d in got} == wanted(sent, where), f"node{i}"
        assert len(got) == len({d["cid"] for d in got}), f"node{i}: a duplicate"
        for d in got:  # the attributes travelled with the event, signed
            assert d["attributes"] == sent[d["cid"]]
            # x.y.1 exactly with attributes (2.3.x: one signature, the delegated key)
            assert d["protocol_version"].endswith(".1") == bool(d["attributes"])
    # history ?where=: on the filtered subscriber and on the author, the same list
    full = await ok(sc, PLAIN, "GET", f"/v1/topics/{topic}/history",
                    params={"limit": 500, "order": "oldest"})  # fmt: skip
    order = [e["cid"] for e in full["events"]]
    assert set(order) == set(sent)
    for i, where in FILTERED.items():
        expect = [c for c in order if c in wanted(sent, where)]
        assert await filtered_history(sc, i, topic, where) == expect, f"node{i}"
        assert await filtered_history(sc, 0, topic, where) == expect


async def test_a_restarted_filtered_subscriber_keeps_its_filter_and_recovers_the_matches(
    sc: LocalSidecarCluster, topic: str
) -> None:
    before = {d["cid"] for d in await deliveries(sc, 1, topic)}
    await sc.stop_sidecar(1)
    missed = await publish(sc, topic, range(100, 130))
    await sc.start_sidecar(1)
    status = await ok(sc, 1, "GET", "/v1/status")
    st = next(t for t in status["topics"] if t["root_cid"] == topic)
    assert st["filter"] == str(parse_filter(WHERE_1))
    more = await publish(sc, topic, range(130, 140))
    want = wanted(missed, WHERE_1) | wanted(more, WHERE_1)
    await wait_for(sc, PLAIN, topic, set(missed) | set(more))
    await wait_for(sc, 1, topic, want)
    await anyio.sleep(2)
    got = await deliveries(sc, 1, topic)
    new = [d for d in got if d["cid"] not in before]
    assert {d["cid"] for d in new} == want
    assert len(new) == len(want), "a duplicate after the restart"
    # events published while it was down, matching and not: only the first came back
    assert wanted(missed, WHERE_1) and set(missed) - wanted(missed, WHERE_1)
