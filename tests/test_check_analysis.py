"""The checker's verdict (:func:`pulsarcast_ipfs.check.analyse`), pure: recorded
calls and reads with one anomaly planted at a time, each caught, counted under its
level and nowhere else; a clean history has none. Also the publishers' reading of
answers (acknowledged / failed / unknown, ack levels detected from ``holders``), on
a mock transport, the resource summary, and bad ``pulsarcast check`` options."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from pulsarcast_ipfs.check import (
    NodeRead,
    PublishCall,
    Publishers,
    Sample,
    analyse,
    payload_key,
    summarise,
)
from pulsarcast_ipfs.check._runner import has_relay
from pulsarcast_ipfs.cli import main

pytestmark = pytest.mark.anyio


def _ev(key: str, cid: str, parents: tuple[str, ...] = ()) -> dict[str, Any]:
    payload = base64.b64encode(key.encode()).decode()
    return {"cid": cid, "payload": payload, "parents": list(parents)}


def _calls() -> list[PublishCall]:
    """Three acknowledged calls (a chain c1 <- c2 <- c3) at three levels, a failed
    one and an unknown one."""
    return [
        PublishCall(key="chk/r/0/1", node=0, level="local", outcome="acknowledged", cid="c1"),
        PublishCall(
            key="chk/r/0/2", node=0, level="1", effective="1", outcome="acknowledged", cid="c2"
        ),
        PublishCall(
            key="chk/r/1/1", node=1, level="2", effective="2", outcome="acknowledged", cid="c3"
        ),
        PublishCall(key="chk/r/1/2", node=1, level="local", outcome="failed"),
        PublishCall(key="chk/r/1/3", node=1, level="local", outcome="unknown"),
    ]


def _clean() -> list[dict[str, Any]]:
    return [
        _ev("chk/r/0/1", "c1"),
        _ev("chk/r/0/2", "c2", ("c1",)),
        _ev("chk/r/1/1", "c3", ("c2",)),
        _ev("chk/r/1/3", "c5", ("c3",)),  # the unknown call's event did go out
    ]


def _reads(*logs: list[dict[str, Any]]) -> dict[int, NodeRead]:
    return {i: NodeRead(deliveries=tuple(log), history=tuple(log)) for i, log in enumerate(logs)}


def _counts(rep: Any) -> dict[str, tuple[int, ...]]:
    return {
        name: (len(r.lost), r.lost_excused, len(r.duplicated), len(r.unexpected), len(r.causal))
        for name, r in rep.levels.items()
    }


def test_a_clean_run_has_no_violation_and_follows_the_unknown_call() -> None:
    rep = analyse(_calls(), _reads(_clean(), _clean()))
    assert rep.violations == 0
    assert list(rep.levels) == ["local", "1", "2"]
    local = rep.levels["local"]
    assert local.calls == {"acknowledged": 1, "failed": 1, "unknown": 1}
    assert local.unknown_fate == {"everywhere": 1, "somewhere": 0, "nowhere": 0}
    assert local.failed_fate == {"everywhere": 0, "somewhere": 0, "nowhere": 1}
    assert local.orphans == 0 and local.history_missing == 0
    assert "lost" in rep.table().splitlines()[0]


def test_a_lost_acknowledged_event_is_counted_under_its_level() -> None:
    log = [d for d in _clean() if d["cid"] != "c2"]
    rep = analyse(_calls(), _reads(_clean(), log))
    assert _counts(rep)["1"] == (1, 0, 0, 0, 0)
    assert rep.levels["1"].lost == [
        {"key": "chk/r/0/2", "cid": "c2", "publisher": 0, "missing_at": [1]}
    ]
    assert rep.levels["2"].orphans == 1  # c3's parent never came at node 1: not causal
    assert rep.violations == 1


def test_a_local_event_of_a_destroyed_publisher_is_excused_other_levels_are_not() -> None:
    log = [d for d in _clean() if d["cid"] not in ("c1", "c2")]
    rep = analyse(_calls(), _reads(log, log), destroyed={0: 1.0})
    assert _counts(rep)["local"] == (0, 1, 0, 0, 0)
    assert _counts(rep)["1"] == (1, 0, 0, 0, 0)  # ack=1 promised another holder
    rep = analyse(_calls(), _reads(log, log))  # publisher alive: a loss
    assert _counts(rep)["local"] == (1, 0, 0, 0, 0)
    rep = analyse(_calls(), _reads(_clean(), log), destroyed={0: 1.0})
    # ... and so it is when another live subscriber has the event: it did go out
    assert _counts(rep)["local"] == (1, 0, 0, 0, 0)


def test_duplicates_unexpected_and_causal_inversions_are_caught() -> None:
    dup = [*_clean(), _ev("chk/r/0/1", "c1")]
    rep = analyse(_calls(), _reads(_clean(), dup))
    assert _counts(rep)["local"] == (0, 0, 1, 0, 0) and rep.violations == 1
    # the same value as a second event: a duplicate of the value and an unexpected event
    other = [*_clean(), _ev("chk/r/0/2", "c9")]
    rep = analyse(_calls(), _reads(other, _clean()))
    assert _counts(rep)["1"] == (0, 0, 0, 1, 0)
    foreign = [*_clean(), _ev("chk/r/7/7", "c8"), {"cid": "c7", "payload": "aGk="}]
    rep = analyse(_calls(), _reads(foreign, _clean()))
    assert _counts(rep)["-"] == (0, 0, 0, 2, 0) and rep.violations == 2
    swapped = _clean()
    swapped[1], swapped[2] = swapped[2], swapped[1]  # c3 before its parent c2
    rep = analyse(_calls(), _reads(_clean(), swapped))
    assert _counts(rep)["2"] == (0, 0, 0, 0, 1)
    assert rep.levels["2"].causal == [{"node": 1, "cid": "c3", "parent": "c2", "key": "chk/r/1/1"}]


def test_payload_keys_are_only_ours() -> None:
    assert payload_key(_ev("chk/r/0/1", "c")) == "chk/r/0/1"
    assert payload_key({"payload": base64.b64encode(b"hello").decode()}) is None
    assert payload_key({"payload": "%%%"}) is None
    assert payload_key({"payload": base64.b64encode(b"\xff\xfe").decode()}) is None


def _publishers(handler: Any) -> tuple[Publishers, httpx.AsyncClient]:
    pubs = Publishers(api_url=lambda i: "http://sidecar", topic="t", run="r", levels=("1",), seed=1)
    return pubs, httpx.AsyncClient(transport=httpx.MockTransport(handler))


async def test_answers_become_outcomes_and_ack_levels_are_detected() -> None:
    answers = iter(
        [
            httpx.Response(200, json={"status": "published", "event": "c1"}),
            httpx.Response(200, json={"status": "published", "event": "c2", "holders": ["P"]}),
            httpx.Response(
                504,
                json={
                    "error": {
                        "code": "not_acknowledged",
                        "message": "m",
                        "event": "c3",
                        "holders": [],
                    }
                },
            ),
            httpx.Response(503, json={"error": {"code": "kubo_unavailable", "message": "m"}}),
        ]
    )
    bodies: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return next(answers)

    pubs, http = _publishers(handler)
    calls = [PublishCall(key=f"chk/r/0/{n}", node=0, level="1") for n in range(4)]
    async with http:
        for c in calls:
            await pubs.call(http, 0, c)
    assert [c.outcome for c in calls] == ["acknowledged", "acknowledged", "unknown", "failed"]
    assert [c.effective for c in calls] == ["local", "1", "1", "local"]
    assert calls[1].holders == ("P",) and calls[2].cid == "c3"
    assert all(b["ack"] == 1 for b in bodies) and pubs.ack_supported is True


async def test_an_api_refusing_ack_is_asked_again_without_it_and_cuts_are_unknown() -> None:
    bodies: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        bodies.append(body)
        if "ack" in body:
            return httpx.Response(
                400, json={"error": {"code": "bad_request", "message": "unknown field ack"}}
            )
        if body["text"].endswith("/1"):
            raise httpx.ReadTimeout("slow")
        if body["text"].endswith("/2"):
            raise httpx.ConnectError("refused")
        return httpx.Response(200, json={"status": "published", "event": "c"})

    pubs, http = _publishers(handler)
    calls = [PublishCall(key=f"chk/r/0/{n}", node=0, level="1") for n in range(3)]
    async with http:
        for c in calls:
            await pubs.call(http, 0, c)
    assert pubs.ack_supported is False
    assert [c.outcome for c in calls] == ["acknowledged", "unknown", "failed"]
    assert ["ack" in b for b in bodies] == [True, False, False, False]


def test_the_resource_summary_measures_after_the_settling_time() -> None:
    mib = 1024 * 1024
    samples = [
        Sample(t=t, node=0, rss=(50 + t // 10) * mib, fds=30 + t % 3, state_bytes=t, repo_bytes=2)
        for t in range(0, 100, 10)
    ]
    doc = summarise(samples, settle=50)["nodes"]["0"]
    assert doc["rss_at_settle_mib"] == 55 and doc["rss_growth_mib"] == 4
    assert (doc["fds_min"], doc["fds_max"]) == (30, 32)
    assert doc["state_max_mib"] == 90 / mib


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nodes", "2"], "Error: nodes: at least 4"),
        (["--levels", "local,all"], "Error: levels: local or a number"),
        (["--faults", "kill_restart,meteor"], "Error: unknown fault kinds ['meteor']"),
        (["--publishers", "9"], "Error: publishers: more than the nodes"),
        (["--rounds", "0"], "Error: --rounds: at least 1"),
        (["--plant-loss", "3"], "refused unless PULSARCAST_ALLOW_MISBEHAVE=1"),
        (["--gap", "40-20"], "argument --gap: expected 0 < MIN <= MAX"),
        (["--gap", "soon"], "argument --gap: expected MIN-MAX seconds"),
    ],
)
def test_bad_check_options_are_one_line_errors_and_start_nothing(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    message: str,
) -> None:
    monkeypatch.delenv("PULSARCAST_ALLOW_MISBEHAVE", raising=False)
    out = tmp_path / "run"
    try:
        code = main(["check", "--out", str(out), *args])
    except SystemExit as exc:  # argparse's own usage errors
        code = int(exc.code or 0)
    err = capsys.readouterr().err
    assert code == 2 and message in err, err
    assert "Traceback" not in err and not out.exists()


def test_a_tree_has_relays_only_when_a_non_root_node_has_children() -> None:
    flat = {0: ("root", None, [1, 2, 3, 4]), 1: ("subscriber", 0, []), 2: None}
    deep = {0: ("root", None, [1, 2]), 1: ("subscriber", 0, [3]), 3: ("subscriber", 1, [])}
    assert not has_relay(flat)
    assert has_relay(deep)
