"""Bounded topic announcers on real Kubo daemons (docs/sidecar.md "Providing").

Six nodes with ``--topic-announcers 2``: node 0 creates a topic, nodes 1-5
subscribe (a flat tree: the author is the root, the five its children, all in its
MEMBERS list). Exactly two subscribers announce the topic, the two whose peer IDs
are closest to it (``sidecar._announce.announcers``); the other three say they leave
it to them (``pulsarcast_topics_left_to_announcers``). The DHT then lists the author
and those two, none of the other three.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest

from pulsarcast_ipfs.cluster import LocalSidecarCluster
from pulsarcast_ipfs.cluster._faults import setup_topic
from pulsarcast_ipfs.core import cid_from_str
from pulsarcast_ipfs.testing import Scrape, wait_until
from sidecar._announce import announcers

pytestmark = [pytest.mark.anyio, pytest.mark.kubo, pytest.mark.cluster]

AUTHOR, SUBSCRIBERS = 0, [1, 2, 3, 4, 5]


@pytest.fixture(scope="module")
async def sc(anyio_backend: str) -> AsyncIterator[LocalSidecarCluster]:
    async with LocalSidecarCluster(
        nodes=6, run="announcers", extra_args=["--topic-announcers", "2"]
    ) as cluster:
        yield cluster


async def _gauge(sc: LocalSidecarCluster, i: int, name: str) -> float:
    async with sc.client(i) as c:
        scrape = Scrape.parse((await c.get("/metrics")).text)
    return scrape.value(name)


async def _providers(
    sc: LocalSidecarCluster, topic: str, wanted: set[str], *, what: str, linger: float = 0
) -> set[str]:
    """The topic's providers the DHT lists, once ``wanted`` are among them; looked up
    again ``linger`` seconds later (time for a wrong announcement to land)."""
    found: set[str] = set()
    async with sc.cluster.nodes[AUTHOR].client(routing_timeout=20.0) as kubo:

        async def listed() -> bool:
            found.clear()
            providers = await kubo.find_providers(cid_from_str(topic), count=20)
            found.update(p.peer_id for p in providers)
            return wanted <= found

        await wait_until(listed, deadline=40, what=what, interval=1)
        if linger:
            await anyio.sleep(linger)
            await listed()
    return found


async def test_two_subscribers_closest_to_the_topic_announce_it(sc: LocalSidecarCluster) -> None:
    topic = await setup_topic(sc, AUTHOR, "announced", SUBSCRIBERS)
    peers = [n.peer_id for n in sc.cluster.nodes]
    expected = set(announcers(cid_from_str(topic), peers, peers[AUTHOR], 2))
    assert len(expected) == 2

    async def decided() -> bool:
        left = [await _gauge(sc, i, "pulsarcast_topics_left_to_announcers") for i in SUBSCRIBERS]
        return sum(left) == 3

    await wait_until(decided, deadline=40, what="three subscribers leaving it to two", interval=0.5)
    for i in SUBSCRIBERS:
        left = await _gauge(sc, i, "pulsarcast_topics_left_to_announcers")
        assert (left == 0) is (peers[i] in expected), f"node{i}"

    found = await _providers(
        sc, topic, expected | {peers[AUTHOR]}, what="the author and the two announcers"
    )
    assert found == expected | {peers[AUTHOR]}, "a subscriber outside the two announced"


async def test_subscribers_that_filter_leave_the_topic_to_its_author(
    sc: LocalSidecarCluster,
) -> None:
    """A subscriber whose filter prunes what reaches it keeps part of the history,
    so it does not announce the topic (docs/sidecar.md "Providing"): with every
    subscriber filtering, each counts the topic as left to others, none announces
    it, and the DHT lists the author alone."""
    async with sc.client(AUTHOR) as c:
        topic = (await c.post("/v1/topics", json={"name": "filtered"})).json()["cid"]
    names = ("pulsarcast_topics_left_to_announcers", "pulsarcast_topics_announced_total")
    before = {(i, n): await _gauge(sc, i, n) for i in SUBSCRIBERS for n in names}
    for i in SUBSCRIBERS:
        async with sc.client(i) as c:
            r = await c.post(f"/v1/topics/{topic}/subscribe", json={"filter": f"ups >= {i}"})
            assert r.status_code == 200, r.text

    async def decided() -> bool:
        for i in SUBSCRIBERS:
            if await _gauge(sc, i, names[0]) != before[i, names[0]] + 1:
                return False
        return True

    await wait_until(decided, deadline=40, what="every subscriber leaving it", interval=0.5)
    peers = [n.peer_id for n in sc.cluster.nodes]
    found = await _providers(sc, topic, {peers[AUTHOR]}, what="the author's record", linger=3)
    assert found == {peers[AUTHOR]}, "a subscriber that filters announced the topic"
    for i in SUBSCRIBERS:
        assert await _gauge(sc, i, names[1]) == before[i, names[1]], f"node{i} announced"
