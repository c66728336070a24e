"""The 10-node local cluster acceptance test (real Kubo daemons behind Toxiproxy)."""

from __future__ import annotations

import os
import statistics
import time

import anyio
import psutil
import pytest
from anyio.abc import SocketAttribute, SocketStream

from pulsarcast_ipfs.cluster import ClusterConfig, ClusterNode, LocalCluster
from pulsarcast_ipfs.kubo import KuboClient, KuboError, dag_cbor_cid

pytestmark = [pytest.mark.anyio, pytest.mark.cluster, pytest.mark.slow]

PROTOCOL = "/x/pulsarcast-cluster-test/1.0.0"


async def _echo(stream: SocketStream) -> None:
    """Echo server behind ``p2p listen --report-peer-id``: first line is the sender."""
    async with stream:
        buf = b""
        while b"\n" not in buf:
            buf += await stream.receive()
        sender, _, rest = buf.partition(b"\n")
        await stream.send(b"from " + sender + b"\n")
        if rest:
            await stream.send(rest)
        try:
            while True:
                await stream.send(await stream.receive())
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            pass


async def _forward(
    sender: ClusterNode, receiver: ClusterNode, target_port: int
) -> tuple[KuboClient, KuboClient, int]:
    r = receiver.client()
    s = sender.client()
    await r.p2p_listen(PROTOCOL, f"/ip4/127.0.0.1/tcp/{target_port}", report_peer_id=True)
    probe = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = probe.extra(SocketAttribute.local_port)
    await probe.aclose()
    await s.p2p_forward(PROTOCOL, f"/ip4/127.0.0.1/tcp/{port}", receiver.peer_id)
    return r, s, port


async def _read_line(conn: SocketStream) -> bytes:
    buf = b""
    while not buf.endswith(b"\n"):
        buf += await conn.receive(1)
    return buf


async def _round_trips(port: int, count: int) -> list[float]:
    """Open one connection through the forward and time ``count`` echo round trips."""
    times: list[float] = []
    async with await anyio.connect_tcp("127.0.0.1", port) as conn:
        await conn.send(b"hello\n")
        await _read_line(conn)  # "from <peer>\n"
        await _read_line(conn)  # echo of hello
        for i in range(count):
            began = time.perf_counter()
            await conn.send(b"%d\n" % i)
            await _read_line(conn)
            times.append(time.perf_counter() - began)
    return times


async def test_ten_node_cluster() -> None:
    config = ClusterConfig(nodes=10, toxiproxy=True)
    async with LocalCluster(config=config) as cluster, anyio.create_task_group() as tg:
        pids = [n.pid for n in cluster.nodes] + [cluster.toxiproxy_pid]
        print(f"\n10 nodes with Toxiproxy up in {cluster.startup_seconds:.2f} s")

        # Every node's stats/dht has peers.
        for node in cluster.nodes:
            async with node.client() as kubo:
                table = await kubo.stats_dht()
            assert len(table.peers("lan")) >= 4, (node.name, table)

        # routing/findpeer of every node succeeds from every other.
        for a in cluster.nodes:
            async with a.client() as kubo:
                for b in cluster.nodes:
                    if a is not b:
                        found = await kubo.find_peer(b.peer_id, max_wait=20)
                        assert found.peer_id == b.peer_id

        # A block put on node 0 is fetched by CID on node 9.
        data = bytes([0xA1, 0x61, 0x70, 0x50]) + os.urandom(16)  # {"p": 16 random bytes}
        async with cluster[0].client() as k0, cluster[9].client() as k9:
            cid = await k0.block_put(data)
            assert await k9.block_get(cid, max_wait=30) == data
        assert cid == dag_cbor_cid(data)

        # A p2p forward from node 3 to node 7 carries bytes both ways and the
        # receiving side learns the sender's peer ID.
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
        target_port = listener.extra(SocketAttribute.local_port)
        tg.start_soon(listener.serve, _echo)
        r, s, port = await _forward(cluster[3], cluster[7], target_port)
        async with await anyio.connect_tcp("127.0.0.1", port) as conn:
            await conn.send(b"ping from 3\n")
            assert await _read_line(conn) == b"from " + cluster[3].peer_id.encode() + b"\n"
            assert await _read_line(conn) == b"ping from 3\n"
        await r.p2p_close(close_all=True)
        await s.p2p_close(close_all=True)
        await r.aclose()
        await s.aclose()

        # With a 200 ms latency toxic on node 5, a round trip through it is >= 200 ms longer.
        client_node, slow = cluster[2], cluster[5]
        async with client_node.client() as kc:
            # Make the 2<->5 connection one that node 2 dialled into node 5's proxy.
            await kc.swarm_disconnect(f"/p2p/{slow.peer_id}")
            await kc.swarm_connect(slow.multiaddr)
            conns = [p for p in await kc.swarm_peers() if p.peer_id == slow.peer_id]
            assert [c.address for c in conns] == [slow.announce_address]
        r, s, port = await _forward(client_node, slow, target_port)
        before = statistics.median(await _round_trips(port, 5))
        await slow.set_latency(200)
        after = statistics.median(await _round_trips(port, 5))
        await slow.set_latency(0)
        print(f"round trip 2->5: {before * 1000:.1f} ms, with the toxic {after * 1000:.1f} ms")
        assert after - before >= 0.200
        await r.aclose()
        await s.aclose()

        rss = [n.memory_rss() for n in cluster.nodes]
        print(f"idle Kubo RSS: mean {statistics.mean(rss) / 2**20:.0f} MiB")
        tg.cancel_scope.cancel()
    await listener.aclose()

    # Teardown leaves no ipfs or Toxiproxy process and no directory behind.
    assert not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]
    assert not cluster.base_dir.exists()


async def test_cut_isolates_a_node_and_restore_heals_it() -> None:
    async with LocalCluster(config=ClusterConfig(nodes=3, toxiproxy=True)) as cluster:
        victim = cluster[2]
        await victim.set_bandwidth(64)
        await victim.set_bandwidth(None)
        await victim.cut()
        async with cluster[0].client() as k0, victim.client() as kv:
            assert await kv.swarm_peers() == ()
            with pytest.raises(KuboError):  # inbound: the proxy refuses
                await k0.swarm_connect(victim.multiaddr)
            with pytest.raises(KuboError):  # outbound: the swarm filter refuses
                await kv.swarm_connect(cluster[1].multiaddr)
            await victim.restore()
            await k0.swarm_connect(victim.multiaddr)
            assert cluster[0].peer_id in {p.peer_id for p in await kv.swarm_peers()}
