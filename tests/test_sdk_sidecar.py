"""The SDK against real sidecars: three Kubo daemons, a ``pulsarcast-sidecar`` each.

Shares one cluster per module; the test that restarts a sidecar comes last.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest

from pulsarcast_ipfs.cluster import LocalSidecarCluster
from pulsarcast_ipfs.core import MAX_PAYLOAD_SIZE
from pulsarcast_ipfs.sdk import (
    AsyncClient,
    BadRequest,
    Client,
    ClientConfig,
    Conflict,
    Delivery,
    EventLinking,
    InvalidParent,
    NotAllowed,
    PayloadTooLarge,
    PeerSet,
    UnknownTopic,
)
from pulsarcast_ipfs.testing import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.anyio]


@pytest.fixture(scope="module")
async def sc(anyio_backend: str) -> AsyncIterator[LocalSidecarCluster]:
    async with LocalSidecarCluster(nodes=3, run="sdk-test") as cluster:
        yield cluster


def client(sc: LocalSidecarCluster, i: int, *, reconnect_attempts: int = 5) -> AsyncClient:
    config = ClientConfig(api=sc[i].api_url, reconnect_attempts=reconnect_attempts)
    return AsyncClient(config=config)


async def join(pc: AsyncClient, topic: str) -> None:
    """Subscribe and wait until the node has a parent in the tree: ``subscribe``
    answers once the subscription is recorded, the JOIN travels on (docs/protocol.md §5)."""
    assert await pc.subscribe(topic) == topic

    async def joined() -> bool:
        st = (await pc.status()).topic(topic)
        return st is not None and st.subscribed and st.parent is not None

    await wait_until(joined, deadline=60, what="the join", interval=0.1)


async def collect(pc: AsyncClient, topic: str, want: int) -> list[Delivery]:
    got: list[Delivery] = []

    async def enough() -> bool:
        got[:] = [d async for d in pc.deliveries(topic, after=0, follow=False)]
        return len(got) >= want

    await wait_until(enough, deadline=30, what=f"{want} deliveries", interval=0.1)
    return got


async def test_topics_subscribe_publish_deliver(sc: LocalSidecarCluster) -> None:
    async with client(sc, 0) as a, client(sc, 1) as b, client(sc, 2) as c:
        assert (await a.health()).ok
        me = (await a.status()).peer_id
        topic = await a.create_topic("sdk-news", request_to_publish=True)
        assert (topic.name, topic.author, topic.cid) == ("sdk-news", me, topic.root_cid)
        assert topic.meta is not None
        assert topic.request_to_publish == PeerSet(enabled=True)
        fetched = await c.get_topic(topic.cid)
        assert fetched.cid == topic.cid and fetched.sub_topics == topic.sub_topics
        await join(b, topic.cid)
        await join(c, topic.cid)

        text = await b.publish(topic.cid, "héllo", ack="local")
        binary = await c.publish(topic.cid, b"\x00\xff\x10", ack="local")
        assert text.published and binary.published
        for pc in (a, b, c):
            got = await collect(pc, topic.cid, 2)
            assert sorted(d.payload for d in got) == sorted([b"\x00\xff\x10", "héllo".encode()])
            assert {d.cid for d in got} == {text.event, binary.event}
            assert all(d.topic_root == topic.cid and d.topic_name == "sdk-news" for d in got)
        status = await b.status()
        tstat = status.topic(topic.cid)
        assert tstat is not None and tstat.subscribed and tstat.parent is not None
        event = await a.get_event(str(text.event))
        assert event.text == "héllo" and event.topic == topic.cid

        # A new version keeps the root, links the old one, changes the options.
        v2 = await a.update_topic(topic.cid, event_linking=EventLinking.CUSTOM)
        assert (v2.parent, v2.root_cid, v2.event_linking) == (
            topic.cid,
            topic.cid,
            EventLinking.CUSTOM,
        )


async def test_history_pages_both_ways(sc: LocalSidecarCluster) -> None:
    async with client(sc, 0) as a, client(sc, 2) as c:
        topic = await a.create_topic("sdk-history")
        await join(c, topic.cid)
        cids = []
        for n in range(5):
            cids.append((await a.publish(topic.cid, f"e{n}", ack="local")).event)
            await collect(c, topic.cid, n + 1)  # one at a time: a single LAST_SEEN chain
        page = await c.history(topic.cid, limit=2)
        assert [e.text for e in page.events] == ["e4", "e3"] and page.next == cids[3]
        assert (page.complete, page.retained, page.heads, page.order) == (
            True,
            5,
            (cids[4],),
            "newest",
        )
        walked = [e async for e in c.iter_history(topic.cid, page_size=2)]
        assert [e.cid for e in walked] == cids[::-1]
        assert [e.parents for e in walked] == [(c,) for c in cids[::-1][1:]] + [()]
        assert [e.clock for e in walked] == [4, 3, 2, 1, 0]
        page = await c.history(topic.cid, order="oldest", after=cids[1], limit=2)
        assert [e.cid for e in page.events] == cids[2:4] and page.next == cids[3]
    with Client(config=ClientConfig(api=sc[2].api_url)) as sync:
        assert [e.text for e in sync.iter_history(topic.cid, page_size=3)] == [
            f"e{n}" for n in range(4, -1, -1)
        ]
        oldest = sync.iter_history(topic.cid, order="oldest", page_size=3)
        assert [e.text for e in oldest] == [f"e{n}" for n in range(5)]


async def test_refusals_are_typed(sc: LocalSidecarCluster) -> None:
    async with client(sc, 0) as a, client(sc, 1) as b:
        me = (await a.status()).peer_id
        closed = await a.create_topic(
            "sdk-closed", allowed_publishers=[me], request_to_publish=False
        )
        await join(b, closed.cid)
        with pytest.raises(NotAllowed) as info:
            await b.publish(closed.cid, "no", ack="local")
        assert info.value.status == 403 and "request to publish" in info.value.message
        with pytest.raises(UnknownTopic):
            await b.publish((await a.create_topic("sdk-unsubscribed")).cid, "x")
        with pytest.raises(BadRequest):
            await a.get_topic("not-a-cid")
        with pytest.raises(PayloadTooLarge):
            await a.publish(closed.cid, b"x" * (MAX_PAYLOAD_SIZE + 1), ack="local")

        custom = await a.create_topic("sdk-custom", event_linking="CUSTOM")
        other = await a.create_topic("sdk-other")
        foreign = (await a.publish(other.cid, "elsewhere", ack="local")).event
        assert foreign is not None
        with pytest.raises((Conflict, InvalidParent)):
            await a.publish(custom.cid, "child", parent=foreign, ack="local")
        first = await a.publish(custom.cid, "first", ack="local")
        second = await a.publish(custom.cid, "second", parent=first.event, ack="local")
        ev = await a.get_event(str(second.event))
        assert (ev.parents, ev.clock) == ((first.event,), 1)


async def test_request_to_publish(sc: LocalSidecarCluster) -> None:
    async with client(sc, 0) as a, client(sc, 1) as b:
        me = (await a.status()).peer_id
        asker = (await b.status()).peer_id
        topic = await a.create_topic(
            "sdk-restricted", allowed_publishers=[me], request_to_publish=[asker]
        )
        await join(b, topic.cid)
        out = await b.publish(topic.cid, "please publish", ack="local")
        assert out.status == "requested" and out.request_id
        (delivered,) = await collect(b, topic.cid, 1)
        assert (delivered.event.author, delivered.event.publisher) == (asker, me)
        assert delivered.event.text == "please publish"


async def test_a_followed_stream_survives_a_sidecar_restart(sc: LocalSidecarCluster) -> None:
    async with client(sc, 0) as a, client(sc, 1, reconnect_attempts=8) as b:
        topic = await a.create_topic("sdk-resume")
        await join(b, topic.cid)
        seen: list[Delivery] = []
        restarted = anyio.Event()

        async def follow() -> None:
            # from the topic's first delivery (``after=0``): the stream need not be
            # open yet when "before" is published
            async for d in b.deliveries(topic.cid, after=0):
                seen.append(d)
                if len(seen) == 1:
                    await sc.stop_sidecar(1)
                    await sc.start_sidecar(1)
                    restarted.set()
                if len(seen) == 2:
                    return

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(follow)
                await a.publish(topic.cid, "before", ack="local")
                await restarted.wait()

                async def rejoined() -> bool:
                    st = (await b.status()).topic(topic.cid)
                    return st is not None and st.parent is not None

                await wait_until(rejoined, deadline=60, what="node1 back in the tree")
                await a.publish(topic.cid, "after", ack="local")
        assert [d.event.text for d in seen] == ["before", "after"]
        assert seen[1].seq > seen[0].seq
