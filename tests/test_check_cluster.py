"""The checker on a real cluster (``pulsarcast check``, docs/faults.md "The checker").

A 3-minute round on 5 nodes with relays (``flat_fanout`` 3) under the seeded
nemesis, every fault kind at least once, passes; a shorter round (partitions and
slow links only) whose last sidecar drops one delivery on purpose (``--misbehave
lose=N``, test only) fails, and the checker names that very event, and only it, as
lost at that node.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pulsarcast_ipfs.check import FAULT_KINDS, CheckConfig, render, run_check
from pulsarcast_ipfs.cli import main
from pulsarcast_ipfs.cluster import RELAY_FANOUT

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

KNOWN_GAPS: tuple[str, ...] = ()
"""Fault kinds this code does not yet survive, left out of the 3-minute round until
fixed (docs/faults.md "Known gaps"); none now. ``pulsarcast check`` runs every kind
by default."""


@pytest.mark.anyio
@pytest.mark.timeout(480)
async def test_three_minutes_under_the_nemesis_lose_nothing(tmp_path: Path) -> None:
    cfg = CheckConfig(
        out=tmp_path,
        nodes=5,
        duration=180,
        seed=7,
        gap=(14, 22),
        flat_fanout=RELAY_FANOUT,
        drain=90,
        kinds=tuple(k for k in FAULT_KINDS if k not in KNOWN_GAPS),
    )
    outcome = await run_check(cfg)
    print(render(outcome))
    r = outcome.result
    assert outcome.ok, render(outcome)
    assert {f["kind"] for f in r["faults"]} == set(FAULT_KINDS) - set(KNOWN_GAPS)
    assert len(r["destroyed"]) == 1
    # Relays are asked for (flat_fanout 3) but not promised: on some 5-node clusters
    # every JOIN reaches the author whatever the topic (5 names tried, all flat), so
    # the tree is recorded, not asserted (docs/faults.md "The checker").
    assert r["tree_at_start"], "the tree at the start is recorded"
    acked = sum(lvl["calls"].get("acknowledged", 0) for lvl in r["report"]["levels"].values())
    assert acked > 300
    assert (tmp_path / "resources.png").stat().st_size > 10_000
    assert json.loads((tmp_path / "result.json").read_text())["ok"] is True


@pytest.mark.timeout(300)
def test_a_planted_loss_of_one_acknowledged_event_is_reported_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["check", "--out", str(tmp_path), "--nodes", "4", "--duration", "60"]
    args += ["--gap", "10-18", "--drain", "40", "--relays", "never", "--plant-loss", "15"]
    # Faults this code survives, so that the planted loss is the only one to find (a
    # publisher's crash can lose events it acknowledged: docs/faults.md "The checker").
    args += ["--faults", "partition,slow_link"]
    monkeypatch.delenv("PULSARCAST_ALLOW_MISBEHAVE", raising=False)
    assert main(args) == 2  # test only: refused without the variable
    assert "refused unless PULSARCAST_ALLOW_MISBEHAVE=1" in capsys.readouterr().err
    monkeypatch.setenv("PULSARCAST_ALLOW_MISBEHAVE", "1")
    assert main(args) == 1
    out = capsys.readouterr().out
    r = json.loads((tmp_path / "result.json").read_text())
    lost = [ev for lvl in r["report"]["levels"].values() for ev in lvl["lost_events"]]
    assert len(lost) == 1, out
    assert lost[0]["missing_at"] == [3]
    dropped = re.findall(r"dropping delivery (\S+) on purpose", " ".join(r["notes"]))
    assert dropped == [lost[0]["cid"]], r["notes"]
    assert r["report"]["violations"] == 1 and not r["problems"], out
    assert "LOST" in out and "verdict: VIOLATIONS" in out
    assert r["faults"] and {i for f in r["faults"] for i in f["nodes"]} <= {0, 1, 2}  # 3 spared
