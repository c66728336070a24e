"""The end-to-end flow on every Kubo release of the matrix (``KUBO_MATRIX``, README.md
"Supported Kubo versions"): three Kubo daemons of that release with a sidecar each;
a topic created on one, the two others subscribe, events published from two nodes
(signed, as by default) are delivered to both subscribers, and a subscriber's
history of the topic is complete. A release that is not built (``scripts/build-kubo.sh VERSION``) is
skipped, saying so."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from pulsarcast_ipfs.cluster import LocalSidecarCluster
from pulsarcast_ipfs.testing import wait_until
from pulsarcast_ipfs.tools import IPFS_ENV, KUBO_MATRIX, ToolNotFound, kubo_release_binary

ROOT = Path(__file__).resolve().parent.parent

EVENTS = 4


async def _ok(sc: LocalSidecarCluster, i: int, method: str, path: str, **kw: Any) -> Any:
    async with sc.client(i) as c:
        r: httpx.Response = await c.request(method, path, **kw)
    assert r.status_code in (200, 201), f"node{i} {method} {path}: {r.status_code} {r.text}"
    return r


async def _delivered(sc: LocalSidecarCluster, i: int, topic: str) -> list[str]:
    r = await _ok(sc, i, "GET", "/v1/deliveries", params={"after": 0, "follow": "false"})
    lines = [json.loads(x) for x in r.text.splitlines() if x.strip()]
    return [d["cid"] for d in lines if d["topic_root"] == topic]


@pytest.mark.kubo
@pytest.mark.cluster
@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.parametrize("version", KUBO_MATRIX)
async def test_the_end_to_end_flow_on_each_kubo_release(
    version: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    try:
        binary = kubo_release_binary(version)
    except ToolNotFound as exc:
        pytest.skip(str(exc))
    reported = await anyio.run_process([binary, "version", "-n"])
    assert reported.stdout.decode().strip() == version.removeprefix("v")
    monkeypatch.setenv(IPFS_ENV, str(binary))
    async with LocalSidecarCluster(nodes=3, run=f"matrix-{version}") as sc:
        st = (await _ok(sc, 0, "GET", "/v1/status")).json()
        assert st["kubo_version"] == version.removeprefix("v")
        topic = (await _ok(sc, 0, "POST", "/v1/topics", json={"name": "matrix"})).json()["cid"]
        for i in (1, 2):
            await _ok(sc, i, "POST", f"/v1/topics/{topic}/subscribe")

        async def joined() -> bool:
            for i in (1, 2):
                st = (await _ok(sc, i, "GET", "/v1/status")).json()
                if not any(t["root_cid"] == topic and t["parent"] for t in st["topics"]):
                    return False
            return True

        await wait_until(joined, deadline=60, what="both subscribers joined", interval=0.3)
        published = []
        for n in range(EVENTS):
            r = await _ok(
                sc,
                n % 2,
                "POST",
                f"/v1/topics/{topic}/publish",
                json={"ack": "local", "text": f"e{n}"},
            )
            assert r.json()["status"] == "published", r.json()
            published.append(r.json()["event"])

        async def everywhere() -> bool:
            for i in (1, 2):
                if sorted(await _delivered(sc, i, topic)) != sorted(published):
                    return False
            return True

        await wait_until(everywhere, deadline=60, what="every event delivered", interval=0.3)
        r = await _ok(sc, 2, "GET", f"/v1/topics/{topic}/history", params={"order": "oldest"})
        history = r.json()
        assert sorted(e["cid"] for e in history["events"]) == sorted(published)
        assert history["complete"]


@pytest.mark.parametrize("arg", ["", "0.42", "latest", "v0.42.0; rm -rf /"])
def test_the_build_script_refuses_what_is_not_a_release_in_one_line(arg: str) -> None:
    r = subprocess.run(
        ["bash", ROOT / "scripts" / "build-kubo.sh", arg], capture_output=True, text=True
    )
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and "expected a Kubo release" in r.stderr, r.stderr


def test_the_build_script_has_help() -> None:
    r = subprocess.run(
        ["bash", ROOT / "scripts" / "build-kubo.sh", "--help"], capture_output=True, text=True
    )
    assert r.returncode == 0 and "scripts/build-kubo.sh v0.42.0" in r.stdout
