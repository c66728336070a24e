"""The live dashboard in a real browser: headless Chromium (Debian's ``chromium`` and
``chromium-driver``, driven by selenium) against four real sidecars beside real Kubo
daemons, their API behind a token.

- The token rules: ``/dashboard?token=`` sets an ``HttpOnly``, ``SameSite=Strict``
  cookie that opens the dashboard's ``GET`` paths and nothing else.
- ``pulsarcast dashboard --cluster DIR`` draws the topic's tree with exactly the
  parent/child edges the sidecars report in ``/v1/status``, and a published event's
  delivery at every subscriber shows within seconds, without a reload.
- A sidecar's own ``/dashboard`` (logged in by ``?token=``) draws its place in the
  tree: its parent and its children.

With ``PULSARCAST_DASHBOARD_SCREENSHOT=PATH`` the cluster view's screenshot is saved
there (docs/dashboard.png is taken so). Without Chromium the tests fail, never skip:
``scripts/setup.sh`` installs it when run as root."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from pulsarcast_ipfs.cluster import LocalSidecarCluster
from pulsarcast_ipfs.testing import wait_until

pytestmark = [pytest.mark.kubo, pytest.mark.cluster, pytest.mark.anyio, pytest.mark.timeout(400)]

NODES = 4
TOKEN = "dashboard-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
DELIVERY_SHOWN_WITHIN = 10.0
"""Seconds from a publish to its delivery at every subscriber shown on the page."""


@pytest.fixture(scope="module")
async def sc(anyio_backend: str) -> AsyncIterator[LocalSidecarCluster]:
    async with LocalSidecarCluster(
        nodes=NODES, run="dashboard", extra_args=["--api-token", TOKEN]
    ) as cluster:
        yield cluster


async def call(sc: LocalSidecarCluster, i: int, method: str, path: str, **kw: Any) -> Any:
    async with sc.client(i, timeout=60.0, headers=AUTH) as c:
        r = await c.request(method, path, **kw)
    assert r.status_code in (200, 201), f"node{i} {method} {path}: {r.status_code} {r.text}"
    return r.json()


@pytest.fixture(scope="module")
async def topic(sc: LocalSidecarCluster) -> str:
    """A topic of node 0 that every other node subscribes to, their tree complete."""
    cid = str((await call(sc, 0, "POST", "/v1/topics", json={"name": "dashboard"}))["cid"])
    for i in range(1, NODES):
        await call(sc, i, "POST", f"/v1/topics/{cid}/subscribe")

    async def joined() -> bool:
        edges = await reported_edges(sc, cid)
        return edges is not None and len(edges) == NODES - 1

    await wait_until(joined, deadline=60, what="every subscriber in the tree")
    return cid


async def reported_edges(sc: LocalSidecarCluster, topic: str) -> set[tuple[str, str]] | None:
    """The tree's (parent, child) edges as the sidecars report them, or None while
    their reports disagree (a child whose parent does not list it, or the reverse)."""
    parents: dict[str, str | None] = {}
    children: dict[str, set[str]] = {}
    for i in range(NODES):
        status = await call(sc, i, "GET", "/v1/status")
        st = next((t for t in status["topics"] if t["root_cid"] == topic), None)
        if st is None:
            return None
        parents[status["peer_id"]] = st["parent"]
        children[status["peer_id"]] = set(st["children"])
    edges = {(p, c) for c, p in parents.items() if p is not None}
    if edges != {(p, c) for p, cs in children.items() for c in cs}:
        return None
    return edges


# -- the browser -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    chromium, chromedriver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or chromedriver is None:
        pytest.fail(
            "the dashboard's browser test needs Debian's chromium and chromium-driver "
            "(scripts/setup.sh installs them as root: apt-get install chromium chromium-driver)"
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        opts.add_argument(arg)
    opts.add_argument("--window-size=1500,1250")
    driver = webdriver.Chrome(options=opts, service=Service(executable_path=chromedriver))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def page_edges(browser: Any, topic: str) -> set[tuple[str, str]]:
    """The edges the page draws for ``topic`` (its SVG lines)."""
    pairs = browser.execute_script(
        "return [...document.querySelectorAll(`section.topic[data-topic='${arguments[0]}']"
        " svg line`)].map(l => [l.dataset.parent, l.dataset.child]);",
        topic,
    )
    return {(p, c) for p, c in pairs}


def page_rows(browser: Any, topic: str) -> dict[str, dict[str, str]]:
    """Each node's row of ``topic``'s table: ``{peer: {column: text}}`` (a cell's
    title where it has one: the whole CID of a shortened one)."""
    rows = browser.execute_script(
        "return [...document.querySelectorAll(`section.topic[data-topic='${arguments[0]}']"
        " tr[data-peer]`)].map(r => [r.dataset.peer, Object.fromEntries("
        "[...r.querySelectorAll('td')].map(td => [td.className, td.title || td.textContent]))]);",
        topic,
    )
    return {peer: cells for peer, cells in rows}


async def page_shows_tree(sc: LocalSidecarCluster, browser: Any, topic: str) -> None:
    """Wait (30 s) until the page draws exactly the edges the sidecars report."""
    seen: dict[str, Any] = {}

    async def same() -> bool:
        want = await reported_edges(sc, topic)
        got = page_edges(browser, topic)
        seen.update(want=want, got=got)
        return want is not None and got == want

    try:
        await wait_until(same, deadline=30, what="the page's tree to match the sidecars'")
    except TimeoutError:
        pytest.fail(f"page edges {seen.get('got')} != reported {seen.get('want')}")


@contextlib.contextmanager
def cluster_dashboard(sc: LocalSidecarCluster) -> Iterator[str]:
    """``pulsarcast dashboard --cluster DIR`` on a free loopback port: its URL."""
    cmd = [str(Path(sys.executable).with_name("pulsarcast")), "dashboard", "--cluster"]
    cmd += [str(sc.base_dir), "--listen", "127.0.0.1:0", "--token", TOKEN]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.search(r"(http://\S+/dashboard)", line)
        assert m, f"pulsarcast dashboard said: {line!r} {proc.poll()}"
        yield m.group(1)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


# -- the tests ---------------------------------------------------------------------------


async def test_token_opens_the_dashboard_only(sc: LocalSidecarCluster, topic: str) -> None:
    async with httpx.AsyncClient(base_url=sc[1].api_url, trust_env=False) as http:
        assert (await http.get("/dashboard")).status_code == 401
        assert (await http.get("/dashboard/events")).status_code == 401
        assert (await http.get("/dashboard", params={"token": "wrong"})).status_code == 401
        r = await http.get("/")  # open: it only redirects, with its query
        assert r.status_code == 307 and r.headers["location"] == "/dashboard", r.headers
        r = await http.get("/", params={"token": TOKEN})
        assert r.headers["location"] == f"/dashboard?token={TOKEN}"
        r = await http.get("/dashboard", params={"token": TOKEN})
        assert r.status_code == 303 and r.headers["location"] == "/dashboard", r.headers
        cookie = r.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie, cookie
        assert "Path=/dashboard" in cookie, cookie
        jar = {"Cookie": f"pulsarcast_dashboard={TOKEN}"}  # what the browser sends
        page = await http.get("/dashboard", headers=jar)
        assert page.status_code == 200 and "<svg" not in page.text  # drawn by the script
        assert "default-src 'self'" in page.headers["content-security-policy"]
        for path in ("/dashboard/dashboard.js", "/dashboard/dashboard.css"):
            assert (await http.get(path, headers=jar)).status_code == 200
        snap = (await http.get("/dashboard/snapshot", headers=jar)).json()
        (node,) = snap["nodes"]
        assert node["peer_id"] == sc[1].kubo.peer_id
        assert topic in [t["root_cid"] for t in node["topics"]]
        # The cookie opens nothing else: the API still wants the bearer header.
        assert (await http.get("/v1/status", headers=jar)).status_code == 401
        r = await http.post(f"/v1/topics/{topic}/publish", json={"text": "x"}, headers=jar)
        assert r.status_code == 401
        assert (
            await http.get("/dashboard", headers={"Cookie": "pulsarcast_dashboard=no"})
        ).status_code == 401
        # The stream: one snapshot a second, SSE data lines.
        got: list[str] = []
        with anyio.fail_after(10):
            async with http.stream("GET", "/dashboard/events", headers=AUTH) as stream:
                assert stream.headers["content-type"].startswith("text/event-stream")
                async for line in stream.aiter_lines():
                    if line.startswith("data: "):
                        got.append(line)
                        if len(got) == 2:
                            break
        assert all('"peer_id"' in g for g in got)


async def test_cluster_view_draws_tree_and_live_delivery(
    sc: LocalSidecarCluster, topic: str, browser: Any
) -> None:
    started = time.monotonic()
    with cluster_dashboard(sc) as url:
        browser.get(url)
        await page_shows_tree(sc, browser, topic)
        assert browser.find_element("id", "view").text == f"cluster view: {NODES} sidecars"
        tree_at = time.monotonic()
        browser.execute_script("window.notReloaded = true;")
        subscribers = [sc[i].kubo.peer_id for i in range(1, NODES)]
        before = page_rows(browser, topic)
        for n in range(5):  # a few events, so that rates and lag show
            published = await call(
                sc, 0, "POST", f"/v1/topics/{topic}/publish", json={"text": f"e{n}"}
            )
        event = published["event"]
        sent = time.monotonic()

        async def shown() -> bool:
            rows = page_rows(browser, topic)
            return all(
                rows[p]["head"] == event
                and int(rows[p]["delivered"]) >= int(before[p]["delivered"]) + 5
                for p in subscribers
            )

        await wait_until(shown, deadline=DELIVERY_SHOWN_WITHIN, what="the delivery on the page")
        shown_after = time.monotonic() - sent
        assert browser.execute_script("return window.notReloaded === true;")
        rows = page_rows(browser, topic)
        for p in subscribers:
            assert rows[p]["lag"] != "—" and rows[p]["rate"] != "—", rows[p]
        await page_shows_tree(sc, browser, topic)  # still the tree the sidecars report
        shot = os.environ.get("PULSARCAST_DASHBOARD_SCREENSHOT")
        if shot:  # traffic while the picture is taken, so that rates and lag show
            for n in range(12):
                await call(sc, 0, "POST", f"/v1/topics/{topic}/publish", json={"text": f"s{n}"})
                await anyio.sleep(0.2)
            browser.save_screenshot(shot)
    print(
        f"\ncluster view: tree drawn {tree_at - started:.1f} s after the page was asked for; "
        f"a delivery shown {shown_after:.2f} s after its publish"
    )


async def test_node_view_draws_its_place(sc: LocalSidecarCluster, topic: str, browser: Any) -> None:
    peer = sc[1].kubo.peer_id
    browser.get(f"{sc[1].api_url}/?token={TOKEN}")  # / -> /dashboard?token= -> /dashboard
    assert browser.current_url == f"{sc[1].api_url}/dashboard"

    async def drawn() -> bool:
        status = await call(sc, 1, "GET", "/v1/status")
        st = next(t for t in status["topics"] if t["root_cid"] == topic)
        want = {(c_p, c) for c_p, c in [(st["parent"], peer)]} | {(peer, c) for c in st["children"]}
        return page_edges(browser, topic) == want

    await wait_until(drawn, deadline=20, what="the node's parent and children on its page")
    assert browser.find_element("id", "view").text == "this node"
    assert set(page_rows(browser, topic)) == {peer}
