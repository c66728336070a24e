"""One sidecar per Kubo, on real daemons: a second ``pulsarcast-sidecar`` started beside
a Kubo that already has a live one prints one line and exits non-zero, before it
changes anything in Kubo; the first goes on unaffected (its p2p listener still in
Kubo, still delivering). Also: a busy API port, Kubo with stream mounting off (the
printed ``ipfs config`` command is run as printed and fixes it), and a stale listener
left by a crashed sidecar, which the next one takes over."""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path

import anyio
import anyio.abc
import pytest

from pulsarcast_ipfs.cluster import LocalSidecarCluster
from pulsarcast_ipfs.cluster._ports import free_port
from pulsarcast_ipfs.cluster._process import child_env
from pulsarcast_ipfs.testing import wait_until
from pulsarcast_ipfs.tools import ipfs_binary
from sidecar import PROTOCOL

pytestmark = [pytest.mark.kubo, pytest.mark.anyio]


@pytest.fixture(scope="module")
async def sc(anyio_backend: str) -> AsyncIterator[LocalSidecarCluster]:
    async with LocalSidecarCluster(nodes=2, run="one-per-kubo") as cluster:
        yield cluster


async def second_sidecar(
    sc: LocalSidecarCluster, tmp_path: Path, *, api_port: int | None = None
) -> tuple[int, list[str]]:
    """Start another sidecar beside node 0's Kubo; its exit code and stderr lines."""
    cmd = [
        sys.executable,
        "-m",
        "sidecar",
        "--kubo-api",
        sc.cluster[0].api_url,
        "--api",
        f"127.0.0.1:{api_port or free_port()}",
        "--state-dir",
        str(tmp_path / "second"),
        "--p2p-port",
        str(free_port()),
    ]
    with anyio.fail_after(30):
        done = await anyio.run_process(cmd, check=False, env=child_env())
    assert not done.stdout
    return done.returncode, done.stderr.decode().splitlines()


async def listeners(sc: LocalSidecarCluster) -> list[str]:
    """The targets of node 0's p2p listeners for the protocol."""
    async with sc.cluster[0].client() as kubo:
        return [
            x.target_address
            for x in await kubo.p2p_ls()
            if x.protocol == PROTOCOL and x.listen_address.startswith("/p2p/")
        ]


async def first_still_delivers(sc: LocalSidecarCluster, name: str) -> None:
    """Node 1 publishes on a topic node 0 subscribes to: the event reaches node 0 through
    node 0's p2p listener (its tree parent sends it there)."""
    async with sc.client(1) as one, sc.client(0) as zero:
        topic = (await one.post("/v1/topics", json={"name": name})).json()["cid"]
        assert (await zero.post(f"/v1/topics/{topic}/subscribe", json={})).status_code == 200

        async def has_parent() -> bool:
            st = (await zero.get("/v1/status")).json()
            return any(t["root_cid"] == topic and t["parent"] for t in st["topics"])

        await wait_until(has_parent, deadline=30, what="node0 joining", interval=0.2)
        event = (
            await one.post(f"/v1/topics/{topic}/publish", json={"ack": "local", "text": "hi"})
        ).json()

        async def delivered() -> bool:
            r = await zero.get(
                "/v1/deliveries", params={"topic": topic, "after": 0, "follow": "false"}
            )
            return event["event"] in {json.loads(x)["cid"] for x in r.text.splitlines() if x}

        await wait_until(delivered, deadline=30, what="delivery to node0", interval=0.2)


def first_log_quiet(sc: LocalSidecarCluster) -> None:
    tail = sc[0].log_tail(200)
    assert "p2p listener for" not in tail, tail


async def test_a_second_sidecar_is_refused_and_the_first_goes_on(
    sc: LocalSidecarCluster, tmp_path: Path
) -> None:
    own = f"/ip4/127.0.0.1/tcp/{sc[0].p2p_port}"
    assert await listeners(sc) == [own]
    code, err = await second_sidecar(sc, tmp_path)
    assert code == 1 and len(err) == 1, err
    assert err[0].startswith("pulsarcast-sidecar: another sidecar serves /x/pulsarcast/")
    assert own in err[0] and "something answers there" in err[0]
    # nothing of the second one was left in Kubo or on disk, and the first is unaffected
    assert not (tmp_path / "second" / "state.json").exists()
    await anyio.sleep(2.5)  # two looks of the first one's watchdog
    assert await listeners(sc) == [own]
    assert sc[0].is_running()
    await first_still_delivers(sc, "after-second")
    first_log_quiet(sc)


async def test_a_busy_api_port_fails_before_kubo_is_touched(
    sc: LocalSidecarCluster, tmp_path: Path
) -> None:
    own = f"/ip4/127.0.0.1/tcp/{sc[0].p2p_port}"
    code, err = await second_sidecar(sc, tmp_path, api_port=sc[0].api_port)
    assert code == 1 and len(err) == 1, err
    assert f"cannot serve the API on 127.0.0.1:{sc[0].api_port}" in err[0]
    assert "Traceback" not in err[0] and "--api HOST:PORT" in err[0]
    assert await listeners(sc) == [own]
    await first_still_delivers(sc, "after-busy-port")
    first_log_quiet(sc)


async def test_stream_mounting_off_prints_the_command_that_fixes_it(
    sc: LocalSidecarCluster, tmp_path: Path
) -> None:
    node = sc.cluster[1]
    env = child_env(node.repo)
    ipfs = str(ipfs_binary())
    off = [ipfs, "config", "--json", "Experimental.Libp2pStreamMounting", "false"]
    await anyio.run_process(off, env=env)
    try:
        cmd = [
            sys.executable,
            "-m",
            "sidecar",
            "--kubo-api",
            node.api_url,
            "--api",
            f"127.0.0.1:{free_port()}",
            "--state-dir",
            str(tmp_path / "third"),
        ]
        with anyio.fail_after(30):
            done = await anyio.run_process(cmd, check=False, env=child_env())
        err = done.stderr.decode().splitlines()
        assert done.returncode == 1 and len(err) == 1, err
        assert "Experimental.Libp2pStreamMounting is false" in err[0]
        fix = err[0].split("needs it on: ", 1)[1].split(" (then restart", 1)[0]
        assert fix.startswith("ipfs config ")
        # the printed command, run as printed (against the running daemon), fixes it
        await anyio.run_process([ipfs, *shlex.split(fix)[1:]], env=env)
        async with node.client() as kubo:
            assert await kubo.config_get("Experimental.Libp2pStreamMounting") is True
    finally:
        await anyio.run_process([*off[:-1], "true"], env=env)


async def test_the_watchdog_says_what_it_saw(sc: LocalSidecarCluster) -> None:
    """The running sidecar's listener replaced by one to another live target is left
    alone (one warning naming it); once nothing answers there, taken back; closed, it
    is registered again (and the warning says it was absent)."""
    own = f"/ip4/127.0.0.1/tcp/{sc[0].p2p_port}"
    seen = len(sc[0].log_tail(10_000).splitlines())

    def new_log() -> str:
        return "\n".join(sc[0].log_tail(10_000).splitlines()[seen:])

    async def logged(text: str) -> None:
        async def check() -> bool:
            return text in new_log()

        await wait_until(check, deadline=10, what=text, interval=0.2)

    other = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = other.extra(anyio.abc.SocketAttribute.local_port)
    elsewhere = f"/ip4/127.0.0.1/tcp/{port}"
    async with sc.cluster[0].client() as kubo:
        await kubo.p2p_close(protocol=PROTOCOL, target_address=own)
        await kubo.p2p_listen(PROTOCOL, elsewhere)
        await logged(f"now points to {elsewhere}, not to this sidecar's {own}")
        await anyio.sleep(2.5)
        assert await listeners(sc) == [elsewhere]
        assert new_log().count("now points to") == 1  # said once, not every second
        await other.aclose()
        await logged(f"points to {elsewhere}, where nothing answers: taking it back")
        await wait_until(
            lambda: _is(listeners(sc), [own]), deadline=10, what="taken back", interval=0.2
        )
        await kubo.p2p_close(protocol=PROTOCOL, target_address=own)
        await logged("absent from Kubo")
        await wait_until(
            lambda: _is(listeners(sc), [own]), deadline=10, what="registered", interval=0.2
        )
    assert "restarted?" not in new_log()


async def _is(got: Awaitable[list[str]], want: list[str]) -> bool:
    return await got == want


async def test_a_stale_listener_is_taken_over(sc: LocalSidecarCluster) -> None:
    await sc.kill_sidecar(0)  # SIGKILL: its listener stays in Kubo, nothing answers there
    own = f"/ip4/127.0.0.1/tcp/{sc[0].p2p_port}"
    assert await listeners(sc) == [own]
    await sc.start_sidecar(0)
    assert "taking over a stale p2p listener" in sc[0].log_tail(200)
    assert await listeners(sc) == [own]
    await first_still_delivers(sc, "after-takeover")
