"""The sidecar's HTTP API and p2p listener against bad input and strangers:
schemathesis on the OpenAPI description, 413 before the body is read, 400 for
malformed CIDs and peer IDs, the bearer token, loopback binding by default, and a
p2p listener that accepts only the Pulsarcast protocol. Real Kubo daemons."""

from __future__ import annotations

import functools
import re
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import httpx
import pytest
from multiformats import CID, multihash

from pulsarcast_ipfs.cluster import LocalSidecarCluster
from pulsarcast_ipfs.core import Join, NodeConfig, TopicDescriptor, encode_frame
from pulsarcast_ipfs.kubo import KuboClient, KuboConfig
from pulsarcast_ipfs.testing import Scrape, wait_until
from sidecar import ConfigError, Driver, load_config, serve_api

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fuzz.fuzz_api import schemathesis_command

pytestmark = [pytest.mark.kubo, pytest.mark.anyio]

PROTOCOL = "/x/pulsarcast/2.12.0"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
async def sc(anyio_backend: str) -> AsyncIterator[LocalSidecarCluster]:
    async with LocalSidecarCluster(nodes=2, sidecars=[0]) as cluster:
        yield cluster


def err(r: httpx.Response, status: int, code: str) -> None:
    assert r.status_code == status, r.text
    body = r.json()
    assert body["error"]["code"] == code and body["error"]["message"], body


@pytest.mark.slow
async def test_schemathesis_bounded(sc: LocalSidecarCluster, tmp_path: Path) -> None:
    """No 5xx; status, content type and body of every answer as documented."""
    cmd = schemathesis_command(sc[0].api_url, max_examples=8, seed=7)
    proc = await anyio.run_process(cmd, check=False, stderr=subprocess.STDOUT, cwd=tmp_path)
    out = proc.stdout.decode(errors="replace")
    assert proc.returncode == 0, out[-4000:]
    m = re.search(r"(\d+) generated, (\d+) passed", out)
    assert m is not None and int(m.group(1)) == int(m.group(2)) > 100, out[-2000:]


async def _raw_request(port: int, head: bytes, body_parts: list[bytes]) -> bytes:
    """Send a request head and some body, never finish the body; return the answer."""
    async with await anyio.connect_tcp("127.0.0.1", port) as s:
        await s.send(head)
        for part in body_parts:
            await s.send(part)
        data = b""
        with anyio.fail_after(15):  # the answer must come although the body never ends
            while b"\r\n\r\n" not in data:
                data += await s.receive()
        return data


async def test_413_from_content_length_before_the_body(sc: LocalSidecarCluster) -> None:
    port = int(sc[0].api_url.rsplit(":", 1)[1])
    head = (
        b"POST /v1/topics HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 104857600\r\n\r\n"
    )
    answer = await _raw_request(port, head, [b'{"name": "'])
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]


async def test_413_while_streaming_a_chunked_body(sc: LocalSidecarCluster) -> None:
    port = int(sc[0].api_url.rsplit(":", 1)[1])
    head = (
        b"POST /v1/topics HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n"
    )
    chunk = b"x" * 65536
    parts = [b"%x\r\n%s\r\n" % (len(chunk), chunk)] * 40  # 2.5 MiB, over the 2 MiB default
    answer = await _raw_request(port, head, parts)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]


def _cid(codec: str, version: int = 1) -> str:
    digest = multihash.digest(b"x", "sha2-256")
    return str(CID("base58btc" if version == 0 else "base32", version, codec, digest))


BAD_CIDS = [
    "nope",
    "bafy",
    "bafyreiabc!",
    _cid("dag-pb", 0),  # CIDv0
    _cid("raw"),  # CIDv1, not dag-cbor
    _cid("dag-pb"),
    "z" * 300,
    "%00",
]


async def test_400_for_malformed_cids(sc: LocalSidecarCluster) -> None:
    async with sc.client(0) as api:
        for bad in BAD_CIDS:
            for method, path in (
                ("GET", f"/v1/topics/{bad}"),
                ("GET", f"/v1/events/{bad}"),
                ("POST", f"/v1/topics/{bad}/subscribe"),
                ("POST", f"/v1/topics/{bad}/publish"),
                ("GET", f"/v1/topics/{bad}/history"),
            ):
                err(await api.request(method, path, json={"text": "x"}), 400, "bad_request")
            err(await api.post("/v1/topics", json={"name": "t", "parent": bad}), 400, "bad_request")
            err(await api.get("/v1/deliveries", params={"topic": bad}), 400, "bad_request")
        topic = (await api.post("/v1/topics", json={"name": "bad-input"})).json()["cid"]
        for bad in BAD_CIDS:
            for cursor in ("after", "before"):
                r = await api.get(f"/v1/topics/{topic}/history", params={cursor: bad})
                err(r, 400, "bad_request")
            r = await api.post(
                f"/v1/topics/{topic}/publish", json={"ack": "local", "text": "x", "parent": bad}
            )
            err(r, 400, "bad_request")


async def test_400_for_malformed_peer_ids(sc: LocalSidecarCluster) -> None:
    bad_peers = ["nope", "12D3KooW", "12D3KooW" + "1" * 20, _cid("dag-cbor"), "", "Qm" + "0" * 44]
    async with sc.client(0) as api:
        for bad in bad_peers:
            for key in ("allowed_publishers", "request_to_publish"):
                r = await api.post(
                    "/v1/topics", json={"name": "p", key: {"enabled": True, "peers": [bad]}}
                )
                err(r, 400, "bad_request")


async def test_bearer_token_enforced(sc: LocalSidecarCluster, tmp_path: Path) -> None:
    """A sidecar with a token (here on loopback, beside the second Kubo): 401 without it."""
    cfg = load_config(
        env={},
        flags={
            "kubo_api": sc.cluster[1].api_url,
            "api": f"127.0.0.1:{_port()}",
            "api_token": "s3cret-token",
            "state_dir": str(tmp_path),
            "p2p_port": _port(),
            "resource_interval": 0,
        },
    )
    driver = Driver(cfg)
    async with anyio.create_task_group() as tg:
        await tg.start(functools.partial(driver.run, services=[serve_api]))
        try:
            async with httpx.AsyncClient(base_url=f"http://{cfg.api}", trust_env=False) as api:
                assert (await api.get("/health")).status_code == 200  # liveness stays open
                for headers in (
                    {},
                    {"Authorization": "Bearer wrong"},
                    {"Authorization": "s3cret-token"},
                ):
                    err(await api.get("/v1/status", headers=headers), 401, "unauthorized")
                    r = await api.post("/v1/topics", json={"name": "x"}, headers=headers)
                    err(r, 401, "unauthorized")
                good = {"Authorization": "Bearer s3cret-token"}
                assert (await api.get("/v1/status", headers=good)).status_code == 200
        finally:
            driver.stop()


def test_off_loopback_needs_a_token(tmp_path: Path) -> None:
    for host in ("0.0.0.0", "192.0.2.1", "[::]"):
        with pytest.raises(ConfigError, match="requires an API token"):
            load_config(env={}, flags={"api": f"{host}:5050", "state_dir": str(tmp_path)})
    with pytest.raises(ConfigError, match="requires an API token"):
        load_config(env={"PULSARCAST_API": "0.0.0.0:5050"}, flags={"state_dir": str(tmp_path)})
    ok = load_config(env={}, flags={"api": "0.0.0.0:5050", "api_token": "t" * 24})
    assert ok.api_host == "0.0.0.0"
    assert load_config(env={}, flags={}).api_host == "127.0.0.1"  # the default is loopback
    proc = subprocess.run(
        [sys.executable, "-m", "sidecar", "--api", "0.0.0.0:5050", "--state-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert "requires an API token" in proc.stderr


async def _metric(api: httpx.AsyncClient, name: str) -> float:
    return Scrape.parse((await api.get("/metrics")).text).value(name)


async def test_p2p_listener_accepts_only_the_pulsarcast_protocol(
    sc: LocalSidecarCluster,
) -> None:
    """A stream of another protocol never reaches the sidecar; the real one does."""
    target = sc.cluster[0]
    async with (
        KuboClient(config=KuboConfig(base_url=sc.cluster[1].api_url)) as kubo,
        sc.client(0) as api,
    ):
        peer = target.peer_id
        garbage = b"\xff" * 16

        async def try_protocol(protocol: str) -> None:
            port = _port()
            await kubo.p2p_forward(protocol, f"/ip4/127.0.0.1/tcp/{port}", peer)
            try:
                for _ in range(3):  # Kubo accepts locally before the stream exists
                    try:
                        async with await anyio.connect_tcp("127.0.0.1", port) as s:
                            await s.send(garbage)
                            with anyio.move_on_after(2):
                                await s.receive()
                    except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                        pass
            finally:
                await kubo.p2p_close(listen_address=f"/ip4/127.0.0.1/tcp/{port}")

        before = await _metric(api, "pulsarcast_bad_frames_total")
        for other in ("/x/other/1.0.0", "/x/pulsarcast/0.9.0", "/x/pulsarcast/2.12.0/extra"):
            await try_protocol(other)
        assert await _metric(api, "pulsarcast_bad_frames_total") == before
        await try_protocol(PROTOCOL)  # control: the same bytes on the real protocol arrive

        async def arrived() -> bool:
            return await _metric(api, "pulsarcast_bad_frames_total") > before

        await wait_until(arrived, deadline=15, what="the control stream to reach the sidecar")


async def test_flooding_peer_is_disconnected_and_refused(
    sc: LocalSidecarCluster, tmp_path: Path
) -> None:
    """A peer flooding JOINs over the real p2p transport is rate-limited, then
    disconnected; its next connection is refused. (Small limits for the test.)"""
    cfg = load_config(
        env={},
        flags={
            "kubo_api": sc.cluster[1].api_url,
            "api": f"127.0.0.1:{_port()}",
            "state_dir": str(tmp_path),
            "p2p_port": _port(),
            "resource_interval": 0,
        },
    )
    driver = Driver(cfg)
    driver.node_config = NodeConfig(join_rate=1, join_burst=5, abuse_limit=10, ban_time=600)
    flood = b"".join(
        encode_frame(Join(topic=t.cid, descriptor=t.encode()))
        for t in (
            TopicDescriptor.new(name=f"flood-{i}", author=sc.cluster[0].peer_id, now=1.8e9)
            for i in range(40)
        )
    )
    async with (
        anyio.create_task_group() as tg,
        KuboClient(config=KuboConfig(base_url=sc.cluster[0].api_url)) as kubo,
    ):
        await tg.start(driver.run)
        try:
            port = _port()
            await kubo.p2p_forward(PROTOCOL, f"/ip4/127.0.0.1/tcp/{port}", sc.cluster[1].peer_id)

            async def send_flood() -> None:
                try:
                    async with await anyio.connect_tcp("127.0.0.1", port) as s:
                        await s.send(flood)
                        with anyio.move_on_after(1):
                            await s.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                    pass

            async def disconnected() -> bool:
                if driver.transport.disconnects == 0:
                    await send_flood()
                return driver.transport.disconnects == 1

            await wait_until(disconnected, deadline=30, what="the flooder to be disconnected")
            assert sc.cluster[0].peer_id in driver.node.banned_peers

            async def refused() -> bool:
                await send_flood()
                return driver.transport.refused > 0

            await wait_until(refused, deadline=30, what="the flooder's reconnection refused")
        finally:
            driver.stop()
