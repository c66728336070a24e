"""Integration tests of the Kubo RPC client against real Kubo daemons (docs/protocol.md §2)."""

from __future__ import annotations

import os
import socket
from typing import Any

import anyio
import dag_cbor
import pytest
from anyio.abc import SocketStream

from pulsarcast_ipfs.cluster import ClusterConfig, LocalCluster
from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.kademlia import peer_position
from pulsarcast_ipfs.kubo import (
    KuboAPIError,
    KuboClient,
    KuboConfig,
    KuboInvalidArgument,
    KuboNotFound,
    KuboPubsubDisabled,
    KuboStreamMountingDisabled,
    KuboTimeout,
    KuboUnavailable,
    closest_known_peers,
    dag_cbor_cid,
)
from pulsarcast_ipfs.testing import wait_until

pytestmark = [pytest.mark.anyio, pytest.mark.kubo]

UNKNOWN_PEER = "12D3KooWQYhTNQdmr3ArTeUHRYzFg94BKyTkoWBDWez9kSCVe2Xo"


def _event_bytes(payload: bytes, parent: CID | None = None) -> bytes:
    link = parent.to_multiformats() if parent is not None else None  # dag_cbor's own type
    return bytes(dag_cbor.encode({"payload": payload, "parent": link, "n": len(payload)}))


async def test_id_and_version(kubo_pair: LocalCluster) -> None:
    async with kubo_pair[0].client() as kubo:
        me = await kubo.id()
        version = await kubo.version()
    assert me.peer_id == kubo_pair[0].peer_id
    assert "/ipfs/lan/kad/1.0.0" in me.protocols
    if not os.environ.get("PULSARCAST_IPFS_BIN"):
        assert version.version == "0.43.0"  # the pinned Kubo (tools/kubo/go.mod)
    assert version.version.count(".") == 2


async def test_config_get_set_and_unset_keys(kubo_pair: LocalCluster) -> None:
    async with kubo_pair[0].client() as kubo:
        assert await kubo.config_get("Provide.Strategy") == "pinned"  # the cluster sets it
        assert await kubo.config_get("Experimental.Libp2pStreamMounting") is True
        assert await kubo.config_get("Provide.DHT.Interval") == "0s"  # no periodic reprovide
        assert await kubo.config_get("Provide.DHT.MaxWorkers") is None  # not set: the default


async def test_block_put_stores_exact_bytes_and_is_fetched_by_a_peer(
    kubo_pair: LocalCluster,
) -> None:
    parent = dag_cbor_cid(_event_bytes(b"parent"))
    data = _event_bytes(os.urandom(16), parent)
    async with kubo_pair[0].client() as a, kubo_pair[1].client() as b:
        cid = await a.block_put(data)
        assert cid == dag_cbor_cid(data)
        assert str(cid).startswith("bafyrei")
        assert await a.block_get(cid) == data
        assert await b.block_get(str(cid), max_wait=20) == data
        node = await a.dag_get(cid)
    assert node["parent"] == {"/": str(parent)}
    assert node["n"] == 16


async def test_block_put_many_is_one_request_in_order_and_names_a_refused_block(
    kubo_pair: LocalCluster,
) -> None:
    blocks = [_event_bytes(os.urandom(8 + i)) for i in range(100)]
    async with kubo_pair[0].client() as kubo:
        assert await kubo.block_put_many([]) == ()  # no request at all
        cids = await kubo.block_put_many(blocks)
        assert cids == tuple(dag_cbor_cid(b) for b in blocks)
        for i in (0, 57, 99):
            assert await kubo.block_get(cids[i], max_wait=1) == blocks[i]
        direct = await kubo.pin_ls(pin_type="direct")
        assert not {str(c) for c in cids} & set(direct)  # put unpinned
        # Kubo refuses a block over 2 MiB and stops there: the one before it is stored,
        # the one after it is not, and the error says which block was refused.
        before, big, after = (
            _event_bytes(os.urandom(8)),
            _event_bytes(os.urandom(2 << 20)),
            _event_bytes(os.urandom(8)),
        )
        with pytest.raises(KuboAPIError, match=r"stored 1 of 3 blocks and refused block 1"):
            await kubo.block_put_many([before, big, after])
        assert await kubo.block_get(dag_cbor_cid(before), max_wait=1) == before
        with pytest.raises(KuboTimeout):
            await kubo.block_get(dag_cbor_cid(after), max_wait=1)
        with pytest.raises(KuboAPIError, match="over 2MiB"):
            await kubo.block_put_many([big])


async def test_block_import_many_stores_all_unpinned_or_none_and_keeps_the_connection(
    kubo_pair: LocalCluster,
) -> None:
    """The block store's puts: one ``dag/import`` of a CAR naming no roots."""
    blocks = [_event_bytes(os.urandom(8 + i)) for i in range(100)]
    async with kubo_pair[0].client() as kubo, kubo_pair[1].client() as other:
        assert await kubo.block_import_many([]) == ()  # no request at all
        cids = await kubo.block_import_many(blocks)
        assert cids == tuple(dag_cbor_cid(b) for b in blocks)
        for i in (0, 57, 99):
            assert await kubo.block_get(cids[i], max_wait=1) == blocks[i]
        assert await other.block_get(cids[57], max_wait=20) == blocks[57]  # over bitswap
        assert not {str(c) for c in cids} & set(await kubo.pin_ls(pin_type="all"))
        # Unlike block/put, Kubo answers nothing and keeps the connection.
        assert kubo._pool is not None
        opened = kubo._pool.connections_opened
        for _ in range(3):
            await kubo.block_import_many(blocks[:10], cids=cids[:10])
        assert kubo._pool.connections_opened == opened
        # Kubo refuses a block over 2 MiB, or one that is not its CID's, and stores
        # none of the archive; the error names the block.
        before, big, after = (
            _event_bytes(os.urandom(8)),
            _event_bytes(os.urandom(2 << 20)),
            _event_bytes(os.urandom(8)),
        )
        with pytest.raises(KuboAPIError, match=f"{dag_cbor_cid(big)}.*over 2MiB"):
            await kubo.block_import_many([before, big, after])
        wrong = _event_bytes(os.urandom(8))
        with pytest.raises(KuboAPIError, match="integrity"):
            await kubo.block_import_many([before, wrong], cids=[dag_cbor_cid(before), cids[0]])
        for data in (before, after, wrong):
            with pytest.raises(KuboTimeout):
                await kubo.block_get(dag_cbor_cid(data), max_wait=1)


async def test_pin_add_and_rm(kubo_pair: LocalCluster) -> None:
    async with kubo_pair[0].client() as kubo:
        cid = await kubo.block_put(_event_bytes(os.urandom(8)))
        assert await kubo.pin_add(cid, recursive=False) == (str(cid),)
        assert await kubo.pin_rm(cid, recursive=False) == (str(cid),)
        with pytest.raises(KuboNotFound):
            await kubo.pin_rm(cid, recursive=False)


async def test_pin_and_unpin_many_then_gc(kubo_pair: LocalCluster) -> None:
    async with kubo_pair[0].client() as kubo:
        cids = [await kubo.block_put(_event_bytes(os.urandom(8))) for _ in range(3)]
        kept = await kubo.block_put(_event_bytes(os.urandom(8)))
        assert await kubo.pin_add_many([]) == ()
        assert set(await kubo.pin_add_many([*cids, kept])) == {str(c) for c in [*cids, kept]}
        direct = await kubo.pin_ls(pin_type="direct")
        assert all(direct[str(c)] == "direct" for c in [*cids, kept])
        assert set(await kubo.pin_rm_many(cids[:2])) == {str(c) for c in cids[:2]}
        # Kubo stops at a CID that is not pinned, having unpinned those before it.
        with pytest.raises(KuboNotFound):
            await kubo.pin_rm_many([cids[2], cids[0]])
        assert str(cids[2]) not in await kubo.pin_ls(pin_type="direct")
        assert await kubo.repo_gc() >= 3
        assert await kubo.block_get(kept, max_wait=1)  # pinned: kept
        with pytest.raises(KuboTimeout):
            await kubo.block_get(cids[0], max_wait=1)
        await kubo.pin_rm_many([kept])


async def test_routing_findprovs_streams_and_stops_early(kubo_pair: LocalCluster) -> None:
    async with kubo_pair[0].client() as a, kubo_pair[1].client() as b:
        cid = await a.block_put(_event_bytes(os.urandom(8)))
        await a.pin_add_many([cid], fast_provide_root=False)
        await a.provide_once(cid)

        async def found() -> bool:
            return bool(await b.routing_findprovs(cid, 1, max_wait=5))

        await wait_until(found, deadline=30, what="a provider record")
        (prov,) = await b.routing_findprovs(cid, 4, max_wait=5)
        assert prov.peer_id == kubo_pair[0].peer_id and prov.addresses
        nobody = dag_cbor_cid(_event_bytes(os.urandom(8)))
        with anyio.fail_after(10):
            assert await b.routing_findprovs(nobody, 1, max_wait=3) == ()
        with pytest.raises(ValueError):
            await b.routing_findprovs(cid, 0)
        await a.pin_rm_many([cid])


async def test_provide_then_find_providers(kubo_pair: LocalCluster) -> None:
    async with kubo_pair[0].client() as a, kubo_pair[1].client() as b:
        cid = await a.block_put(_event_bytes(os.urandom(8)))
        await a.provide(cid)
        providers = await b.find_providers(cid, count=1, max_wait=20)
    assert [p.peer_id for p in providers] == [kubo_pair[0].peer_id]


async def test_find_peer_and_routing_table(kubo_pair: LocalCluster) -> None:
    a_node, b_node = kubo_pair[0], kubo_pair[1]
    async with a_node.client() as a:
        found = await a.find_peer(b_node.peer_id)
        table = await a.stats_dht()
        peers = await a.swarm_peers()
    assert found.peer_id == b_node.peer_id
    assert any(addr.endswith(b_node.swarm_address.split("/")[-1]) for addr in found.addresses)
    lan = [e for e in table.entries if e.dht == "lan"]
    assert [e.peer_id for e in lan] == [b_node.peer_id]
    assert lan[0].connected
    assert table.peers("wan") == ()
    assert b_node.peer_id in {p.peer_id for p in peers}
    # The node itself is ranked too (docs/protocol.md §3): closest to itself is itself.
    ranking = closest_known_peers(a_node.peer_id, table, self_id=a_node.peer_id)
    assert ranking == [a_node.peer_id, b_node.peer_id]
    nearest_to_b = closest_known_peers(peer_position(b_node.peer_id), table)
    assert nearest_to_b == [b_node.peer_id]


async def test_find_peer_errors(kubo_pair: LocalCluster) -> None:
    async with kubo_pair[0].client() as kubo:
        with pytest.raises(KuboNotFound, match="not found"):
            await kubo.find_peer(UNKNOWN_PEER, max_wait=10)
        with pytest.raises(KuboInvalidArgument):
            await kubo.find_peer("not-a-peer-id")


async def test_swarm_connect_bad_address(kubo_pair: LocalCluster) -> None:
    async with kubo_pair[0].client() as kubo:
        with pytest.raises(KuboInvalidArgument):
            await kubo.swarm_connect("garbage")


async def test_p2p_forward_carries_bytes_and_reports_sender(kubo_pair: LocalCluster) -> None:
    """``p2p listen --report-peer-id``: the target first reads ``<peer id>\\n`` (§6)."""
    receiver, sender = kubo_pair[0], kubo_pair[1]
    protocol = "/x/pulsarcast-test/1.0.0"
    received: list[bytes] = []
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    target_port = listener.extra(anyio.abc.SocketAttribute.local_port)

    async def serve(stream: SocketStream) -> None:
        async with stream:
            buf = b""
            while buf.count(b"\n") < 2:
                buf += await stream.receive()
            received.append(buf)
            await stream.send(b"pong\n")

    with socket.socket() as s:  # a free port for the forward's local end
        s.bind(("127.0.0.1", 0))
        forward_port = s.getsockname()[1]
    async with receiver.client() as r, sender.client() as s_kubo, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, serve)
        await r.p2p_listen(protocol, f"/ip4/127.0.0.1/tcp/{target_port}", report_peer_id=True)
        await s_kubo.p2p_forward(protocol, f"/ip4/127.0.0.1/tcp/{forward_port}", receiver.peer_id)
        listeners = await r.p2p_ls()
        forwards = await s_kubo.p2p_ls()
        assert [(x.protocol, x.is_forward) for x in listeners] == [(protocol, False)]
        assert [(x.protocol, x.is_forward) for x in forwards] == [(protocol, True)]
        async with await anyio.connect_tcp("127.0.0.1", forward_port) as conn:
            await conn.send(b"ping\n")
            reply = b""
            while not reply.endswith(b"\n"):
                reply += await conn.receive()
        assert await s_kubo.p2p_close(protocol=protocol) == 1
        assert await r.p2p_close(close_all=True) == 1
        assert await r.p2p_ls() == ()
        tg.cancel_scope.cancel()
    await listener.aclose()
    assert reply == b"pong\n"
    assert received == [sender.peer_id.encode() + b"\nping\n"]


async def test_pubsub_round_trip(kubo_pair: LocalCluster) -> None:
    topic = "pulsarcast/tést topic"  # not URL-safe: must travel multibase-encoded
    async with kubo_pair[0].client() as a, kubo_pair[1].client() as b:
        async with a.pubsub_sub(topic) as sub_a, b.pubsub_sub(topic):
            assert topic in await a.pubsub_ls()

            async def mesh_formed() -> bool:
                return kubo_pair[0].peer_id in await b.pubsub_peers(topic)

            await wait_until(mesh_formed, deadline=20, what="the pubsub peers to meet")
            assert kubo_pair[1].peer_id in await a.pubsub_peers()
            await b.pubsub_pub(topic, b"hello \x00 bytes")
            with anyio.fail_after(20):
                message = await sub_a.__anext__()

        async def unsubscribed() -> bool:  # Kubo drops it once it sees the stream closed
            return topic not in await a.pubsub_ls()

        await wait_until(unsubscribed, deadline=10, what="Kubo to drop the subscription")
    assert message.data == b"hello \x00 bytes"
    assert message.from_peer == kubo_pair[1].peer_id
    assert message.topics == (topic,)
    assert message.seqno


async def test_pubsub_subscription_cancels_cleanly(kubo_pair: LocalCluster) -> None:
    async with kubo_pair[0].client() as kubo:
        with anyio.move_on_after(0.5) as scope:
            async with kubo.pubsub_sub("nobody-publishes") as sub:
                async for _ in sub:
                    pytest.fail("no message was published")
        assert scope.cancelled_caught

        async def unsubscribed() -> bool:
            return "nobody-publishes" not in await kubo.pubsub_ls()

        await wait_until(unsubscribed, deadline=10, what="Kubo to drop the subscription")


async def test_key_sign_and_verify(kubo_pair: LocalCluster) -> None:
    async with kubo_pair[0].client() as kubo:
        signed = await kubo.key_sign(b"event bytes")
        assert signed.key_name == "self"
        assert len(signed.signature) == 64  # ed25519
        assert await kubo.key_verify(b"event bytes", signed.signature)
        assert not await kubo.key_verify(b"other bytes", signed.signature)
        with pytest.raises(KuboNotFound):
            await kubo.key_sign(b"x", key="no-such-key")


async def test_stats_bw_total_and_per_protocol(kubo_pair: LocalCluster) -> None:
    async with kubo_pair[0].client() as a, kubo_pair[1].client() as b:
        await b.find_peer(kubo_pair[0].peer_id)  # some DHT traffic
        await a.block_get(await b.block_put(_event_bytes(os.urandom(32))), max_wait=20)

        async def counted() -> bool:  # libp2p's meters are swept once a second
            return (await a.stats_bw(protocol="/ipfs/bitswap/1.2.0")).total_in > 0

        await wait_until(counted, deadline=10, what="bitswap bytes in stats/bw")
        total = await a.stats_bw()
        per = await a.stats_bw_by_protocol(["/ipfs/bitswap/1.2.0", "/ipfs/lan/kad/1.0.0"])
    assert total.total_in > 0 and total.total_out > 0
    assert per["/ipfs/bitswap/1.2.0"].protocol == "/ipfs/bitswap/1.2.0"
    assert per["/ipfs/bitswap/1.2.0"].total_in > 0
    assert per["/ipfs/lan/kad/1.0.0"].total_in + per["/ipfs/lan/kad/1.0.0"].total_out > 0
    assert per["/ipfs/bitswap/1.2.0"].total_in < total.total_in


async def test_bad_cid_and_missing_block(kubo_pair: LocalCluster) -> None:
    async with kubo_pair[0].client(timeout=2.0) as kubo:
        with pytest.raises(KuboInvalidArgument, match="block/get"):
            await kubo.block_get("notacid")
        with pytest.raises(KuboInvalidArgument):
            await kubo.dag_get("bafyfoo")
        missing = dag_cbor_cid(os.urandom(16))
        with pytest.raises(KuboTimeout):  # Kubo's own deadline
            await kubo.block_get(missing, max_wait=0.5)
        with pytest.raises(KuboTimeout):  # the client's deadline
            await kubo.block_get(missing)


async def test_disabled_features_then_daemon_down() -> None:
    config = ClusterConfig(nodes=1, stream_mounting=False)
    async with LocalCluster(config=config) as cluster:
        node = cluster[0]
        async with node.client() as kubo:
            with pytest.raises(KuboStreamMountingDisabled):
                await kubo.p2p_listen("/x/t/1.0.0", "/ip4/127.0.0.1/tcp/9")
            with pytest.raises(KuboStreamMountingDisabled):
                await kubo.p2p_ls()
            with pytest.raises(KuboPubsubDisabled):
                await kubo.pubsub_pub("t", b"x")
    assert not node.is_running()
    async with KuboClient(config=KuboConfig(base_url=node.api_url, connect_timeout=2)) as kubo:
        with pytest.raises(KuboUnavailable, match="cannot reach"):
            await kubo.id()


async def test_the_retention_index_keeps_retained_events_through_gc(
    kubo_pair: LocalCluster,
) -> None:
    """One recursive pin of raw links keeps the dag-cbor event blocks through a real
    ``repo gc`` (Kubo's collector matches by multihash) without walking into their
    parents, which this node does not have; released events and relayed copies go;
    a store started again goes on from the pinned index (docs/sidecar.md "Retention")."""
    from sidecar._retainindex import INDEX_PIN_NAME
    from sidecar._store import BlockStore

    missing_parent = dag_cbor_cid(_event_bytes(b"never stored here"))
    events = [_event_bytes(os.urandom(8), missing_parent) for _ in range(300)]
    cids = [dag_cbor_cid(e) for e in events]
    relayed = _event_bytes(b"relayed")
    async with kubo_pair[0].client() as kubo:

        async def run_store(steps: Any) -> BlockStore:
            store = BlockStore(kubo=kubo, fetch_timeout=5.0, put_linger=0.0, index_linger=0.2)
            async with anyio.create_task_group() as tg:
                await tg.start(store.run, tg)
                await steps(store)
                with anyio.fail_after(30):
                    while store.pending:  # noqa: ASYNC110 (the writer's own pace)
                        await anyio.sleep(0.05)
                tg.cancel_scope.cancel()
            return store

        async def first(store: BlockStore) -> None:
            for cid, data in zip(cids, events, strict=True):
                store.store(cid, data, own=False, retain=True)
            store.store(dag_cbor_cid(relayed), relayed, own=False)
            await anyio.sleep(0.5)
            store.release(cids[:100])

        store = await run_store(first)
        assert store.retained_pinned == 200 and store.index_updates >= 1
        names = await kubo.pin_names(pin_type="recursive")
        assert list(names.values()).count(INDEX_PIN_NAME) == 1
        assert not set(await kubo.pin_ls(pin_type="direct")) & {str(c) for c in cids}
        await kubo.repo_gc()
        for cid in cids[100:]:
            assert await kubo.block_get(cid, max_wait=1)
        for cid in [cids[0], cids[99], dag_cbor_cid(relayed)]:
            with pytest.raises(KuboTimeout):
                await kubo.block_get(cid, max_wait=0.5)

        async def again(store: BlockStore) -> None:
            assert store.retained_pinned == 200  # read back from the pinned index
            store.release(cids[100:150])

        store = await run_store(again)
        assert store.retained_pinned == 150
        names = await kubo.pin_names(pin_type="recursive")
        assert list(names.values()).count(INDEX_PIN_NAME) == 1
        await kubo.repo_gc()
        assert await kubo.block_get(cids[150], max_wait=1)
        with pytest.raises(KuboTimeout):
            await kubo.block_get(cids[100], max_wait=0.5)


async def test_blocks_a_gc_collects_between_put_and_pin_are_kept_all_the_same(
    kubo_pair: LocalCluster,
) -> None:
    """A real ``repo gc`` while the pins wait for a batch: Kubo answers the store's
    ``offline`` direct pin of a collected own event at once ("not found locally"),
    and would fetch a collected retained event for the index's ``pin/update`` from the
    network for ever; the store puts them again, and a second gc keeps them all."""
    from sidecar._store import BlockStore

    own = [_event_bytes(b"own " + os.urandom(8)) for _ in range(3)]
    kept = [_event_bytes(b"kept " + os.urandom(8)) for _ in range(3)]
    cids = [dag_cbor_cid(b) for b in own + kept]
    async with kubo_pair[0].client() as kubo:
        store = BlockStore(
            kubo=kubo, fetch_timeout=5.0, put_linger=0.0, pin_linger=2.0, index_linger=2.0
        )
        async with anyio.create_task_group() as tg:
            await tg.start(store.run, tg)
            for data in own:
                store.store(dag_cbor_cid(data), data, own=True)
            for data in kept:
                store.store(dag_cbor_cid(data), data, own=False, retain=True)
            await wait_until(lambda: store.stored == 6, deadline=10, what="the puts")
            await kubo.repo_gc()  # before the pins: they wait up to 2 s for more
            await wait_until(lambda: not store.pending, deadline=30, what="the pins")
            tg.cancel_scope.cancel()
        assert store.put_again == 6 and store.pin_failed == 0
        await kubo.repo_gc()
        for cid in cids:  # node 1 never had them: only this node's blockstore answers
            assert await kubo.block_get(cid, max_wait=2)
