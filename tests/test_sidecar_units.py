"""Sidecar units without a network: configuration, persisted state, routing view, OpenAPI."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pulsarcast_ipfs.kademlia import bucket_index, peer_position
from sidecar import (
    ConfigError,
    SidecarConfig,
    StateError,
    StateStore,
    limit_per_bucket,
    load_config,
    openapi_document,
)
from sidecar.__main__ import build_parser, config_from_args
from sidecar._store import kubo_announces_pins

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


def test_announce_setting_from_flags_and_environment() -> None:
    assert load_config(env={}).announce == "auto"
    assert load_config(env={"PULSARCAST_ANNOUNCE": "pin"}).announce == "pin"
    cfg = config_from_args(["--announce", "provide-once"])
    assert cfg.announce == "provide-once"


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


# -- OpenAPI equals the contract -------------------------------------------------------------


def test_openapi_lists_exactly_the_documented_endpoints() -> None:
    doc = Path(__file__).resolve().parents[1] / "docs" / "http-api.md"
    documented = set(re.findall(r"^\| `(GET|POST) (/[^`]*)`", doc.read_text(), re.M))
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
    from anyio.abc import SocketAttribute

    from pulsarcast_ipfs.core import Ping, Rpc, encode_frame
    from pulsarcast_ipfs.core.testing import make_peer_ids
    from pulsarcast_ipfs.kubo import KuboClient, KuboConfig
    from sidecar._transport import Transport

    got: list[tuple[str, Rpc]] = []
    all_in = anyio.Event()

    def on_rpc(p: str, rpc: Rpc) -> None:
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
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
        async with listener, anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, transport._handle)
            port = listener.extra(SocketAttribute.local_port)
            async with await anyio.connect_tcp("127.0.0.1", port) as s:
                await s.send(peer.encode() + b"\n" + frames)  # one write, one read
                with anyio.fail_after(10):
                    await all_in.wait()
            tg.cancel_scope.cancel()
    assert [(p, getattr(r, "nonce", None)) for p, r in got] == [(peer, i) for i in range(60)]
