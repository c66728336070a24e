"""``pulsarcast topic|sub|pub|history|status``: arguments, output and exit codes.

The sidecar is replaced by ``httpx.MockTransport`` here (the CLI's own logic); the
commands against a real sidecar are in ``tests/test_cli_app_sidecar.py``.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import io
import json
import re
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from pulsarcast_ipfs.cli import _app, main
from pulsarcast_ipfs.sdk import Client, ClientConfig

ME = "12D3KooWMeMeMeMeMeMeMeMeMe"
TOPIC = "bafyreitopic"


def topic_doc(**over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "cid": TOPIC,
        "root_cid": TOPIC,
        "name": "news",
        "author": ME,
        "parent": None,
        "sub_topics": {"meta": "bafyreimeta"},
        "created": "2026-11-21T09:00:00.000000Z",
        "protocol_version": "1.0.0",
        "allowed_publishers": {"enabled": False, "peers": []},
        "request_to_publish": {"enabled": True, "peers": []},
        "event_linking": "LAST_SEEN",
    }
    doc.update(over)
    return doc


def event_doc(n: int, payload: bytes | None = None) -> dict[str, Any]:
    return {
        "cid": f"bafyreiev{n}",
        "topic": TOPIC,
        "author": ME,
        "publisher": ME,
        "parents": [f"bafyreiev{n - 1}"] if n > 1 else [],
        "clock": n - 1,
        "created": "2026-11-21T09:00:01.000000Z",
        "protocol_version": "2.0.0",
        "payload": base64.b64encode(payload or f"event {n}".encode()).decode(),
    }


class FakeSidecar:
    """Answers the contract's endpoints with canned documents; records requests."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []
        self.publish_answer: httpx.Response = httpx.Response(
            200, json={"status": "published", "event": "bafyreinew", "request_id": None}
        )
        self.history_complete = True
        self.first_payload: bytes | None = None

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        path = request.url.path
        if path == "/v1/status":
            return httpx.Response(
                200,
                json={
                    "peer_id": ME,
                    "version": "0.1.0",
                    "kubo_version": "0.43.0",
                    "api": "127.0.0.1:5050",
                    "topics": [
                        {
                            "cid": TOPIC,
                            "root_cid": TOPIC,
                            "name": "news",
                            "role": "relay",
                            "parent": "12D3KooWParentParentParent",
                            "children": ["12D3KooWChildChildChild1"],
                            "subscribed": False,
                            "acting_root": False,
                            "heads": [],
                            "filter": None,
                            "retained": 7,
                            "retained_bytes": 700,
                            "fast": {"subscribed_fast": True, "joined": []},
                            "filters": None,
                            "consumers": 0,
                            "summary": [],
                            "from_a_newer_sidecar": 1,
                        }
                    ],
                },
            )
        if path == "/v1/topics":
            return httpx.Response(201, json=topic_doc(name=json.loads(request.content)["name"]))
        if path == f"/v1/topics/{TOPIC}":
            return httpx.Response(200, json=topic_doc(latest="bafyreinewer"))
        if path.endswith("/update"):
            return httpx.Response(201, json=topic_doc(cid="bafyreiv2", parent=TOPIC))
        if path.endswith("/subscribe"):
            return httpx.Response(200, json={"topic": TOPIC, "subscribed": True})
        if path.endswith("/unsubscribe"):
            return httpx.Response(200, json={"topic": TOPIC, "subscribed": False})
        if path == f"/v1/topics/{TOPIC}/consumers":
            asked = json.loads(request.content or b"{}")
            name = asked.get("name")
            doc = {
                "id": name or "anon-1",
                "name": name,
                "topic": TOPIC,
                "filter": asked.get("filter"),
                "fast": asked.get("fast", False),
                "cursor": asked.get("after", 0),
                "streams": 0,
                "idle_since": 1.0,
                "expires": 61.0,
            }
            return httpx.Response(201, json=doc)
        if path.startswith("/v1/consumers/") and request.method == "DELETE":
            cid = path.rsplit("/", 1)[1]
            return httpx.Response(
                200, json={"id": cid, "closed": True, "topic": TOPIC, "subscribed": False}
            )
        if path.endswith("/publish"):
            return self.publish_answer
        if path.endswith("/history"):
            return self.history(request.url.params)
        if path == "/v1/deliveries":
            lines = []
            for seq in (4, 5):
                d = event_doc(seq, b"\xff\x00" if seq == 5 else self.first_payload)
                d.update(
                    seq=seq,
                    topic_root=TOPIC,
                    topic_name="news",
                    recovered=seq == 5,
                    delivered_at=1.0,
                )
                lines.append(json.dumps(d))
            return httpx.Response(200, content="\n".join(lines) + "\n")
        return httpx.Response(
            404, json={"error": {"code": "not_found", "message": f"no route {path}"}}
        )

    def history(self, params: httpx.QueryParams) -> httpx.Response:
        """Nine events (event n has clock n - 1), at most 4 per page whatever the limit."""
        order, limit = params.get("order", "newest"), min(int(params["limit"]), 4)
        numbers = list(range(9, 0, -1)) if order == "newest" else list(range(1, 10))
        if "after" in params:
            numbers = numbers[numbers.index(int(params["after"].removeprefix("bafyreiev"))) + 1 :]
        page, more = numbers[:limit], len(numbers) > limit
        doc = {
            "events": [event_doc(n) for n in page],
            "next": f"bafyreiev{page[-1]}" if more else None,
            "complete": self.history_complete,
            "missing": [] if self.history_complete else ["bafyreigone"],
            "heads": ["bafyreiev9"],
            "retained": 9,
            "order": order,
        }
        return httpx.Response(200, json=doc)


@pytest.fixture
def sidecar(monkeypatch: pytest.MonkeyPatch) -> tuple[FakeSidecar, list[ClientConfig]]:
    fake = FakeSidecar()
    configs: list[ClientConfig] = []

    def make(*, config: ClientConfig) -> Client:
        configs.append(config)
        return Client(config=config, transport=httpx.MockTransport(fake))

    monkeypatch.setattr(_app, "Client", make)
    monkeypatch.delenv("PULSARCAST_API", raising=False)
    monkeypatch.delenv("PULSARCAST_API_TOKEN", raising=False)
    return fake, configs


Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str]) -> Run:
    def go(*argv: str) -> tuple[int, str, str]:
        code = main(list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    return go


def body(request: httpx.Request) -> Any:
    return json.loads(request.content)


def test_pub_prints_the_event_cid(sidecar: tuple[FakeSidecar, Any], run: Run) -> None:
    fake, _ = sidecar
    assert run("pub", TOPIC, "hello world") == (0, "bafyreinew\n", "")
    assert body(fake.requests[-1]) == {"text": "hello world"}
    code, out, _ = run("pub", TOPIC, "x", "--parent", "bafyreiev1", "--json")
    assert code == 0 and json.loads(out)["event"] == "bafyreinew"
    assert body(fake.requests[-1]) == {"text": "x", "parent": "bafyreiev1"}


def test_pub_with_attributes(sidecar: tuple[FakeSidecar, Any], run: Run) -> None:
    fake, _ = sidecar
    argv = ["--attr", "ups=12", "--attr", "ratio=-0.5", "--attr", "big=1e3"]
    argv += ["--attr", "user=alice", "--attr", 'zip="01234"', "--attr", "empty=", "--attr", "x=a=b"]
    assert run("pub", TOPIC, "hello", *argv)[0] == 0
    assert body(fake.requests[-1]) == {
        "text": "hello",
        "attributes": {
            "ups": 12,
            "ratio": -0.5,
            "big": 1000.0,
            "user": "alice",
            "zip": "01234",
            "empty": "",
            "x": "a=b",
        },
    }
    assert isinstance(body(fake.requests[-1])["attributes"]["big"], float)


@pytest.mark.parametrize(
    ("attr", "says"),
    [("ups", "NAME=VALUE"), ("=1", "NAME=VALUE"), ('s="\\q"', "bad quoted string")],
)
def test_pub_bad_attr_is_a_usage_error(
    sidecar: tuple[FakeSidecar, Any], run: Run, attr: str, says: str
) -> None:
    fake, _ = sidecar
    code, out, err = run("pub", TOPIC, "x", "--attr", attr)
    assert code == 2 and out == "" and says in err
    assert not fake.requests  # nothing sent
    code, _, err = run("pub", TOPIC, "x", "--attr", "a=1", "--attr", "a=2")
    assert code == 2 and "given twice" in err


@pytest.mark.parametrize("argv", [["pub", TOPIC, "-"], ["pub", TOPIC]])
def test_pub_reads_standard_input(
    sidecar: tuple[FakeSidecar, Any], run: Run, monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> None:
    fake, _ = sidecar
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"\x00binary\xff")))
    assert run(*argv)[0] == 0
    assert base64.b64decode(body(fake.requests[-1])["payload"]) == b"\x00binary\xff"


def test_pub_with_only_a_request_to_publish(sidecar: tuple[FakeSidecar, Any], run: Run) -> None:
    fake, _ = sidecar
    fake.publish_answer = httpx.Response(
        200, json={"status": "requested", "event": None, "request_id": "req-7"}
    )
    code, out, err = run("pub", TOPIC, "please")
    assert (code, out) == (0, "req-7\n")
    assert "request to publish sent" in err


def test_refusals_are_one_clear_line_and_exit_1(sidecar: tuple[FakeSidecar, Any], run: Run) -> None:
    fake, _ = sidecar
    fake.publish_answer = httpx.Response(
        403, json={"error": {"code": "not_allowed", "message": "only the author may publish"}}
    )
    code, out, err = run("pub", TOPIC, "x")
    assert (code, out) == (1, "")
    assert err.strip() == "Error: not allowed: only the author may publish"
    code, _, err = run("topic", "show", "bafyreiunknown")
    assert code == 1 and err.startswith("Error: no route") and "(not_found)" in err


def test_topic_create_restricted(sidecar: tuple[FakeSidecar, Any], run: Run) -> None:
    fake, _ = sidecar
    code, out, _ = run(
        "topic", "create", "news", "--restrict", "--allowed-publisher", "12D3KooWOther",
        "--request-to-publish", "--linking", "CUSTOM",
    )  # fmt: skip
    assert (code, out) == (0, f"{TOPIC}\n")
    assert body(fake.requests[-1]) == {
        "name": "news",
        "allowed_publishers": {"enabled": True, "peers": [ME, "12D3KooWOther"]},
        "request_to_publish": {"enabled": True, "peers": []},
        "event_linking": "CUSTOM",
    }
    run("topic", "create", "open", "--no-request-to-publish", "--parent", TOPIC)
    assert body(fake.requests[-1]) == {
        "name": "open",
        "parent": TOPIC,
        "request_to_publish": {"enabled": False, "peers": []},
    }
    run("topic", "create", "few", "--request-to-publish", "12D3KooWA", "12D3KooWB")
    assert body(fake.requests[-1])["request_to_publish"] == {
        "enabled": True,
        "peers": ["12D3KooWA", "12D3KooWB"],
    }


def test_topic_show_and_update(sidecar: tuple[FakeSidecar, Any], run: Run) -> None:
    code, out, _ = run("topic", "show", TOPIC)
    assert code == 0
    fields = dict(line.split(None, 1) for line in out.splitlines())
    assert fields["name"] == "news" and fields["latest"] == "bafyreinewer"
    assert fields["publishers"] == "anyone" and fields["requests"] == "anyone"
    assert fields["#meta"] == "bafyreimeta"
    code, out, _ = run("topic", "show", TOPIC, "--json")
    assert json.loads(out)["cid"] == TOPIC
    assert run("topic", "update", TOPIC, "--linking", "LAST_SEEN") == (0, "bafyreiv2\n", "")


def test_sub_prints_deliveries(sidecar: tuple[FakeSidecar, Any], run: Run) -> None:
    fake, _ = sidecar
    code, out, err = run("sub", TOPIC, "--after", "3", "--no-follow")
    assert code == 0
    assert out.splitlines() == ["event 4", "base64:/wA="]
    assert f"subscribed to {TOPIC}" in err
    # its own consumer, starting after seq 3, read, then closed (it had no name)
    opened, stream, closed = fake.requests[-3:]
    assert body(opened) == {"after": 3}
    assert dict(stream.url.params) == {"follow": "false", "consumer": "anon-1"}
    assert (closed.method, closed.url.path) == ("DELETE", "/v1/consumers/anon-1")
    code, out, _ = run("sub", TOPIC, "--after", "3", "--no-follow", "-l")
    assert out.splitlines()[0] == f"4\tbafyreiev4\t{ME}\tevent 4"
    assert "(recovered)" in out.splitlines()[1]
    code, out, _ = run("sub", TOPIC, "--after", "3", "--no-follow", "--json", "-n", "1")
    lines = out.splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["seq"] == 4


def test_history_and_status(sidecar: tuple[FakeSidecar, Any], run: Run) -> None:
    fake, _ = sidecar
    code, out, _ = run("history", TOPIC, "--limit", "3")
    assert code == 0
    assert [ln.split("\t")[0] for ln in out.splitlines()] == [
        "bafyreiev9",
        "bafyreiev8",
        "bafyreiev7",
    ]
    assert fake.requests[-1].url.params["limit"] == "3"
    assert fake.requests[-1].url.params["order"] == "newest"
    code, out, _ = run("history", TOPIC, "--json", "--limit", "2")
    docs = [json.loads(ln) for ln in out.splitlines()]
    assert [d["cid"] for d in docs] == ["bafyreiev9", "bafyreiev8"]
    assert (docs[0]["parents"], docs[0]["clock"]) == (["bafyreiev8"], 8)
    code, out, _ = run("status")
    assert code == 0 and f"peer ID   {ME}" in out
    assert "relay" in out and "12D3KooWParentParentParent" in out
    code, out, _ = run("status", "--json")
    assert json.loads(out)["topics"][0]["children"] == ["12D3KooWChildChildChild1"]
    # --json carries every field the API returned, known to the SDK or not
    api = fake(httpx.Request("GET", "http://sidecar/v1/status")).json()
    assert json.loads(out) == api


def test_history_oldest_first_pages_and_cursor(sidecar: tuple[FakeSidecar, Any], run: Run) -> None:
    fake, _ = sidecar
    code, out, err = run("history", TOPIC, "--oldest", "--limit", "7")
    assert code == 0 and err == ""
    assert [ln.split("\t")[0] for ln in out.splitlines()] == [f"bafyreiev{n}" for n in range(1, 8)]
    asked = [dict(r.url.params) for r in fake.requests]
    assert asked == [
        {"limit": "7", "order": "oldest"},
        {"limit": "3", "order": "oldest", "after": "bafyreiev4"},
    ]
    code, out, _ = run("history", TOPIC, "--after", "bafyreiev3")
    assert [ln.split("\t")[0] for ln in out.splitlines()] == ["bafyreiev2", "bafyreiev1"]
    code, out, _ = run("history", TOPIC, "--before", "bafyreiev3", "--limit", "1")  # old name
    assert out.split("\t")[0] == "bafyreiev2"
    assert fake.requests[-1].url.params["after"] == "bafyreiev3"


def test_sub_and_history_where(sidecar: tuple[FakeSidecar, Any], run: Run) -> None:
    fake, _ = sidecar
    where = 'ups >= 10 and user in ["a", "b"]'
    code, _, err = run("sub", TOPIC, "--where", where, "--after", "3", "--no-follow")
    assert code == 0 and f"where {where}" in err
    subscribe = [r for r in fake.requests if r.url.path.endswith("/consumers")]
    assert body(subscribe[-1]) == {"filter": where, "after": 3}
    run("sub", TOPIC, "--after", "3", "--no-follow")
    subscribe = [r for r in fake.requests if r.url.path.endswith("/consumers")]
    assert body(subscribe[-1]) == {"after": 3}
    code, _, _ = run("history", TOPIC, "--where", where, "--limit", "2")
    assert code == 0 and fake.requests[-1].url.params["where"] == where


def test_history_says_when_it_is_not_complete(sidecar: tuple[FakeSidecar, Any], run: Run) -> None:
    fake, _ = sidecar
    fake.history_complete = False
    code, out, err = run("history", TOPIC, "--limit", "2")
    assert code == 0 and len(out.splitlines()) == 2
    assert "not complete yet (1 linked event still being fetched)" in err


def test_api_and_token_before_or_after_the_command(
    sidecar: tuple[FakeSidecar, list[ClientConfig]], run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake, configs = sidecar
    run("--api", "10.1.1.1:7000", "--token", "t1", "status")
    run("status", "--api", "http://10.2.2.2:7000", "--token", "t2")
    monkeypatch.setenv("PULSARCAST_API", "10.3.3.3:7000")
    monkeypatch.setenv("PULSARCAST_API_TOKEN", "t3")
    run("status")
    assert [(c.api, c.token) for c in configs] == [
        ("http://10.1.1.1:7000", "t1"),
        ("http://10.2.2.2:7000", "t2"),
        ("http://10.3.3.3:7000", "t3"),
    ]
    assert fake.requests[-1].headers["authorization"] == "Bearer t3"


def test_usage_errors_exit_2(sidecar: tuple[FakeSidecar, Any], run: Run) -> None:
    assert run("--api", "ftp://x", "status")[0] == 2
    code, _, err = run("history", TOPIC, "--limit", "0")
    assert code == 2 and "--limit" in err
    with pytest.raises(SystemExit) as info:
        main(["topic", "create", "x", "--linking", "SOMETIMES"])
    assert info.value.code == 2


@pytest.mark.parametrize(
    "argv",
    [
        ["topic"],
        ["topic", "create"],
        ["topic", "show"],
        ["topic", "update"],
        ["sub"],
        ["pub"],
        ["history"],
        ["status"],
    ],
)
def test_help_everywhere(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main([*argv, "--help"])
    assert info.value.code == 0
    assert "usage: pulsarcast" in capsys.readouterr().out


def test_no_sidecar_says_so(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.delenv("PULSARCAST_API_TOKEN", raising=False)
    code, out, err = run("--api", f"http://127.0.0.1:{port}", "pub", TOPIC, "x")
    assert (code, out) == (1, "")
    assert err.strip() == (
        f"Error: sidecar not reachable at http://127.0.0.1:{port} (connection refused) "
        "— is pulsarcast-sidecar running?"
    )


def test_sub_fast_asks_for_a_fast_subscription(sidecar: tuple[FakeSidecar, Any], run: Run) -> None:
    fake, _ = sidecar
    code, _out, _err = run("sub", TOPIC, "--fast", "--after", "3", "--no-follow")
    assert code == 0
    (sub,) = [r for r in fake.requests if r.url.path.endswith("/consumers")]
    assert json.loads(sub.content) == {"fast": True, "after": 3}
    run("sub", TOPIC, "--after", "3", "--no-follow")
    plain = [r for r in fake.requests if r.url.path.endswith("/consumers")][-1]
    assert json.loads(plain.content or b"{}") == {"after": 3}


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    from pulsarcast_ipfs import __version__

    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out == f"pulsarcast {__version__}\n"


def test_unsub(sidecar: tuple[FakeSidecar, Any], run: Run) -> None:
    fake, _ = sidecar
    code, out, err = run("unsub", TOPIC)
    assert (code, out) == (0, "") and f"unsubscribed from {TOPIC}" in err
    assert fake.requests[-1].url.path == f"/v1/topics/{TOPIC}/unsubscribe"
    code, out, _ = run("unsub", TOPIC, "--json")
    assert json.loads(out) == {"topic": TOPIC, "subscribed": False}


def test_one_flag_name_per_meaning(sidecar: tuple[FakeSidecar, Any], run: Run) -> None:
    """--limit N for sub and history; --cursor CID for history; the old names work."""
    fake, _ = sidecar
    for flag in ("--limit", "-n", "--count"):
        code, out, _ = run("sub", TOPIC, "--after", "3", "--no-follow", flag, "1")
        assert (code, out) == (0, "event 4\n"), flag
    for flag in ("--cursor", "--after", "--before"):
        code, out, _ = run("history", TOPIC, "--limit", "2", flag, "bafyreiev7")
        assert code == 0 and fake.requests[-1].url.params["after"] == "bafyreiev7", flag
        assert [ln.split("\t")[0] for ln in out.splitlines()] == ["bafyreiev6", "bafyreiev5"]
    helps = {cmd: _help(cmd) for cmd in ("sub", "history")}
    assert "--limit N" in helps["sub"] and "--count" not in helps["sub"]
    assert "-n " not in helps["sub"]
    assert "--cursor CID" in helps["history"] and "--before" not in helps["history"]
    assert "--after" not in helps["history"]


def _help(*argv: str) -> str:
    out = io.StringIO()
    with pytest.raises(SystemExit), contextlib.redirect_stdout(out):
        main([*argv, "--help"])
    return out.getvalue()


@pytest.mark.parametrize(
    ("stdin", "argv", "sent"),
    [
        (b"x\n", [], b"x"),
        (b"x\r\n", [], b"x"),
        (b"two\nlines\n\n", [], b"two\nlines\n"),  # exactly one newline dropped
        (b"x", [], b"x"),
        (b"x\n", ["--raw"], b"x\n"),
    ],
)
def test_pub_drops_one_trailing_newline_from_stdin(
    sidecar: tuple[FakeSidecar, Any],
    run: Run,
    monkeypatch: pytest.MonkeyPatch,
    stdin: bytes,
    argv: list[str],
    sent: bytes,
) -> None:
    fake, _ = sidecar
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    assert run("pub", TOPIC, *argv)[0] == 0
    doc = body(fake.requests[-1])
    got = base64.b64decode(doc["payload"]) if "payload" in doc else doc["text"].encode()
    assert got == sent
    # DATA given as an argument is sent as it is
    run("pub", TOPIC, "y\n")
    doc = body(fake.requests[-1])
    got = base64.b64decode(doc["payload"]) if "payload" in doc else doc["text"].encode()
    assert got == b"y\n"


def test_sub_prints_payload_text_as_it_is(sidecar: tuple[FakeSidecar, Any], run: Run) -> None:
    fake, _ = sidecar
    fake.first_payload = b"two\nlines"
    code, out, _ = run("sub", TOPIC, "--after", "3", "--no-follow")
    assert code == 0 and out == "two\nlines\nbase64:/wA=\n"  # no literal backslash-n


@pytest.mark.parametrize(
    ("api", "url"),
    [
        ("/ip4/127.0.0.1/tcp/5150", "http://127.0.0.1:5150"),
        ("/ip6/::1/tcp/5150", "http://[::1]:5150"),
        ("/dns4/sidecar.example/tcp/5150", "http://sidecar.example:5150"),
        ("/dns/sidecar.example/tcp/443/https", "https://sidecar.example:443"),
        ("127.0.0.1:5150", "http://127.0.0.1:5150"),
    ],
)
def test_api_takes_kubo_style_multiaddrs(
    sidecar: tuple[FakeSidecar, list[ClientConfig]], run: Run, api: str, url: str
) -> None:
    _, configs = sidecar
    assert run("--api", api, "status")[0] == 0
    assert configs[-1].api == url


def test_a_bad_multiaddr_is_a_usage_error(sidecar: tuple[FakeSidecar, Any], run: Run) -> None:
    code, out, err = run("--api", "/ip4/127.0.0.1/udp/5150", "status")
    assert (code, out) == (2, "") and "not a TCP multiaddr" in err and len(err.splitlines()) == 1


def _commands(
    parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()
) -> list[tuple[str, ...]]:
    out = [prefix]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out += _commands(sub, (*prefix, name))
    return out


def test_help_texts_point_at_real_sections() -> None:
    """Every ``docs/X.md "Section"`` a help text names is a heading of that file (every
    command and sub-command's --help, the sidecar's too)."""
    from pulsarcast_ipfs.cli import build_parser
    from sidecar.__main__ import build_parser as sidecar_parser

    root = Path(__file__).resolve().parent.parent
    texts = [_help(*argv) for argv in _commands(build_parser())]
    texts.append(sidecar_parser().format_help())
    refs = set()
    for text in texts:
        flat = " ".join(text.split())
        refs |= set(re.findall(r'((?:docs/)?[\w.-]+\.md) "([^"]+)"', flat))
    assert ("docs/http-api.md", "Attributes and filters") in refs
    for path, section in sorted(refs):
        headings = [
            line.lstrip("#").strip()
            for line in (root / path).read_text().splitlines()
            if line.startswith("#")
        ]
        assert section in headings, f'{path} has no section "{section}"'


def test_sub_name_is_a_durable_consumer_that_is_not_closed(
    sidecar: tuple[FakeSidecar, Any], run: Run
) -> None:
    fake, _ = sidecar
    code, out, err = run("sub", TOPIC, "--name", "reader", "--where", "ups > 1", "--no-follow")
    assert code == 0 and out.splitlines() == ["event 4", "base64:/wA="]
    assert "as reader" in err
    opened, stream = fake.requests[-2:]
    assert body(opened) == {"filter": "ups > 1", "name": "reader"}
    assert dict(stream.url.params) == {"follow": "false", "consumer": "reader"}
    assert not [r for r in fake.requests if r.method == "DELETE"]
