"""Sidecar units without a network: configuration, persisted state, routing view, OpenAPI."""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import dag_cbor
import httpx
import pytest
from trio.testing import MockClock

from pulsarcast_ipfs.core import RetentionPolicy, compute_cid
from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.kademlia import bucket_index, peer_position
from pulsarcast_ipfs.kubo import KuboClient, KuboConfig
from pulsarcast_ipfs.testing import StrictKubo
from sidecar import (
    ConfigError,
    SidecarConfig,
    StateError,
    StateStore,
    limit_per_bucket,
    load_config,
    openapi_document,
)
from sidecar.__main__ import _loop_options, build_parser, config_from_args
from sidecar._retainindex import EMPTY_ROOT, INDEX_PIN_NAME
from sidecar._routing import RoutingView
from sidecar._store import BlockStore, kubo_announces_pins

PEERS = [
    "12D3KooWLUe8GDfnZQjtqGdY26g5TqQanqS9WPzoPW4Vr6cvZmHo",
    "12D3KooWDNDfKLbjtZoakhmoG9iHMGyvCvgtLxhkzJ4ZRUyqfo4Q",
    "12D3KooWPAas5F8jAbb8ZUDMWcRrGTK2XQgjsJtBZuYL6CcaJ5gW",
    "12D3KooWT2RXRVM1qWzZLkaWFCgcGy6aLryPoDVGnhvWP4Ucvss1",
    "12D3KooWMke9LfYheUvvisYoSjjMQV3swzx17PEZJYRBz2Wzrnki",
    "12D3KooWAaoFpxp1JcYb68xBmjcSRkoM6biWGUwYE4Z1kip3FEyL",
    "12D3KooWA5SZa6zkU8Gc69yygMkDbgraN8AXZLpHkmL5LKRzSXZS",
    "12D3KooWMPaajpz7oY6apM1vdYABQNGPtHvQR1mMyZwkWaWo5cWu",
]


# -- configuration ------------------------------------------------------------------------


def test_defaults_work_beside_a_default_ipfs_daemon() -> None:
    cfg = load_config(env={})
    assert cfg.kubo_api == "http://127.0.0.1:5001"
    assert (cfg.api_host, cfg.api_port) == ("127.0.0.1", 5050)
    assert cfg.state_path == Path("~/.pulsarcast").expanduser()
    assert cfg.metrics_path == cfg.state_path / "metrics"
    assert cfg.routing_k is None


def test_file_env_flags_precedence(tmp_path: Path) -> None:
    f = tmp_path / "sidecar.toml"
    f.write_text('[sidecar]\napi = "127.0.0.1:6000"\nrouting-k = 2\nrun = "file"\n')
    env = {"PULSARCAST_API": "127.0.0.1:7000", "PULSARCAST_RUN": "env"}
    cfg = load_config(file=f, env=env, flags={"run": "flag", "state_dir": str(tmp_path)})
    assert cfg.api == "127.0.0.1:7000"  # env beats file
    assert cfg.run == "flag"  # flag beats env
    assert cfg.routing_k == 2 and cfg.state_dir == tmp_path


@pytest.mark.parametrize(
    ("flags", "env", "text", "fragment"),
    [
        ({"api": "nohostport"}, {}, None, "HOST:PORT"),
        ({"api": "0.0.0.0:5050"}, {}, None, "requires an API token"),
        ({}, {"PULSARCAST_ROUTING_K": "many"}, None, "PULSARCAST_ROUTING_K"),
        ({"kubo_api": "127.0.0.1:5001"}, {}, None, "http://"),
        ({}, {}, "[sidecar]\nbogus = 1\n", "unknown key 'bogus'"),
        ({}, {}, "not = [toml", "not valid TOML"),
        ({}, {"PULSARCAST_ANNOUNCE": "sometimes"}, None, "announce: expected one of"),
        ({}, {"PULSARCAST_SLOW_PARENT_AFTER": "0"}, None, "slow_parent_after: must be positive"),
        ({}, {"PULSARCAST_FLAT_FANOUT": "65"}, None, "flat_fanout: between 0 and 64"),
        ({}, {"PULSARCAST_FLAT_FANOUT": "many"}, None, "PULSARCAST_FLAT_FANOUT"),
        ({}, {"PULSARCAST_DELEGATE_TTL": "60"}, None, "delegate_ttl: 0 (off) or at least"),
    ],
)
def test_bad_configuration_is_a_clear_error(
    tmp_path: Path, flags: dict[str, str], env: dict[str, str], text: str | None, fragment: str
) -> None:
    file = None
    if text is not None:
        file = tmp_path / "c.toml"
        file.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(fragment)):
        load_config(file=file, env=env, flags=flags)


@pytest.mark.parametrize(
    ("strategy", "announces"),
    [
        (None, True),  # not set: Kubo's default, "all"
        ("", True),
        ("all", True),
        ("pinned", True),
        ("roots", True),
        ("pinned+mfs", True),
        ("pinned+unique", True),
        ("mfs", False),
        ("nonsense", False),
        (42, False),
    ],
)
def test_which_kubo_provide_strategies_announce_a_pin(strategy: object, announces: bool) -> None:
    assert kubo_announces_pins(strategy) is announces


def test_retention_policy_from_flags_environment_and_file(tmp_path: Path) -> None:
    """docs/sidecar.md "Retention": the three limits reach the core's policy."""
    from sidecar import Driver

    default = Driver(load_config(env={}, flags={"state_dir": str(tmp_path)}))
    assert default.node_config.retention == RetentionPolicy()
    cfg = config_from_args(["--retain-events", "500", "--retain-age", "3600"])
    assert (cfg.retain_events, cfg.retain_age) == (500, 3600.0)
    cfg = load_config(
        env={"PULSARCAST_RETAIN_BYTES": "1048576"}, flags={"state_dir": str(tmp_path)}
    )
    policy = Driver(cfg).node_config.retention
    assert (policy.max_events, policy.max_bytes) == (10_000, 1_048_576)
    for bad in ({"retain_events": "0"}, {"retain_bytes": "-1"}, {"retain_age": "0"}):
        with pytest.raises(ConfigError, match="must be positive"):
            load_config(env={}, flags=bad)
    assert default.store.retain_pin is True
    assert config_from_args(["--no-retain-pin"]).retain_pin is False
    cfg = load_config(env={"PULSARCAST_RETAIN_PIN": "false"}, flags={"state_dir": str(tmp_path)})
    assert Driver(cfg).store.retain_pin is False
    with pytest.raises(ConfigError, match="PULSARCAST_RETAIN_PIN"):
        load_config(env={"PULSARCAST_RETAIN_PIN": "sometimes"})


def test_announce_setting_from_flags_and_environment() -> None:
    assert load_config(env={}).announce == "auto"
    assert load_config(env={"PULSARCAST_ANNOUNCE": "pin"}).announce == "pin"
    cfg = config_from_args(["--announce", "provide-once"])
    assert cfg.announce == "provide-once"


def test_event_loop_setting_from_flags_and_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert load_config(env={}).uvloop is True
    assert load_config(env={"PULSARCAST_UVLOOP": "false"}).uvloop is False
    assert config_from_args(["--no-uvloop"]).uvloop is False
    assert _loop_options(load_config(env={})) == {"use_uvloop": True}  # installed here
    assert _loop_options(config_from_args(["--no-uvloop"])) == {"use_uvloop": False}
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "uvloop" else real(name, *a)
    )
    assert _loop_options(load_config(env={})) == {"use_uvloop": False}  # not installed


def test_token_allows_non_loopback() -> None:
    cfg = load_config(env={}, flags={"api": "0.0.0.0:5050", "api_token": "s3cret"})
    assert cfg.api_host == "0.0.0.0"


def test_command_line_flags(tmp_path: Path) -> None:
    assert "--routing-k" in build_parser().format_help()
    cfg = config_from_args(["--state-dir", str(tmp_path), "--routing-k", "1", "--p2p-port", "0"])
    assert isinstance(cfg, SidecarConfig) and cfg.routing_k == 1


# -- persisted state -----------------------------------------------------------------------


def test_state_round_trip_and_delivery_log(tmp_path: Path) -> None:
    st = StateStore(tmp_path / "s", log_max=10)
    st.load(PEERS[0])
    st.state.subscriptions["bafyx"] = 12.5
    a = st.append_delivery({"cid": "c1", "topic_root": "t"})
    b = st.append_delivery({"cid": "c2", "topic_root": "u"})
    st.save()
    assert (a["seq"], b["seq"]) == (1, 2)
    again = StateStore(tmp_path / "s", log_max=10)
    again.load(PEERS[0])
    assert again.state.subscriptions == {"bafyx": 12.5}
    assert set(again.delivered) == {"c1", "c2"}
    assert again.append_delivery({"cid": "c3", "topic_root": "t"})["seq"] == 3
    assert [o["cid"] for o in again.replay(0, "t")] == ["c1", "c3"]
    assert [o["cid"] for o in again.replay(1)] == ["c2", "c3"]


def test_delivery_log_rotation_keeps_seq_monotonic(tmp_path: Path) -> None:
    st = StateStore(tmp_path, log_max=10)
    st.load(PEERS[0])
    for n in range(25):
        st.append_delivery({"cid": f"c{n}"})
    seqs = [o["seq"] for o in st.replay(0)]
    assert seqs == sorted(seqs) and seqs[-1] == 25 and len(seqs) <= 10
    reloaded = StateStore(tmp_path, log_max=10)
    reloaded.load(PEERS[0])
    assert reloaded.append_delivery({"cid": "next"})["seq"] == 26


def test_corrupt_state_file_is_a_clear_error_and_is_kept(tmp_path: Path) -> None:
    (tmp_path / "state.json").write_text('{"version": 1, "subscriptions": ')
    with pytest.raises(StateError, match="corrupt state file"):
        StateStore(tmp_path).load(PEERS[0])
    assert (tmp_path / "state.json").read_text() == '{"version": 1, "subscriptions": '


def test_state_of_another_peer_is_refused(tmp_path: Path) -> None:
    st = StateStore(tmp_path)
    st.load(PEERS[0])
    with pytest.raises(StateError, match="belongs to peer"):
        StateStore(tmp_path).load(PEERS[1])


def test_torn_last_delivery_line_is_ignored(tmp_path: Path) -> None:
    st = StateStore(tmp_path)
    st.load(PEERS[0])
    st.append_delivery({"cid": "c1"})
    with open(tmp_path / "deliveries.ndjson", "a") as f:
        f.write('{"cid": "c2", "se')  # a crash in the middle of an append
    again = StateStore(tmp_path)
    again.load(PEERS[0])
    assert set(again.delivered) == {"c1"}
    (tmp_path / "deliveries.ndjson").write_text('garbage\n{"cid":"c1","seq":1}\n')
    with pytest.raises(StateError, match="corrupt delivery log"):
        StateStore(tmp_path).load(PEERS[0])


def test_state_write_is_atomic(tmp_path: Path) -> None:
    st = StateStore(tmp_path)
    st.load(PEERS[0])
    st.state.created.append("bafyc")
    st.save()
    assert json.loads((tmp_path / "state.json").read_text())["created"] == ["bafyc"]
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_state_keeps_fast_and_filter_and_reads_the_older_files(tmp_path: Path) -> None:
    """A subscription's fast flag and filter are kept side by side; a state file from
    before either (no ``fast``, no ``filters``) still loads, as no fast, no filter."""
    (tmp_path / "state.json").write_text(
        json.dumps({"version": 1, "peer_id": PEERS[0], "subscriptions": {"bafyt": 1.0}})
    )
    st = StateStore(tmp_path)
    st.load(PEERS[0])
    assert st.state.subscriptions == {"bafyt": 1.0}
    assert st.state.fast == [] and st.state.filters == {}
    st.state.fast.append("bafyt")
    st.state.filters["bafyt"] = "ups >= 10"
    st.save()
    again = StateStore(tmp_path)
    again.load(PEERS[0])
    assert again.state.fast == ["bafyt"] and again.state.filters == {"bafyt": "ups >= 10"}


# -- routing view ----------------------------------------------------------------------------


def test_limit_per_bucket_keeps_k_per_bucket_and_progress() -> None:
    me = PEERS[0]
    kept = limit_per_bucket(me, PEERS, 1)
    pos = peer_position(me)
    buckets = [bucket_index(pos, peer_position(p)) for p in kept]
    assert len(buckets) == len(set(buckets))
    all_buckets = {bucket_index(pos, peer_position(p)) for p in PEERS[1:]}
    assert set(buckets) == all_buckets  # every non-empty bucket keeps a peer
    assert set(limit_per_bucket(me, PEERS, None)) == set(PEERS[1:])


class FakeRoutingKubo:
    """``stats/dht`` and ``swarm/peers`` answered from two sets, the calls counted."""

    def __init__(
        self, table: set[str], connected: set[str], addrs: dict[str, str] | None = None
    ) -> None:
        self.table, self.connected = table, connected
        self.addrs = addrs or {}
        self.calls: list[str] = []

    def client(self) -> KuboClient:
        return KuboClient(config=KuboConfig(), transport=httpx.MockTransport(self.handle))

    def handle(self, request: httpx.Request) -> httpx.Response:
        endpoint = request.url.path.removeprefix("/api/v0/")
        self.calls.append(endpoint)
        if endpoint == "stats/dht":
            peers = [{"ID": p, "Connected": p in self.connected} for p in sorted(self.table)]
            lan = {"Name": "lan", "Buckets": [{"Peers": peers}]}
            return httpx.Response(200, text='{"Name":"wan","Buckets":[]}\n' + json.dumps(lan))
        assert endpoint == "swarm/peers"
        return httpx.Response(
            200,
            json={"Peers": [{"Peer": p, "Addr": self.addrs.get(p, "")} for p in self.connected]},
        )


@pytest.mark.anyio
async def test_routing_view_gives_the_colocation_keys_of_connected_peers() -> None:
    """Sybil joins: the /24 (or /64) of each connected peer's public address, none for
    loopback or private ones; ``subnets_changed`` only when a key changed."""
    me, a, b, c, *_ = PEERS
    kubo = FakeRoutingKubo(
        table=set(),
        connected={a, b, c},
        addrs={
            a: "/ip4/1.2.3.4/tcp/4001",
            b: "/ip6/2001:4860:4860::8888/udp/4001/quic-v1",
            c: "/ip4/127.0.0.1/tcp/4001",
        },
    )
    view = RoutingView(self_id=me, k=None)
    async with kubo.client() as client:
        await view.refresh(client, 100.0)
        assert view.subnets == {a: "ip4:1.2.3.0/24", b: "ip6:2001:4860:4860::/64"}
        assert view.subnets_changed
        await view.refresh(client, 101.0)
        assert not view.subnets_changed
        kubo.addrs[c] = "/ip4/1.2.3.99/tcp/4001"
        await view.refresh(client, 102.0)
        assert view.subnets_changed and view.subnets[c] == "ip4:1.2.3.0/24"


@pytest.mark.anyio
@pytest.mark.parametrize("k", [None, 1, 2])
async def test_routing_view_reads_the_table_every_30_s_and_swarm_peers_every_time(
    k: int | None,
) -> None:
    """stats/dht every TABLE_INTERVAL, swarm/peers on every refresh (a new
    peer is known at the next one), the per-bucket limit the same as over the union
    of the last table read and the connected peers, computed again only on a change."""
    me, *others = PEERS
    kubo = FakeRoutingKubo(table=set(others[:3]), connected={others[2], others[3]})
    view = RoutingView(self_id=me, k=k)
    async with kubo.client() as client:

        async def refresh(now: float) -> list[str]:
            got = await view.refresh(client, now)
            assert got == limit_per_bucket(me, view_table | kubo.connected, k)
            return got

        view_table = set(kubo.table)
        await refresh(100.0)
        kubo.table.add(others[4])  # not read again before 30 s
        kubo.connected.add(others[5])  # ... but a new connection is known at once
        second = await refresh(101.0)
        assert others[5] in second or k is not None
        assert kubo.calls == ["stats/dht", "swarm/peers", "swarm/peers"]
        assert await refresh(105.0) == second and await refresh(129.9) == second
        assert (view.table_reads, view.swarm_reads, view.limits) == (1, 4, 2)
        view_table = set(kubo.table)
        await refresh(130.0)  # 30 s after the last table read
        assert (view.table_reads, view.swarm_reads, view.limits) == (2, 5, 3)
        kubo.connected.discard(others[5])
        view_table = set(kubo.table)
        await view.refresh(client, 130.5, table=True)  # asked for: read now
        assert view.table_reads == 3
        await refresh(100.0)  # the clock went back: read again
        assert view.table_reads == 4


@pytest.mark.anyio
async def test_the_driver_gives_the_node_its_peers_only_when_they_changed(
    tmp_path: Path,
) -> None:
    from pulsarcast_ipfs.core import UnknownTopic
    from sidecar import Driver

    me, author, *others = PEERS
    topic = compute_cid(dag_cbor.encode({"t": "acting"}))
    gone = compute_cid(dag_cbor.encode({"t": "gone"}))

    class Node:
        def __init__(self) -> None:
            self.given: list[list[str]] = []
            self.subnets: list[dict[str, str]] = []
            self.acting = False

        def set_known_peers(self, now: float, peers: list[str]) -> None:
            self.given.append(list(peers))

        def set_peer_subnets(self, now: float, subnets: dict[str, str]) -> None:
            self.subnets.append(dict(subnets))

        def topic_state(self, cid: CID) -> Any:
            if cid != topic:
                raise UnknownTopic(f"unknown topic {cid}")
            return type("State", (), {"acting_root": self.acting, "author": author})()

        def take_outputs(self) -> list[Any]:
            return []

        def get_timer(self) -> float | None:
            return None

    kubo = FakeRoutingKubo(table={others[0]}, connected={others[1]})
    driver = Driver(load_config(env={}, flags={"state_dir": str(tmp_path)}))
    node = Node()
    driver._node = node  # type: ignore[assignment]
    driver.peer_id = me
    driver._topics = {str(topic): "acting", str(gone): "gone", "not a CID": "?"}
    async with kubo.client() as client:
        driver.kubo = client
        await driver.refresh_routing()
        await driver.refresh_routing()  # nothing new: the node is not told again
        assert node.given == [limit_per_bucket(me, others[:2], None)]
        kubo.connected.add(others[2])
        await driver.refresh_routing()
        assert node.given[-1] == limit_per_bucket(me, others[:3], None)
        node.acting = True  # acting root: the author is added, every time
        await driver.refresh_routing()
        await driver.refresh_routing()
        assert node.given[-2:] == [[*limit_per_bucket(me, others[:3], None), author]] * 2
        node.acting = False
        await driver.refresh_routing()
        assert len(node.given) == 5 and author not in node.given[-1]
        assert node.subnets == []  # no public address yet: no keys to give
        kubo.addrs[others[1]] = "/ip4/1.2.3.4/tcp/4001"
        await driver.refresh_routing()
        await driver.refresh_routing()  # the same keys: not given again
        assert node.subnets == [{others[1]: "ip4:1.2.3.0/24"}]
    assert kubo.calls.count("stats/dht") == 1 and kubo.calls.count("swarm/peers") == 8


# -- OpenAPI equals the contract -------------------------------------------------------------


def test_openapi_lists_exactly_the_documented_endpoints() -> None:
    doc = Path(__file__).resolve().parents[1] / "docs" / "http-api.md"
    documented = set(re.findall(r"^\| `(GET|POST|DELETE) (/[^`]*)`", doc.read_text(), re.M))
    spec = openapi_document()
    served = {(m.upper(), p) for p, ops in spec["paths"].items() for m in ops}
    assert documented and served == documented
    assert spec["openapi"].startswith("3.1")


def test_forward_ports_are_never_handed_out_twice() -> None:
    """Kubo binds a forward's port only after the sidecar chose it; the kernel
    readily returns the same free port to the next probe, so two forwards set up
    at once were given one port (the second failed: a first dial lost)."""
    from sidecar._transport import free_port

    ports = [free_port() for _ in range(2000)]
    assert len(set(ports)) == len(ports)


@pytest.mark.anyio
async def test_peer_id_line_and_first_frames_may_arrive_in_one_read() -> None:
    """Kubo writes the ``report-peer-id`` line, then relays the sender's bytes: both
    can come in one read. More than 256 bytes in that read used to be taken for a
    missing peer-ID line and the connection was closed (its events lost)."""
    import anyio

    from pulsarcast_ipfs.core import Ping, Rpc, encode_frame
    from pulsarcast_ipfs.core.testing import make_peer_ids
    from pulsarcast_ipfs.kubo import KuboClient, KuboConfig
    from sidecar._transport import Transport

    got: list[tuple[str, Rpc]] = []
    all_in = anyio.Event()

    def on_rpc(p: str, rpc: Rpc, size: int) -> None:
        got.append((p, rpc))
        if len(got) == 60:
            all_in.set()

    peer = make_peer_ids(1)[0]
    frames = b"".join(encode_frame(Ping(nonce=i)) for i in range(60))
    assert len(frames) > 256
    async with KuboClient(config=KuboConfig()) as kubo:
        transport = Transport(
            kubo=kubo,
            port=0,
            on_rpc=on_rpc,
            on_unreachable=lambda p: None,
            max_frame_size=1 << 20,
        )
        server = await transport.listen()
        try:
            async with await anyio.connect_tcp("127.0.0.1", transport.port) as s:
                await s.send(peer.encode() + b"\n" + frames)  # one write, one read
                with anyio.fail_after(10):
                    await all_in.wait()
        finally:
            server.close()
    assert [(p, getattr(r, "nonce", None)) for p, r in got] == [(peer, i) for i in range(60)]


# -- block store: batched puts, own and retained events pinned in batches, topics announced --


def _blocks(n: int, tag: str = "e", size: int = 0) -> list[tuple[CID, bytes]]:
    out = []
    for i in range(n):
        data = dag_cbor.encode({"tag": tag, "n": i, "pad": b"\0" * size})
        out.append((compute_cid(data), data))
    return out


async def _with_store(
    steps: Callable[[BlockStore, StrictKubo], Awaitable[None]],
    *,
    provide_once: bool = True,
    put_linger: float = 0.0,
    pin_linger: float = 0.0,
    index_linger: float = 0.0,
    kubo: StrictKubo | None = None,
    **options: Any,
) -> tuple[StrictKubo, BlockStore]:
    kubo = kubo or StrictKubo()
    async with kubo.client() as client:
        store = BlockStore(
            kubo=client,
            fetch_timeout=1.0,
            provide_once=provide_once,
            put_linger=put_linger,
            pin_linger=pin_linger,
            index_linger=index_linger,
            **options,
        )
        async with anyio.create_task_group() as tg:
            tg.start_soon(store.run, tg)
            await steps(store, kubo)
            await anyio.wait_all_tasks_blocked()
            assert store.pending == 0
            tg.cancel_scope.cancel()
    return kubo, store


@pytest.mark.anyio
async def test_queued_blocks_are_put_with_one_request_per_batch() -> None:
    blocks = _blocks(250)
    big = _blocks(7, "big", size=300_000)  # 3 of them fit in 1 MiB

    async def steps(store: BlockStore, kubo: StrictKubo) -> None:
        for cid, data in blocks:
            store.store(cid, data, own=False)
        await anyio.wait_all_tasks_blocked()
        for cid, data in big:
            store.store(cid, data, own=False)

    kubo, store = await _with_store(steps)
    assert kubo.of("put_call") == [100, 100, 50, 3, 3, 1]
    assert store.put_calls == 6 and store.stored == 257
    assert kubo.of("put") == [data for _, data in blocks + big]  # in order
    assert kubo.pinned == set() and kubo.of("provide") == []  # relays' copies

    kubo, store = await _with_store(steps, put_batch=40, put_batch_bytes=1 << 30)
    assert kubo.of("put_call") == [40] * 6 + [10, 7]


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", [("trio", {"clock": MockClock(autojump_threshold=0)})])
async def test_the_writer_waits_a_little_for_more_blocks_unless_the_batch_is_full() -> None:
    """Events 50 ms apart: with a 0.1 s wait two or three per request, not one. A full
    batch goes at once: queued while the writer was idle, or while it waited."""
    trickle = _blocks(20, "trickle")
    bursts = {False: _blocks(100, "idle"), True: _blocks(100, "late")}

    async def steps(store: BlockStore, kubo: StrictKubo) -> None:
        for cid, data in trickle:
            store.store(cid, data, own=False)
            await anyio.sleep(0.05)
        for late, burst in bursts.items():
            await anyio.sleep(1)
            assert store.pending == 0
            began = anyio.current_time()
            store.store(*burst[0], own=False)
            if late:
                await anyio.sleep(0.01)  # the writer is waiting for more
            for cid, data in burst[1:]:
                store.store(cid, data, own=False)
            while store.pending:  # noqa: ASYNC110 (virtual time)
                await anyio.sleep(0.001)
            assert anyio.current_time() - began < 0.02

    kubo, _ = await _with_store(steps, put_linger=0.1)
    sizes = kubo.of("put_call")
    assert sizes[-2:] == [100, 100] and sum(sizes[:-2]) == 20 and len(sizes[:-2]) <= 10
    assert kubo.of("put")[:20] == [data for _, data in trickle]


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", [("trio", {"clock": MockClock(autojump_threshold=0)})])
async def test_pins_wait_up_to_a_second_for_a_batch_but_own_topics_do_not() -> None:
    """Own events 50 ms apart: one pin/add per second, not one per block/put; an own
    topic version is pinned (announced) at once, a full batch of pins goes at once."""
    events, retained = _blocks(40, "own"), _blocks(100, "kept")
    (topic, topic_data), (update, update_data) = _blocks(2, "topic")

    async def steps(store: BlockStore, kubo: StrictKubo) -> None:
        for i, (cid, data) in enumerate(events):
            store.store(cid, data, own=True)
            if i == 10:
                store.store(topic, topic_data, own=True, announce=True)
            await anyio.sleep(0.05)
        await anyio.sleep(2)
        assert store.pending == 0 and kubo.pinned == {topic} | {c for c, _ in events}
        began = anyio.current_time()
        for cid, data in retained:  # a full batch: put and pinned at once
            store.store(cid, data, own=False, retain=True)
        while store.pending:  # noqa: ASYNC110 (virtual time)
            await anyio.sleep(0.001)
        assert anyio.current_time() - began < 0.02
        began = anyio.current_time()
        store.store(update, update_data, own=True, announce=True)
        while store.pending:  # noqa: ASYNC110 (virtual time)
            await anyio.sleep(0.001)
        assert anyio.current_time() - began < 0.2  # the put's wait only

    kubo, store = await _with_store(steps, put_linger=0.1, pin_linger=1.0)
    own_pins = [len(b) for b in kubo.of("pin")]
    assert sum(own_pins) == 40 and len(own_pins) <= 3  # 2 s of events, not 1 per put
    assert kubo.of("pin_index") and kubo.indexed() == {c for c, _ in retained}
    assert kubo.of("pin_own") == [topic, update]
    # the topic version is pinned right after the block/put that stored it
    after = kubo.calls[kubo.calls.index(("put", topic_data)) : kubo.calls.index(("pin_own", topic))]
    assert "put_call" not in {kind for kind, _ in after}
    assert store.put_calls < 25


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", [("trio", {"clock": MockClock(autojump_threshold=0)})])
async def test_a_stopping_store_puts_and_pins_what_it_still_holds() -> None:
    """Cancelled (the sidecar stops) while it waits for fuller batches: nothing lost."""
    own, kept = _blocks(5, "own"), _blocks(5, "kept")
    kubo = StrictKubo()
    async with kubo.client() as client:
        store = BlockStore(kubo=client, fetch_timeout=1.0, put_linger=0.1, pin_linger=1.0)
        async with anyio.create_task_group() as tg:
            tg.start_soon(store.run, tg)
            for cid, data in own:
                store.store(cid, data, own=True)
            await anyio.sleep(0.5)  # put; the pins wait for more
            for cid, data in kept:
                store.store(cid, data, own=False, retain=True)  # waiting to be put
            assert kubo.protected() == set() and len(kubo.of("put")) == 5
            tg.cancel_scope.cancel()
    assert store.pending == 0 and len(kubo.of("put")) == 10
    assert kubo.pinned == {cid for cid, _ in own}  # own events: direct pins
    assert kubo.indexed() == {cid for cid, _ in kept}  # the index, pinned before stopping


@pytest.mark.anyio
async def test_retained_events_are_kept_by_one_index_pin_and_never_announced() -> None:
    """No direct pin per retained event (~0.6 ms of Kubo's CPU each): one recursive
    pin of the retention index, named, linking all 250, replaced when it changes."""
    blocks, more = _blocks(250), _blocks(3, "more")

    async def steps(store: BlockStore, kubo: StrictKubo) -> None:
        for cid, data in blocks:
            store.store(cid, data, own=False, retain=True)
        store.store(*blocks[0], own=False, retain=True)  # again: nothing new
        await anyio.wait_all_tasks_blocked()
        assert store.pending == 0 and len(kubo.of("pin_index")) == 1
        for cid, data in more:
            store.store(cid, data, own=False, retain=True)

    kubo, store = await _with_store(steps)
    assert len(kubo.of("put")) == 253 and kubo.of("put_call")[:3] == [100, 100, 50]
    assert kubo.of("pin") == [] and kubo.pinned == set()  # no direct pin
    assert kubo.indexed() == {cid for cid, _ in blocks + more}
    assert list(kubo.recursive.values()) == [INDEX_PIN_NAME]  # one pin, replaced in place
    assert len(kubo.of("pin_update")) >= 1
    assert kubo.of("provide") == [] and kubo.of("pin_own") == []
    assert (store.pins_added, store.retained_pinned) == (253, 253)
    # Kubo announces what a recursive pin/add walks: only the (empty) first root is
    # pinned so, the index itself always by pin/update.
    assert kubo.of("pin_index") == [compute_cid(EMPTY_ROOT)]
    assert store.pin_calls == 1 + len(kubo.of("pin_update"))
    assert store.index_updates == len(kubo.of("pin_update"))


@pytest.mark.anyio
async def test_without_retain_pin_retained_events_are_kept_unpinned() -> None:
    """``retain_pin=False`` (``--no-retain-pin``): retained events are put, never
    pinned nor unpinned on release; own events and subscribed topics still are."""
    kept, own = _blocks(120, "kept"), _blocks(30, "own")
    ((topic, topic_data),) = _blocks(1, "topic")
    pinned_before_release: set[Any] = set()

    async def steps(store: BlockStore, kubo: StrictKubo) -> None:
        store.pin_topic(topic, topic_data)
        for cid, data in kept:
            store.store(cid, data, own=False, retain=True)
        for cid, data in own:
            store.store(cid, data, own=True, retain=True)
        await anyio.wait_all_tasks_blocked()
        assert store.pending == 0
        pinned_before_release.update(kubo.pinned)
        store.release([cid for cid, _ in kept + own])

    kubo, store = await _with_store(steps, retain_pin=False)
    assert len(kubo.of("put")) == 151
    assert pinned_before_release == kubo.pinned == {cid for cid, _ in own} | {topic}
    assert kubo.of("unpin") == [] and store.retained_pinned == 0 and kubo.recursive == {}
    assert (store.pins_added, store.own_pins_added) == (1, 30)  # the topic; own events


@pytest.mark.anyio
@pytest.mark.parametrize("provide_once", [True, False])
async def test_own_events_are_pinned_in_batches_and_only_own_topics_announced(
    provide_once: bool,
) -> None:
    """An own event is pinned directly with fast-provide-root=false, in
    batches, and never provided; an own topic version is pinned with Kubo's
    fast-provide-root (announced at once) and provide/once'd if Kubo would not."""
    events = _blocks(150, "own")
    (topic, topic_data), (update, update_data) = _blocks(2, "topic")

    async def steps(store: BlockStore, kubo: StrictKubo) -> None:
        store.store(topic, topic_data, own=True, announce=True, retain=True)
        for i, (cid, data) in enumerate(events):
            store.store(cid, data, own=True, retain=i % 2 == 0)
        store.store(update, update_data, own=True, announce=True)
        store.release([cid for cid, _ in events] + [topic])  # own blocks stay pinned

    kubo, store = await _with_store(steps, provide_once=provide_once)
    assert kubo.of("put_call") == [100, 52]
    # the first put: the topic version and 99 events, whose pins follow it at once
    assert [len(b) for b in kubo.of("pin")] == [99, 51]
    assert kubo.of("pin_own") == [topic, update]
    assert kubo.of("provide") == ([topic, update] if provide_once else [])
    assert kubo.pinned == {cid for cid, _ in events} | {topic, update}
    assert kubo.of("unpin") == [] and store.retained_pinned == 0
    assert (store.pin_calls, store.own_pins_added, store.put_calls) == (2, 152, 2)
    assert store.pins_added == 0  # retained events and topics only


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", [("trio", {"clock": MockClock(autojump_threshold=0)})])
async def test_a_batch_stays_queued_in_order_while_kubo_is_down() -> None:
    first, later = _blocks(3, "first"), _blocks(2, "later")

    async def steps(store: BlockStore, kubo: StrictKubo) -> None:
        kubo.put_down = 2
        for cid, data in first:
            store.store(cid, data, own=True)
        await anyio.wait_all_tasks_blocked()  # the first attempt failed
        assert store.kubo_down and store.pending == 3
        for cid, data in later:
            store.store(cid, data, own=True)
        began = anyio.current_time()
        while store.pending:  # noqa: ASYNC110 (virtual time: each retry waits 0.5 s)
            await anyio.sleep(0.1)
        assert anyio.current_time() - began == pytest.approx(1.0, abs=0.11)

    kubo, store = await _with_store(steps, put_batch=2)
    assert kubo.of("put") == [data for _, data in first + later]  # none lost, in order
    assert kubo.of("put_call") == [2, 2, 1] and store.put_calls == 5 and not store.kubo_down
    assert kubo.of("pin") == [[cid for cid, _ in first + later]]


@pytest.mark.anyio
async def test_a_refused_block_is_put_alone_and_the_others_are_stored() -> None:
    blocks = _blocks(10, "own")
    bad = blocks[4]

    async def steps(store: BlockStore, kubo: StrictKubo) -> None:
        kubo.refuse.add(bad[1])
        for cid, data in blocks:
            store.store(cid, data, own=True)

    kubo, store = await _with_store(steps)
    # the batch: Kubo stored 4, then stopped; then each block alone
    assert kubo.of("put_call") == [10] + [1] * 10
    good = [cid for cid, _ in blocks if cid != bad[0]]
    assert set(kubo.blocks) == set(good) and kubo.pinned == set(good)
    assert (store.stored, store.store_failed, store.put_calls) == (9, 1, 11)


@pytest.mark.anyio
async def test_released_events_leave_the_index_and_own_ones_stay() -> None:
    blocks = _blocks(600)
    own_cid, own_data = _blocks(1, "own")[0]

    async def steps(store: BlockStore, kubo: StrictKubo) -> None:
        for cid, data in blocks:
            store.store(cid, data, own=False, retain=True)
        store.store(own_cid, own_data, own=True, retain=True)
        await anyio.wait_all_tasks_blocked()
        assert store.retained_pinned == 600 and kubo.indexed() == {c for c, _ in blocks}
        store.release([own_cid] + [cid for cid, _ in blocks[:300]])  # the oldest
        store.release([own_cid, blocks[0][0]])  # twice: nothing more
        await anyio.wait_all_tasks_blocked()
        assert kubo.indexed() == {c for c, _ in blocks[300:]}
        # Unpinned by hand: pin/update refuses, and the store pins its index anew.
        kubo.recursive.clear()
        store.release([cid for cid, _ in blocks[300:550]])

    kubo, store = await _with_store(steps)
    assert own_cid in kubo.of("pin")[-1]  # an own event: pinned directly in a batch,
    assert kubo.of("pin_own") == [] and kubo.of("provide") == []  # never announced
    assert kubo.of("unpin") == []  # nothing pinned directly to unpin
    assert kubo.indexed() == {c for c, _ in blocks[550:]} and kubo.pinned == {own_cid}
    assert list(kubo.recursive.values()) == [INDEX_PIN_NAME]
    assert kubo.of("pin_index") == [compute_cid(EMPTY_ROOT)] * 2  # first; after the refusal
    assert (store.pins_removed, store.retained_pinned) == (550, 50)


@pytest.mark.anyio
@pytest.mark.parametrize("ls_down", [0, 1])
async def test_a_store_started_again_goes_on_from_the_pinned_index(ls_down: int) -> None:
    """The events retained before a restart stay linked until released, also when
    Kubo could not list its pins at start (then it is asked again before the index
    is pinned: pinning a new one first would leave the old one pinned for good)."""
    before, after = _blocks(300, "before"), _blocks(5, "after")

    async def first(store: BlockStore, kubo: StrictKubo) -> None:
        for cid, data in before:
            store.store(cid, data, own=False, retain=True)

    kubo, _ = await _with_store(first)
    old_root = next(iter(kubo.recursive))
    kubo.ls_down = ls_down

    async def again(store: BlockStore, kubo: StrictKubo) -> None:
        await anyio.wait_all_tasks_blocked()  # the store has looked at Kubo's pins
        assert store.retained_pinned == (0 if ls_down else 300)
        for cid, data in after:
            store.store(cid, data, own=False, retain=True)
        await anyio.wait_all_tasks_blocked()
        assert store.retained_pinned == 305
        store.release([cid for cid, _ in before[:100]])  # retained before the restart

    kubo, store = await _with_store(again, kubo=kubo)
    assert kubo.indexed() == {c for c, _ in before[100:] + after}
    assert list(kubo.recursive.values()) == [INDEX_PIN_NAME] and old_root not in kubo.recursive
    assert store.retained_pinned == 205 and kubo.of("pin_index") == [compute_cid(EMPTY_ROOT)]


@pytest.mark.anyio
async def test_a_block_stored_unretained_is_pinned_when_it_comes_back_retained() -> None:
    (cid, data), (gone, gone_data) = _blocks(2)

    async def steps(store: BlockStore, kubo: StrictKubo) -> None:
        store.store(cid, data, own=False)
        store.store(gone, gone_data, own=False, retain=True)
        store.release([gone])  # released before its pin ran: neither pinned nor unpinned
        await anyio.wait_all_tasks_blocked()
        assert kubo.protected() == set()
        store.store(cid, data, own=False, retain=True)

    kubo, store = await _with_store(steps)
    assert store.held_for_pins == 0  # `gone`'s bytes were let go with it
    assert [compute_cid(d) for d in kubo.of("put")] == [cid, gone, cid]  # put again
    assert kubo.protected() == {cid} and kubo.of("unpin") == []


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", [("trio", {"clock": MockClock(autojump_threshold=0)})])
async def test_blocks_a_gc_collects_before_their_pin_are_put_again() -> None:
    """``repo gc`` between the put and the pin (the pins wait for a batch): own events
    and topic versions, pinned ``offline``, and retained events, linked from an index
    whose pin/update would wait for the network, are put again and end up kept."""
    own, kept, (topic, topic_data) = _blocks(3, "own"), _blocks(4, "kept"), _blocks(1, "t")[0]
    (first, first_data), (later, later_data) = _blocks(2, "first")

    async def steps(store: BlockStore, kubo: StrictKubo) -> None:
        store.store(first, first_data, own=False, retain=True)
        while store.pending:  # noqa: ASYNC110 (virtual time)
            await anyio.sleep(0.1)  # an index pinned before, which keeps `first`
        for cid, data in own:
            store.store(cid, data, own=True)
        for cid, data in kept:
            store.store(cid, data, own=False, retain=True)
        store.pin_topic(topic, topic_data)
        while store.stored < 9:  # noqa: ASYNC110 (virtual time)
            await anyio.sleep(0.01)
        assert kubo.protected() == {first}
        gone = kubo.collect() - {compute_cid(EMPTY_ROOT)}  # (replaced by the first index)
        assert gone == {c for c, _ in own + kept} | {topic}  # their pins wait
        store.store(later, later_data, own=False, retain=True)  # put after the gc
        with anyio.fail_after(60):  # (virtual) without the puts again, the index never is
            while store.pending:  # noqa: ASYNC110 (virtual time)
                await anyio.sleep(0.1)

    kubo, store = await _with_store(steps, pin_linger=1.0, index_linger=1.0)
    blocks = {c for c, _ in own + kept} | {topic, first, later}
    assert kubo.protected() == blocks
    assert not kubo.collect() & blocks  # a second gc takes only replaced index blocks
    assert store.put_again == 3 + 1 + 4 + 1  # own and topic; every event linked since
    assert len(kubo.of("pin_missing")) == 2  # once for the topics, once for the own events
    assert len(kubo.of("pin_update_waits")) == 1
    assert store.pin_failed == 0 and store.store_failed == 0
    assert store.held_for_pins == 0  # the bytes go once pinned


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", [("trio", {"clock": MockClock(autojump_threshold=0)})])
async def test_pins_wait_for_kubo_to_come_back() -> None:
    blocks = _blocks(3)

    async def steps(store: BlockStore, kubo: StrictKubo) -> None:
        kubo.down = 2
        for cid, data in blocks:
            store.store(cid, data, own=False, retain=True)
        began = anyio.current_time()
        while store.pending:  # noqa: ASYNC110 (virtual time: each retry waits 0.5 s)
            await anyio.sleep(0.1)
        assert anyio.current_time() - began == pytest.approx(1.0, abs=0.11)

    kubo, _ = await _with_store(steps)
    assert kubo.indexed() == {cid for cid, _ in blocks} and len(kubo.of("pin_index")) == 1


@pytest.mark.anyio
@pytest.mark.parametrize("settled", [True, False])
async def test_a_topic_its_author_subscribes_to_is_announced_once(settled: bool) -> None:
    """Creating a topic pinned and announced it (fast-provide-root): subscribing to it
    on the same node does not ``provide/once`` it again, whether the creation's pin
    is done (``settled``) or still queued, and counts it as announced."""
    (topic, data), (other, other_data) = _blocks(2, "topic")
    told: list[tuple[CID, bool]] = []

    async def steps(store: BlockStore, kubo: StrictKubo) -> None:
        store.on_topic_announced = lambda cid, ok: told.append((cid, ok))
        store.store(topic, data, own=True, announce=True)
        if settled:
            await anyio.wait_all_tasks_blocked()
        store.pin_topic(topic, data)
        store.pin_topic(other, other_data)  # someone else's: announced as before
        await anyio.wait_all_tasks_blocked()
        assert store.topics_announced == 2

    kubo, _ = await _with_store(steps, provide_once=False)
    assert kubo.of("pin_own") == [topic]
    assert kubo.of("provide") == [other]
    assert told == [(topic, True), (other, True)]


@pytest.mark.anyio
async def test_a_topic_is_pinned_and_announced_once() -> None:
    (topic, data), (event, event_data) = _blocks(2, "topic")

    async def steps(store: BlockStore, kubo: StrictKubo) -> None:
        store.store(event, event_data, own=False, retain=True)
        store.pin_topic(topic, data)
        await anyio.wait_all_tasks_blocked()
        store.announce_topic(topic)  # the 12-hourly refresh
        store.announce_topic(event)  # not a topic: ignored
        await anyio.wait_all_tasks_blocked()
        assert store.topics_announced == 2
        store.unpin_topic(topic)

    kubo, store = await _with_store(steps, provide_once=False)
    assert store.held_for_pins == 0
    assert kubo.of("provide") == [topic, topic]  # never the event
    assert kubo.of("pin") == [[topic]]  # directly, not announced at pin time
    assert kubo.of("unpin") == [[topic]] and kubo.pinned == set()
    assert kubo.indexed() == {event}


def test_the_driver_carries_out_retain_and_release(tmp_path: Path) -> None:
    from pulsarcast_ipfs.core import EventDescriptor, ReleaseBlocks, StoreBlock
    from pulsarcast_ipfs.core.testing import make_peer_ids
    from sidecar import Driver
    from sidecar._deliveries import event_json

    peer = make_peer_ids(1)[0]
    topic_data = dag_cbor.encode({"t": 1})
    topic = compute_cid(topic_data)
    first = EventDescriptor(
        topic=topic, author=peer, publisher=peer, payload=b"a", created="2026-11-21T09:00:00Z"
    )
    second = EventDescriptor(
        topic=topic,
        author=peer,
        publisher=peer,
        parents=(first.cid,),
        clock=1,
        payload=b"b",
        created="2026-11-21T09:00:01Z",
    )
    doc = event_json(second.cid, second)
    assert (doc["parents"], doc["clock"]) == ([str(first.cid)], 1) and "parent" not in doc
    assert event_json(first.cid, first)["parents"] == []
    own = EventDescriptor(
        topic=topic, author=peer, publisher=peer, payload=b"c", created="2026-11-21T09:00:02Z"
    )

    class Node:
        def __init__(self) -> None:
            self.outputs: list[Any] = [
                StoreBlock(cid=first.cid, data=first.encode(), retain=True),
                StoreBlock(cid=second.cid, data=second.encode()),
                ReleaseBlocks(cids=(first.cid,)),
                StoreBlock(cid=own.cid, data=own.encode(), own=True, retain=True),
                StoreBlock(cid=topic, data=topic_data, own=True, announce=True),
            ]

        def take_outputs(self) -> list[Any]:
            out, self.outputs = self.outputs, []
            return out

        def get_timer(self) -> float | None:
            return None

    driver = Driver(load_config(env={}, flags={"state_dir": str(tmp_path)}))
    driver._node = Node()  # type: ignore[assignment]
    driver._pump()
    assert set(driver.blocks) == {first.cid, second.cid, own.cid, topic}
    assert [(c, kind) for c, _, kind in driver.store._puts] == [
        (first.cid, "retain"),
        (second.cid, "plain"),
        (own.cid, "own"),  # pinned, not announced
        (topic, "announce"),
    ]
    retained = driver.store._retained
    assert len(retained) == 1 and retained.get(own.cid) is True  # first released again


@pytest.mark.anyio
async def test_frames_queued_together_go_out_in_one_write(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The frames queued for a neighbour while its connection task was not
    running leave in one socket write (one syscall, one read by Kubo), in order; one
    write per frame made the sender and Kubo pay per frame under load."""
    from anyio.abc import SocketAttribute

    import sidecar._transport as transport_mod
    from pulsarcast_ipfs.core import FrameDecoder, Ping, encode_frame
    from pulsarcast_ipfs.core.testing import make_peer_ids

    def kubo(request: httpx.Request) -> httpx.Response:
        assert request.url.path.endswith(("/p2p/forward", "/p2p/close")), request.url.path
        return httpx.Response(200, text="")

    received = bytearray()
    want = b"".join(encode_frame(Ping(nonce=i)) for i in range(100))
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(SocketAttribute.local_port)
    monkeypatch.setattr(transport_mod, "free_port", lambda: port)
    done = anyio.Event()

    async def serve(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            while len(received) < len(want):
                received.extend(await stream.receive())
        done.set()

    async with (
        KuboClient(config=KuboConfig(), transport=httpx.MockTransport(kubo)) as client,
        listener,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(listener.serve, serve)
        t = transport_mod.Transport(
            kubo=client,
            port=0,
            on_rpc=lambda p, r, n: None,
            on_unreachable=lambda p: None,
            max_frame_size=1 << 20,
        )
        t._tg = tg
        peer = make_peer_ids(2)[1]
        for i in range(100):  # all queued before the connection task first runs
            t.send(peer, encode_frame(Ping(nonce=i)))
        with anyio.fail_after(10):
            await done.wait()
        tg.cancel_scope.cancel()
    assert bytes(received) == want
    decoded = FrameDecoder(max_frame_size=1 << 20).feed(bytes(received))
    nonces = [getattr(r, "nonce", None) for r in decoded]
    assert nonces == list(range(100))
    assert t.frames_out == 100 and t.writes == 1


def test_a_multipart_body_is_one_buffer_that_a_standard_parser_splits() -> None:
    """The Kubo client sends ``block/put``'s files as one body (one write),
    not httpx's streamed ``files=`` (three writes per file); the standard library's
    MIME parser finds exactly the parts, byte for byte, CRLFs inside them included."""
    from email.parser import BytesParser
    from email.policy import HTTP

    from pulsarcast_ipfs.kubo._client import multipart_body

    parts = [b"", b"\r\n--x\r\n", bytes(range(256)), b"a" * 5000]
    headers, body = multipart_body(parts)
    raw = f"Content-Type: {headers['Content-Type']}\r\n\r\n".encode() + body
    msg = BytesParser(policy=HTTP).parsebytes(raw)
    got = [p.get_payload(decode=True) for p in msg.iter_parts()]
    assert got == parts
    assert all(
        p.get_param("name", header="content-disposition") == "data" for p in msg.iter_parts()
    )


@pytest.mark.anyio
async def test_an_input_wakes_the_timer_task_only_for_an_earlier_deadline(tmp_path: Path) -> None:
    """The timer task sleeps until the core's next deadline; an input that brings the
    deadline forward wakes it (a join timeout set by a subscribe, say), the others
    (most events in and out) leave it asleep."""
    from sidecar import Driver

    class Node:
        def __init__(self) -> None:
            self.deadline: float | None = None
            self.fired: list[float] = []
            self.fired_event = anyio.Event()
            self.timer_reads = 0

        def take_outputs(self) -> list[Any]:
            return []

        def get_timer(self) -> float | None:
            self.timer_reads += 1
            return self.deadline

        def handle_timer(self, now: float) -> None:
            self.fired.append(now)
            self.fired_event.set()
            self.deadline = None

    driver = Driver(load_config(env={}, flags={"state_dir": str(tmp_path)}))
    node = Node()
    driver._node = node  # type: ignore[assignment]
    node.deadline = driver.clock() + 3600.0
    async with anyio.create_task_group() as tg:
        tg.start_soon(driver._timer_loop)
        await anyio.sleep(0.05)
        assert driver._timer_at == node.deadline  # asleep until then
        reads = node.timer_reads
        driver.call(lambda now: None)  # an input that changes no deadline
        await anyio.sleep(0.05)
        assert node.fired == []
        assert node.timer_reads == reads + 1  # the driver's look; the task slept on
        node.deadline = driver.clock() + 0.05  # an input brings it forward
        driver.call(lambda now: None)
        with anyio.fail_after(5):
            await node.fired_event.wait()
        tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_an_event_a_publisher_waits_for_is_reported_held_once_pinned() -> None:
    """(acknowledgement levels) ``urgent``: put with the retention index's blocks and
    the index pinned without the batching waits; ``on_held`` is told only after Kubo
    has the block linked from the pinned index. A store started again reports an
    event the pinned index already links at once, when it is asked for it again."""
    waited, plain = _blocks(1, "waited"), _blocks(1, "plain")
    held: list[list[CID]] = []

    async def steps(store: BlockStore, kubo: StrictKubo) -> None:
        store.on_held = held.append
        store.store(*plain[0], own=False, retain=True)  # lingers (index_linger 30 s)
        t0 = anyio.current_time()
        store.store(*waited[0], own=False, retain=True, urgent=True)
        with anyio.fail_after(5):
            while not held:
                assert waited[0][0] not in kubo.indexed()  # never told before the pin
                await anyio.sleep(0.01)
        assert anyio.current_time() - t0 < 5  # not the 30 s linger
        assert waited[0][0] in kubo.indexed() and waited[0][0] in kubo.blocks

    kubo, _ = await _with_store(steps, put_linger=30.0, pin_linger=30.0, index_linger=30.0)
    assert waited[0][0] in [c for batch in held for c in batch]
    again: list[list[CID]] = []

    async def restarted(store: BlockStore, kubo: StrictKubo) -> None:
        store.on_held = again.append
        await anyio.wait_all_tasks_blocked()  # the index pinned before is loaded
        store.store(*waited[0], own=False, retain=True, urgent=True)
        assert again == [[waited[0][0]]]  # at once: it is linked from the pinned index

    await _with_store(restarted, kubo=kubo)
