"""The dashboard's parts that need no Kubo: ``pulsarcast dashboard``'s bad input (one
line, no traceback), its cluster view of a sidecar that does not answer, and a page
that loads nothing from elsewhere. The page in a real browser against real sidecars
is tests/test_dashboard_browser.py."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from pulsarcast_ipfs.cli._dashboard import parse_listen
from pulsarcast_ipfs.dashboard import ClusterView
from pulsarcast_ipfs.dashboard._routes import asset

EXE = Path(sys.executable).parent / "pulsarcast"


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(EXE), "dashboard", *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "no sources: give --api URL"),
        (("--cluster", "nowhere"), "no sidecar cluster in nowhere"),
        (("--api", "127.0.0.1:1", "--listen", "0.0.0.0:8090"), "serves loopback only"),
        (("--api", "127.0.0.1:1", "--listen", "8090"), "--listen must be HOST:PORT"),
        (("--api", "ftp://x"), "must be an http(s) URL"),
    ],
)
def test_bad_input_one_line(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    res = _run(*args, cwd=tmp_path)
    assert res.returncode == 1, res
    assert message in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "Traceback" not in res.stderr + res.stdout


def test_busy_port_one_line(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        res = _run("--api", "127.0.0.1:1", "--listen", f"127.0.0.1:{port}", cwd=tmp_path)
    assert res.returncode == 1 and f"cannot listen on 127.0.0.1:{port}" in res.stderr, res
    assert "Traceback" not in res.stderr


def test_help(tmp_path: Path) -> None:
    res = _run("--help", cwd=tmp_path)
    assert res.returncode == 0 and "--cluster" in res.stdout and "--listen" in res.stdout


def test_listen_forms() -> None:
    assert parse_listen("127.0.0.1:0") == ("127.0.0.1", 0)
    assert parse_listen("[::1]:8090") == ("::1", 8090)
    with pytest.raises(ValueError, match="loopback"):
        parse_listen("192.0.2.1:8090")


@pytest.mark.anyio
async def test_cluster_view_names_a_silent_sidecar() -> None:
    with socket.socket() as s:  # a port where nothing listens
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    view = ClusterView([f"http://127.0.0.1:{port}"], timeout=2)
    try:
        doc = await view.snapshot()
    finally:
        await view.aclose()
    assert doc["cluster"] is True
    (node,) = doc["nodes"]
    assert node["api"] == f"http://127.0.0.1:{port}" and node["error"].startswith("unreachable")


def test_page_loads_nothing_from_elsewhere() -> None:
    """Every URL in the page's files is relative (the SVG namespace is a name, not a
    load): the dashboard works offline."""
    for name in ("index.html", "dashboard.js", "dashboard.css"):
        text = asset(name).decode()
        urls = re.findall(r"(?:https?:)?//[\w.-]+", text)
        assert urls == (["http://www.w3.org"] if name == "dashboard.js" else []), (name, urls)
        assert "@import" not in text and "fetch(" not in text
