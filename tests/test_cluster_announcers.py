"""Bounded topic announcers on real Kubo daemons (docs/sidecar.md "Providing").

Six nodes with ``--topic-announcers 2``: node 0 creates a topic, nodes 1-5
subscribe (a flat tree: the author is the root, the five its children, all in its
MEMBERS list). Exactly two subscribers announce the topic, the two whose peer IDs
are closest to it (``sidecar._announce.announcers``); the other three say they leave
it to them (``pulsarcast_topics_left_to_announcers``). The DHT then lists the author
and those two, none of the other three.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import pytest

from pulsarcast_ipfs.cluster import LocalSidecarCluster
from pulsarcast_ipfs.cluster._faults import setup_topic
from pulsarcast_ipfs.core import cid_from_str
from pulsarcast_ipfs.testing import wait_until
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
        text = (await c.get("/metrics")).text
    found = re.search(rf"^{name} (\S+)$", text, re.M)
    assert found, name
    return float(found.group(1))


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

    found: set[str] = set()
    async with sc.cluster.nodes[AUTHOR].client(routing_timeout=20.0) as kubo:

        async def listed() -> bool:
            found.clear()
            providers = await kubo.find_providers(cid_from_str(topic), count=20)
            found.update(p.peer_id for p in providers)
            return expected | {peers[AUTHOR]} <= found

        await wait_until(listed, deadline=40, what="the author and the two announcers", interval=1)
    assert found == expected | {peers[AUTHOR]}, "a subscriber outside the two announced"
