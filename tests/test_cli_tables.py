"""``status`` and ``cluster status`` tables: in an 80-column terminal every line fits
and IDs and addresses fold onto further lines, never cut; piped, each row is one
line with whole IDs."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from pulsarcast_ipfs.cli import _app, _cluster, _output, main
from pulsarcast_ipfs.sdk import Client, ClientConfig

PEER = "12D3KooWGzxzKZYveHXtpG6AsrUJBcWxHBFS2HsEoGTxrMLvKXtf"
PARENT = "12D3KooWQYhTNQdmr3ArTeUHRYzFg94BKyTkoWBDWez9kSCVe2Xo"
CHILD = "12D3KooWNvSZnPi3RrhrTwEY4LuuBeB3K6wyy4Zb4jY4tNkC1ehg"
TOPIC = "bafyreigdmqpykrgxyaxtlafqpqhzrb7qy2rh75nldvfd4tucqmcqqgzvmq"


def status_doc() -> dict[str, Any]:
    topic = {
        "cid": TOPIC,
        "root_cid": TOPIC,
        "name": "news",
        "role": "relay",
        "parent": PARENT,
        "children": [CHILD],
        "subscribed": True,
        "filter": None,
        "acting_root": False,
        "heads": [],
        "retained": 0,
        "retained_bytes": 0,
        "fast": None,
    }
    return {
        "peer_id": PEER,
        "version": "0.1.0",
        "kubo_version": "0.43.0",
        "api": "127.0.0.1:5050",
        "topics": [topic],
    }


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Standard output is an 80-column terminal."""
    monkeypatch.setattr(_output, "stdout_is_terminal", lambda: True)
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("LINES", "40")


def column(out: str, index: int) -> str:
    """The text of one column of a one-row table, its folded lines joined."""
    body = [ln for ln in out.splitlines() if ln.count("│") >= index + 2]
    cells = [ln.split("│")[index + 1].strip() for ln in body]
    return "".join(cells)  # (the header's lines are drawn with ┃, not │)


def run_status(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> str:
    def make(*, config: ClientConfig) -> Client:
        answer = httpx.Response(200, json=status_doc())
        return Client(config=config, transport=httpx.MockTransport(lambda r: answer))

    monkeypatch.setattr(_app, "Client", make)
    assert main(["status"]) == 0
    return capsys.readouterr().out


def test_status_in_a_narrow_terminal_folds_ids(
    terminal: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = run_status(monkeypatch, capsys)
    assert max(len(ln) for ln in out.splitlines()) <= 80, out
    assert "…" not in out
    table = out[out.index("topics (1)") :]
    assert column(table, 1) == TOPIC
    assert column(table, 3) == PARENT
    assert column(table, 4) == CHILD


def test_status_piped_has_whole_ids_on_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = run_status(monkeypatch, capsys)
    row = next(ln for ln in out.splitlines() if "news" in ln)
    assert TOPIC in row and PARENT in row and CHILD in row


def cluster_rows() -> list[dict[str, Any]]:
    return [
        {
            "name": f"node{i}",
            "peer_id": peer,
            "api": f"http://127.0.0.1:{40000 + i}",
            "swarm": f"/ip4/127.0.0.1/tcp/{41000 + i}",
            "announce": None,
            "pid": 123456 + i,
            "running": True,
            "lan_peers": 1,
            "connected": 1,
            "rss_mib": 70.5,
        }
        for i, peer in enumerate([PEER])
    ]


def test_cluster_status_in_a_narrow_terminal_folds_ids(
    terminal: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    async def rows(cluster: Any) -> list[dict[str, Any]]:
        return cluster_rows()

    monkeypatch.setattr(_cluster, "node_rows", rows)
    _cluster.print_status(object())  # type: ignore[arg-type]
    out = capsys.readouterr().out
    assert max(len(ln) for ln in out.splitlines()) <= 80, out
    assert "…" not in out
    assert column(out, 1) == PEER
    assert column(out, 2) == "http://127.0.0.1:40000"
    assert column(out, 3) == "/ip4/127.0.0.1/tcp/41000"
