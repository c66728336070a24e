"""Who announces an event block (docs/sidecar.md "Providing").

The cluster's Kubo nodes run ``Provide.Strategy=pinned``: nothing is announced on
``block/put``; the block's publisher pins it and announces it with ``provide/once``
(Kubo's reprovider re-announces pinned blocks later); a relay or subscriber keeps
its copy unpinned. Checked on real daemons as the sidecar does it: the publisher is
found as a provider, a node that only stored the block is not, and its copy is
still served over bitswap.
"""

from __future__ import annotations

import os

import dag_cbor
import pytest

from pulsarcast_ipfs.cluster import ClusterConfig, LocalCluster
from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.kubo import KuboClient
from pulsarcast_ipfs.testing import wait_until

pytestmark = [pytest.mark.anyio, pytest.mark.kubo, pytest.mark.cluster]


async def providers_once_found(
    reader: KuboClient, cid: CID, peer: str, deadline: float = 30.0
) -> set[str]:
    """The providers ``reader`` finds for ``cid``, asking again until ``peer`` is among
    them (``TimeoutError`` after ``deadline`` seconds)."""
    found: set[str] = set()

    async def listed() -> bool:
        found.clear()
        found.update(p.peer_id for p in await reader.find_providers(cid, count=20))
        return peer in found

    await wait_until(
        listed, deadline=deadline, what=f"{peer} among the providers of {cid}", interval=0.5
    )
    return found


async def test_only_the_author_announces_a_pinned_event_block() -> None:
    block = dag_cbor.encode({"payload": os.urandom(64), "n": 1})
    async with LocalCluster(config=ClusterConfig(nodes=3)) as cluster:
        author, subscriber, reader = cluster.nodes
        async with (
            author.client() as a,
            subscriber.client() as s,
            reader.client(routing_timeout=20.0) as r,
        ):
            # The subscriber stores first, so its provider has had the longest
            # time to announce, were it going to.
            cid = await s.block_put(block, pin=False)
            assert await a.block_put(block, pin=True) == cid
            await a.provide_once(cid)
            found = await providers_once_found(r, cid, author.peer_id)
            assert author.peer_id in found, "the author's provide/once was never found"
            assert subscriber.peer_id not in found
            # The subscriber's copy is served over bitswap, even with the publisher gone.
            await cluster.kill(author.index)
            assert await r.block_get(cid, max_wait=20) == block


async def test_a_direct_pin_is_announced_without_provide_once() -> None:
    """Under ``Provide.Strategy=pinned`` Kubo announces a block as soon as it is pinned
    directly, so the sidecar's ``announce = "auto"`` skips ``provide/once`` (which
    would announce it a second time)."""
    block = dag_cbor.encode({"payload": os.urandom(64), "n": 2})
    async with LocalCluster(config=ClusterConfig(nodes=3)) as cluster:
        author, _, reader = cluster.nodes
        async with author.client() as a, reader.client(routing_timeout=20.0) as r:
            assert await a.config_get("Provide.Strategy") == "pinned"
            cid = await a.block_put(block, pin=False)
            await a.pin_add(cid, recursive=False)
            found = await providers_once_found(r, cid, author.peer_id)
            assert author.peer_id in found, "a direct pin was never announced"
