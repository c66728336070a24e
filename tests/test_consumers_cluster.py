"""Per-consumer subscriptions on real Kubo daemons (docs/http-api.md "Consumers").

Two Kubo daemons, a sidecar on each. Node 0 creates the topic and publishes; on
node 1 two consumers with different filters share one sidecar:

1. each consumer's stream holds exactly the events its own filter matches, and the
   node's subscription in the tree is their union (its subtree summary, as it tells
   its parent; and the node keeps no event that neither wants);
2. a third, unfiltered consumer joins (the union is everything: it gets the events
   the other two do not want) and leaves (the union is back to the two filters);
3. a named consumer resumes from its own cursor after its sidecar restarts: it gets
   exactly the matching events published while the sidecar was down;
4. as a user meets it: ``pulsarcast sub T`` and ``pulsarcast sub T --where …`` run at
   once against one sidecar, and each prints exactly its own events.
"""

from __future__ import annotations

import base64
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from pulsarcast_ipfs.cluster import LocalSidecarCluster
from pulsarcast_ipfs.core import matches, parse_filter
from pulsarcast_ipfs.polling import poll_until
from pulsarcast_ipfs.testing import ok, wait_joined, wait_until

pytestmark = [pytest.mark.kubo, pytest.mark.cluster, pytest.mark.anyio, pytest.mark.timeout(300)]

HOT = "ups >= 10"
ALICE = "user = 'alice'"


@pytest.fixture(scope="module")
async def sc(anyio_backend: str) -> AsyncIterator[LocalSidecarCluster]:
    async with LocalSidecarCluster(nodes=2, run="consumers") as cluster:
        yield cluster


async def consumer(sc: LocalSidecarCluster, topic: str, **body: Any) -> str:
    doc = await ok(sc, 1, "POST", f"/v1/topics/{topic}/consumers", json=body)
    return str(doc["id"])


async def served(sc: LocalSidecarCluster, consumer_id: str) -> list[str]:
    """The payloads consumer ``consumer_id``'s stream serves from its cursor now."""
    async with sc.client(1, timeout=60.0) as c:
        r = await c.get("/v1/deliveries", params={"consumer": consumer_id, "follow": "false"})
    assert r.status_code == 200, r.text
    return [base64.b64decode(json.loads(x)["payload"]).decode() for x in r.text.splitlines() if x]


async def node_log(sc: LocalSidecarCluster, topic: str) -> list[str]:
    async with sc.client(1, timeout=60.0) as c:
        r = await c.get("/v1/deliveries", params={"topic": topic, "after": 0, "follow": "false"})
    return [base64.b64decode(json.loads(x)["payload"]).decode() for x in r.text.splitlines() if x]


async def topic_status(sc: LocalSidecarCluster, topic: str) -> dict[str, Any]:
    status = await ok(sc, 1, "GET", "/v1/status")
    found: dict[str, Any] = next(t for t in status["topics"] if t["root_cid"] == topic)
    return found


async def parent_sees(sc: LocalSidecarCluster, topic: str, want: list[str]) -> None:
    """Wait until node 0, node 1's parent, holds ``want`` as node 1's subtree summary
    (a SUMMARY goes at most every second)."""
    me = (await ok(sc, 1, "GET", "/v1/status"))["peer_id"]
    seen: list[Any] = []

    async def there() -> bool:
        status = await ok(sc, 0, "GET", "/v1/status")
        st = next(t for t in status["topics"] if t["root_cid"] == topic)
        seen[:] = [st["child_summaries"].get(me)]
        return seen[0] is not None and sorted(seen[0]) == sorted(want)

    if not await poll_until(there, deadline=20, interval=0.2):
        raise AssertionError(f"node0 holds node1's summary as {seen[0]}, not {want}")


async def publish(sc: LocalSidecarCluster, topic: str, posts: dict[str, dict[str, Any]]) -> None:
    for text, attrs in posts.items():
        await ok(
            sc,
            0,
            "POST",
            f"/v1/topics/{topic}/publish",
            json={"ack": "local", "text": text, "attributes": attrs},
        )


def matching(posts: dict[str, dict[str, Any]], where: str) -> list[str]:
    f = parse_filter(where)
    return [text for text, attrs in posts.items() if matches(f, attrs)]


class Reader:
    """What each consumer has been served so far (its stream read from its cursor)."""

    def __init__(self, sc: LocalSidecarCluster) -> None:
        self.sc = sc
        self.got: dict[str, list[str]] = {}

    async def until(self, cid: str, want: list[str]) -> list[str]:
        async def there() -> bool:
            self.got.setdefault(cid, []).extend(await served(self.sc, cid))
            return set(want) <= set(self.got[cid])

        await wait_until(there, deadline=60, what=f"{want} on consumer {cid}", interval=0.5)
        return self.got[cid]


POSTS_1 = {
    "hot-1": {"ups": 12, "user": "bob"},
    "alice-1": {"ups": 2, "user": "alice"},
    "both-1": {"ups": 30, "user": "alice"},
    "none-1": {"ups": 1, "user": "bob"},
    "bare-1": {},
}
POSTS_2 = {
    "hot-2": {"ups": 99, "user": "carol"},
    "none-2": {"ups": 3, "user": "dave"},
    "alice-2": {"ups": 0, "user": "alice"},
}
POSTS_3 = {"none-3": {"ups": 4}, "hot-3": {"ups": 10}}


async def test_consumers_get_their_own_matches_and_the_tree_sees_the_union(
    sc: LocalSidecarCluster,
) -> None:
    topic = str((await ok(sc, 0, "POST", "/v1/topics", json={"name": "consumers"}))["cid"])
    hot = await consumer(sc, topic, filter=HOT)
    alice = await consumer(sc, topic, filter=ALICE)
    await wait_joined(sc, topic, (1,))
    st = await topic_status(sc, topic)
    union = sorted([str(parse_filter(HOT)), str(parse_filter(ALICE))])
    assert st["consumers"] == 2 and not st["explicit"]
    assert sorted(st["filters"]) == union and sorted(st["summary"]) == union
    assert st["parent"] is not None
    await parent_sees(sc, topic, union)
    reader = Reader(sc)

    await publish(sc, topic, POSTS_1)
    assert sorted(await reader.until(hot, matching(POSTS_1, HOT))) == ["both-1", "hot-1"]
    assert sorted(await reader.until(alice, matching(POSTS_1, ALICE))) == ["alice-1", "both-1"]

    # a third consumer, unfiltered: the union is everything, in the tree too
    everything = await consumer(sc, topic)
    st = await topic_status(sc, topic)
    assert st["filters"] is None and st["summary"] == ["*"] and st["consumers"] == 3
    await parent_sees(sc, topic, ["*"])
    await publish(sc, topic, POSTS_2)
    assert sorted(await reader.until(everything, list(POSTS_2))) == sorted(POSTS_2)
    await reader.until(hot, matching(POSTS_2, HOT))
    await reader.until(alice, matching(POSTS_2, ALICE))

    # it leaves: the union is the two filters again, in the tree too
    await ok(sc, 1, "DELETE", f"/v1/consumers/{everything}")
    st = await topic_status(sc, topic)
    assert sorted(st["summary"]) == union and st["consumers"] == 2
    await parent_sees(sc, topic, union)
    await publish(sc, topic, POSTS_3)
    await reader.until(hot, ["hot-3"])
    await anyio.sleep(2)  # anything else would have come with hot-3
    await reader.until(hot, [])
    await reader.until(alice, [])
    # exactly their own matches, each once
    assert sorted(reader.got[hot]) == sorted(
        matching(POSTS_1, HOT) + matching(POSTS_2, HOT) + matching(POSTS_3, HOT)
    )
    assert sorted(reader.got[alice]) == sorted(matching(POSTS_1, ALICE) + matching(POSTS_2, ALICE))
    # the node delivered the union: what nobody wanted while only the two were there
    # (none-1, bare-1, none-3) never reached its log
    logged = set(await node_log(sc, topic))
    assert {"none-1", "bare-1", "none-3"}.isdisjoint(logged)
    assert set(POSTS_2) <= logged

    # the last consumers go: the node leaves the topic
    await ok(sc, 1, "DELETE", f"/v1/consumers/{hot}")
    await ok(sc, 1, "DELETE", f"/v1/consumers/{alice}")
    status = await ok(sc, 1, "GET", "/v1/status")
    assert not any(t["subscribed"] for t in status["topics"] if t["root_cid"] == topic)


async def test_a_named_consumer_resumes_from_its_cursor_after_a_sidecar_restart(
    sc: LocalSidecarCluster,
) -> None:
    topic = str((await ok(sc, 0, "POST", "/v1/topics", json={"name": "durable"}))["cid"])
    await consumer(sc, topic, name="keeper", filter=HOT)
    await wait_joined(sc, topic, (1,))
    reader = Reader(sc)
    before = {"a": {"ups": 50}, "b": {"ups": 1}}
    await publish(sc, topic, before)
    assert await reader.until("keeper", ["a"]) == ["a"]
    await sc.stop_sidecar(1)
    missed = {"c": {"ups": 11}, "d": {"ups": 2}, "e": {"ups": 70}}
    await publish(sc, topic, missed)
    await sc.start_sidecar(1)
    got = await ok(sc, 1, "GET", "/v1/consumers/keeper")
    assert got["filter"] == str(parse_filter(HOT)) and got["durable"]
    # taken up by name: its own cursor (not "only new ones"), the events it missed
    await consumer(sc, topic, name="keeper", filter=HOT)
    again = Reader(sc)
    assert sorted(await again.until("keeper", ["c", "e"])) == ["c", "e"]
    await anyio.sleep(2)
    assert sorted(await again.until("keeper", [])) == ["c", "e"]
    await ok(sc, 1, "DELETE", "/v1/consumers/keeper")


PULSARCAST = str(Path(sys.executable).parent / "pulsarcast")


async def test_two_sub_processes_on_one_sidecar_each_print_their_own(
    sc: LocalSidecarCluster,
) -> None:
    """The bug as reported: a second ``sub --where`` on the same sidecar replaced the
    first one's (unfiltered) subscription, which then silently missed events."""
    topic = str((await ok(sc, 0, "POST", "/v1/topics", json={"name": "two-subs"}))["cid"])
    env = {k: v for k, v in os.environ.items() if not k.startswith("PULSARCAST_API")}
    env["PULSARCAST_API"] = sc[1].api_url
    posts = {"p1": {"ups": 1}, "p2": {"ups": 20}, "p3": {}, "p4": {"ups": 15}}
    outs: dict[str, bytes] = {}

    async def sub(key: str, *argv: str) -> None:
        result = await anyio.run_process([PULSARCAST, "sub", topic, *argv], env=env, check=False)
        assert result.returncode == 0, result.stderr
        outs[key] = result.stdout

    with anyio.fail_after(90):  # a sub that misses an event would wait for ever
        await both_subs(sub, posts, topic, sc)
    assert outs["all"].decode().split() == list(posts)
    assert outs["hot"].decode().split() == ["p2", "p4"]
    # both exited: their (anonymous) consumers are closed, and the node left the topic
    assert (await ok(sc, 1, "GET", "/v1/consumers"))["consumers"] == []
    status = await ok(sc, 1, "GET", "/v1/status")
    assert not any(t["subscribed"] for t in status["topics"] if t["root_cid"] == topic)


async def both_subs(
    sub: Any, posts: dict[str, dict[str, Any]], topic: str, sc: LocalSidecarCluster
) -> None:
    """Start ``sub T`` (unfiltered), then, once its consumer is open, ``sub T --where``
    (the order of the report); once node 1 is in the tree, publish ``posts``; returns
    once both exited."""

    async def consumers_open(n: int) -> None:
        async def there() -> bool:
            return len((await ok(sc, 1, "GET", "/v1/consumers"))["consumers"]) == n

        await wait_until(there, deadline=30, what=f"{n} sub processes' consumers")

    async with anyio.create_task_group() as tg:
        tg.start_soon(sub, "all", "--count", str(len(posts)))
        await consumers_open(1)
        tg.start_soon(sub, "hot", "--where", HOT, "--count", "2")
        await consumers_open(2)
        await wait_joined(sc, topic, (1,))
        await parent_sees(sc, topic, ["*"])
        await publish(sc, topic, posts)


async def test_two_sdk_subscriptions_on_one_sidecar_follow_their_own(
    sc: LocalSidecarCluster,
) -> None:
    """The async SDK: two subscriptions of one client, followed live at once."""
    from pulsarcast_ipfs.sdk import AsyncClient, ClientConfig

    topic = str((await ok(sc, 0, "POST", "/v1/topics", json={"name": "sdk-subs"}))["cid"])
    posts = {"s1": {"ups": 50}, "s2": {"user": "alice"}, "s3": {"ups": 2}, "s4": {"ups": 10}}
    got: dict[str, list[str]] = {"hot": [], "alice": []}
    async with AsyncClient(config=ClientConfig(api=sc[1].api_url)) as pc:
        async with (
            pc.subscription(topic, filter=HOT) as hot,
            pc.subscription(topic, filter=ALICE) as alice,
        ):

            async def follow(key: str, consumer_id: str, n: int) -> None:
                async for d in pc.deliveries(consumer=consumer_id):
                    got[key].append(d.event.text)
                    if len(got[key]) == n:
                        return

            await wait_joined(sc, topic, (1,))
            await parent_sees(sc, topic, sorted([str(parse_filter(HOT)), str(parse_filter(ALICE))]))
            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(follow, "hot", hot.id, 2)
                    tg.start_soon(follow, "alice", alice.id, 1)
                    await publish(sc, topic, posts)
            assert len(await pc.consumers()) == 2
        assert await pc.consumers() == ()  # closed when the block ended
    assert got == {"hot": ["s1", "s4"], "alice": ["s2"]}
