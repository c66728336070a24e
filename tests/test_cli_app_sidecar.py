"""``pulsarcast topic|sub|pub|history|status`` as a user runs them (subprocesses)
against real sidecars: two Kubo daemons with a ``pulsarcast-sidecar`` each."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from pulsarcast_ipfs.cluster import LocalSidecarCluster
from pulsarcast_ipfs.testing import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.anyio]

PULSARCAST = str(Path(sys.executable).parent / "pulsarcast")


@pytest.fixture(scope="module")
async def sc(anyio_backend: str) -> AsyncIterator[LocalSidecarCluster]:
    async with LocalSidecarCluster(nodes=2, run="cli-test") as cluster:
        yield cluster


async def cli(
    sc: LocalSidecarCluster, node: int, *argv: str, stdin: bytes = b""
) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PULSARCAST_API")}
    env["PULSARCAST_API"] = sc[node].api_url
    result = await anyio.run_process([PULSARCAST, *argv], input=stdin, env=env, check=False)
    return result.returncode, result.stdout.decode(), result.stderr.decode()


async def joined(sc: LocalSidecarCluster, node: int, topic: str) -> None:
    """Wait until ``status`` shows the node in the tree (the JOIN goes on after
    ``sub`` returned)."""

    async def check() -> bool:
        _, out, _ = await cli(sc, node, "status", "--json")
        return any(t["root_cid"] == topic and t["parent"] for t in json.loads(out)["topics"])

    await wait_until(check, deadline=60, what=f"node{node} joining {topic}", interval=0.2)


async def test_a_session_from_the_shell(sc: LocalSidecarCluster) -> None:
    code, out, err = await cli(sc, 0, "topic", "create", "shell-news")
    assert code == 0, err
    topic = out.strip()
    assert topic.startswith("bafy") and len(out.splitlines()) == 1

    code, out, _ = await cli(sc, 0, "topic", "show", topic, "--json")
    assert code == 0 and json.loads(out)["name"] == "shell-news"

    # a named consumer: the node stays subscribed after `sub` exits
    code, _, err = await cli(sc, 1, "sub", topic, "--name", "shell", "--after", "0", "--no-follow")
    assert code == 0 and "subscribed to" in err
    await joined(sc, 1, topic)

    code, out, _ = await cli(sc, 0, "pub", topic, "first line")
    first = out.strip()
    assert code == 0 and first.startswith("bafy")
    code, out, _ = await cli(sc, 1, "pub", topic, stdin=b"from stdin\n")
    assert code == 0 and out.strip().startswith("bafy")

    # `sub --after 0` replays both deliveries (stdin's trailing newline was dropped).
    code, out, err = await cli(sc, 1, "sub", topic, "--name", "shell", "--after", "0", "-n", "2")
    assert code == 0, err
    assert out.splitlines() == ["first line", "from stdin"]

    code, out, _ = await cli(sc, 1, "history", topic, "--json")
    events = [json.loads(line) for line in out.splitlines()]
    assert first in [e["cid"] for e in events] and len(events) == 2
    keys = [(e["clock"], e["cid"]) for e in events]  # newest first (clock, then CID bytes)
    assert all(isinstance(e["parents"], list) for e in events) and keys[0][0] >= keys[1][0]
    code, out, _ = await cli(sc, 1, "history", topic, "--oldest")
    assert [line.split("\t")[0] for line in out.splitlines()] == [c for _, c in keys[::-1]]

    code, out, _ = await cli(sc, 1, "status", "--json")
    status = json.loads(out)
    (mine,) = [t for t in status["topics"] if t["root_cid"] == topic]
    assert mine["subscribed"] and mine["role"] == "subscriber" and mine["parent"]
    # --json carries every field the API returns
    async with sc.client(1) as api:
        raw = (await api.get("/v1/status")).json()
    assert set(status) == set(raw)
    assert [set(t) for t in status["topics"]] == [set(t) for t in raw["topics"]]
    assert {"filter", "retained", "retained_bytes", "fast"} <= set(mine)
    code, out, _ = await cli(sc, 0, "status")
    assert code == 0 and "shell-news" in out and "root" in out


async def test_errors_from_the_shell(sc: LocalSidecarCluster) -> None:
    code, out, _ = await cli(sc, 0, "topic", "create", "shell-closed", "--restrict")
    closed = out.strip()
    assert code == 0
    code, out, _ = await cli(sc, 0, "topic", "show", closed)
    assert "publishers" in out and "requests    refused" in out
    await cli(sc, 1, "sub", closed, "--name", "closed", "--no-follow")
    await joined(sc, 1, closed)
    code, out, err = await cli(sc, 1, "pub", closed, "let me")
    assert (code, out) == (1, "")
    assert err.startswith("Error: not allowed:") and "request to publish" in err
    code, _, err = await cli(sc, 0, "topic", "show", "nonsense")
    assert code == 1 and err.startswith("Error:") and "(bad_request)" in err
