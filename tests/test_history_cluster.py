"""History on a real cluster: complete, identical and durable history.

Six Kubo daemons. Sidecars on nodes 0-4: node 0 creates the topic, nodes 1-3
subscribe, node 4 never subscribes (the fresh non-member of the durability check).
Node 5 is a bare Kubo node: an independent reader (``ipfshttpclient`` and
``dag_cbor``, none of our code) walks the topic's event blocks there.

In order (one cluster for the module):

1. three publishers (nodes 0, 1, 2) publish concurrently, 66 events: every node's
   history lists all of them, once, in the same order; oldest first is the reverse;
2. node 3's sidecar is stopped while the three publish again (branches), then
   restarted: it recovers every missed event, once, and lists the same history;
3. the independent reader walks every event block from one head;
4. once the subscribers have pinned what they hold, the publisher and author (node 0)
   is killed for good, ``repo gc`` runs on every remaining Kubo node, and node 4,
   which never subscribed, pages through the whole retained history, fetching the
   blocks from the remaining subscribers.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import anyio
import dag_cbor
import httpx
import pytest
from _cluster_http import deliveries, ok, wait_joined
from multiformats import CID  # the independent reader: multiformats, not ours

from pulsarcast_ipfs.cluster import LocalSidecarCluster
from pulsarcast_ipfs.testing import Scrape, wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.anyio, pytest.mark.timeout(600)]

SIDECARS = [0, 1, 2, 3, 4]
SUBSCRIBERS = [1, 2, 3]
PUBLISHERS = [0, 1, 2]
NON_MEMBER = 4
BARE = 5
ROUNDS = 22  # x 3 publishers = 66 events


@pytest.fixture(scope="module")
async def sc(anyio_backend: str) -> AsyncIterator[LocalSidecarCluster]:
    async with LocalSidecarCluster(nodes=6, sidecars=SIDECARS, run="history") as cluster:
        yield cluster


@pytest.fixture(scope="module")
async def topic(sc: LocalSidecarCluster) -> str:
    created = await ok(sc, 0, "POST", "/v1/topics", json={"name": "concurrent"})
    cid = str(created["cid"])
    for i in SUBSCRIBERS:
        await ok(sc, i, "POST", f"/v1/topics/{cid}/subscribe")
    await wait_joined(sc, cid, SUBSCRIBERS)
    return cid


async def publish_concurrently(
    sc: LocalSidecarCluster, topic: str, rounds: int, tag: str
) -> list[str]:
    """Each publisher publishes ``rounds`` events, all three at the same time."""
    cids: list[str] = []

    async def one(i: int) -> None:
        for k in range(rounds):
            res = await ok(
                sc,
                i,
                "POST",
                f"/v1/topics/{topic}/publish",
                json={"ack": "local", "text": f"{tag} {i}/{k}"},
            )
            cids.append(res["event"])

    async with anyio.create_task_group() as tg:
        for i in PUBLISHERS:
            tg.start_soon(one, i)
    assert len(set(cids)) == len(cids) == rounds * len(PUBLISHERS)
    return cids


async def whole_history(
    sc: LocalSidecarCluster, i: int, topic: str, order: str = "newest"
) -> list[dict[str, Any]]:
    """Every page, small pages (7), the way an application pages with the cursor."""
    out: list[dict[str, Any]] = []
    params: dict[str, Any] = {"limit": 7, "order": order}
    while True:
        page = await ok(sc, i, "GET", f"/v1/topics/{topic}/history", params=params)
        out += page["events"]
        if page["next"] is None:
            assert page["complete"], f"node{i}: history incomplete, missing {page['missing']}"
            return out
        params["after"] = page["next"]


async def delivered(sc: LocalSidecarCluster, i: int, topic: str) -> list[str]:
    return [d["cid"] for d in await deliveries(sc, i, topic)]


async def wait_delivered(
    sc: LocalSidecarCluster, nodes: list[int], topic: str, want: set[str]
) -> None:
    async def all_there() -> bool:
        for i in nodes:
            if not want <= set(await delivered(sc, i, topic)):
                return False
        return True

    await wait_until(
        all_there, deadline=60, what=f"{len(want)} deliveries on {nodes}", interval=0.5
    )


async def test_concurrent_publishers_one_complete_history_everywhere(
    sc: LocalSidecarCluster, topic: str
) -> None:
    cids = await publish_concurrently(sc, topic, ROUNDS, "first")
    await wait_delivered(sc, SUBSCRIBERS, topic, set(cids))
    views = {i: [e["cid"] for e in await whole_history(sc, i, topic)] for i in [0, *SUBSCRIBERS]}
    first = views[0]
    assert len(first) == len(set(first)) == len(cids) and set(first) == set(cids)
    for i, view in views.items():
        assert view == first, f"node{i} lists the history in another order"
    oldest = [e["cid"] for e in await whole_history(sc, 2, topic, "oldest")]
    assert oldest == first[::-1]
    events = {e["cid"]: e for e in await whole_history(sc, 1, topic)}
    branches = [e for e in events.values() if len(e["parents"]) > 1]
    assert branches, "three concurrent publishers made no branch: the test saw no DAG"
    for e in events.values():  # causal: every parent is older in the listing
        assert all(first.index(p) > first.index(e["cid"]) for p in e["parents"] if p in events)


async def test_a_stopped_subscriber_recovers_every_branch_once(
    sc: LocalSidecarCluster, topic: str
) -> None:
    await sc.stop_sidecar(3)
    missed = await publish_concurrently(sc, topic, 5, "while 3 was down")
    await sc.start_sidecar(3)
    await wait_delivered(sc, [3], topic, set(missed))
    got = Counter(await delivered(sc, 3, topic))
    assert all(got[c] == 1 for c in missed), "an event delivered twice after the restart"
    assert [e["cid"] for e in await whole_history(sc, 3, topic)] == [
        e["cid"] for e in await whole_history(sc, 1, topic)
    ]


# ipfshttpclient 0.8.0a2 hands urllib3 2 a parameter it warns about (not our code)
@pytest.mark.filterwarnings("ignore:The 'strict' parameter is no longer needed:FutureWarning")
async def test_an_independent_reader_walks_every_event_block(
    sc: LocalSidecarCluster, topic: str
) -> None:
    """ipfshttpclient (not our code) on a Kubo node without a sidecar: the topic
    descriptor, then every event from one head, decoded with dag_cbor."""
    import ipfshttpclient

    # one more event links every head: from it alone, the whole DAG is reachable
    last = await ok(
        sc, 1, "POST", f"/v1/topics/{topic}/publish", json={"ack": "local", "text": "closes it"}
    )
    await wait_delivered(sc, SUBSCRIBERS, topic, {last["event"]})
    want = {e["cid"] for e in await whole_history(sc, 2, topic)}
    api = sc.cluster[BARE].api_url.removeprefix("http://")
    host, port = api.rsplit(":", 1)
    client = ipfshttpclient.Client(addr=f"/ip4/{host}/tcp/{port}/http", timeout=30)
    try:
        desc = dag_cbor.decode(client.block.get(topic))
        assert desc["name"] == "concurrent" and "meta" in desc["#"]
        blocks: dict[str, dict[str, Any]] = {}
        todo = [last["event"]]
        while todo:
            cid = todo.pop()
            if cid in blocks:
                continue
            ev = dag_cbor.decode(client.block.get(cid))
            assert isinstance(ev, dict) and ev["topic"].encode("base32") == topic
            blocks[cid] = ev
            todo += [p.encode("base32") for p in ev["parents"]]
    finally:
        client.close()
    assert set(blocks) == want, f"{len(want - set(blocks))} events not reachable from one head"
    for ev in blocks.values():  # the clock orders every parent before its child
        assert all(ev["clock"] > blocks[p.encode("base32")]["clock"] for p in ev["parents"])
    assert all(isinstance(p, CID) for ev in blocks.values() for p in ev["parents"])


async def test_durable_after_the_publisher_is_gone_and_gc(
    sc: LocalSidecarCluster, topic: str
) -> None:
    want = [e["cid"] for e in await whole_history(sc, 1, topic)]

    async def pinned() -> bool:  # an event is safe from a repo gc once pinned, within
        for i in SUBSCRIBERS:  # seconds (a block collected before is put again, tested
            async with sc.client(i) as c:  # in test_kubo_client.py)
                metrics = Scrape.parse((await c.get("/metrics")).text)
            if metrics.value("pulsarcast_blocks_store_pending") != 0:
                return False
        return True

    await wait_until(pinned, deadline=30, what="the subscribers' pins", interval=0.5)
    await sc.kill_node(0)  # the author, one of the publishers: gone for good
    for i in [1, 2, 3, NON_MEMBER, BARE]:
        async with httpx.AsyncClient(base_url=sc.cluster[i].api_url, timeout=120) as kubo:
            r = await kubo.post("/api/v0/repo/gc")
            assert r.status_code == 200, r.text
    got = [e["cid"] for e in await whole_history(sc, NON_MEMBER, topic)]
    assert got == want, f"the non-member lists {len(got)} of {len(want)} events"
