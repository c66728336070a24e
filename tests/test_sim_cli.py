"""``pulsarcast sim``: help, option errors, a tiny end-to-end run with the real core."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pulsarcast_ipfs.cli import main
from pulsarcast_ipfs.records import validate_record


def test_help() -> None:
    exe = Path(sys.executable).parent / "pulsarcast"
    res = subprocess.run([str(exe), "sim", "--help"], capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    options = ("--nodes", "--topics", "--communities", "--events", "--seed", "--crash", "--out")
    for option in options:
        assert option in res.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--crash", "10%"], "invalid crash wave"),
        (["--crash", "lots@5s"], "neither a count nor a %"),
        (["--latency", "quick"], "invalid latency"),
        (["--loss", "120%"], "between 0% and 100%"),
        (["--restart", "soon"], "invalid duration"),
        (["--topics", "99"], "topics must be between 1 and 23"),
        (["--nodes", "0"], "--nodes must be at least 1"),
        (["--nodes", "150", "--communities", "2"], "2 communities of 100 users need at least 200"),
        (["--communities", "0"], "communities must be a positive integer"),
        (["--workload", "/nonexistent/w.jsonl"], "cannot read workload"),
        (["--filter", "ups >"], "--filter 'ups >': unexpected end of the filter at position 5"),
    ],
)
def test_bad_options_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    code = main(["sim", "--out", str(tmp_path / "o"), "--no-progress", *args])
    assert code == 2
    err = capsys.readouterr().err
    assert "pulsarcast sim: error:" in err and message in err
    assert not (tmp_path / "o").exists()


def test_tiny_run_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    code = main(
        [
            "sim",
            "--nodes", "12",
            "--topics", "3",
            "--events", "15",
            "--seed", "4",
            "--latency", "20ms..60ms",
            "--grace", "15s",
            "--rate", "5",
            "--filter", "ups >= 2",
            "--filter", "*",
            "--no-progress",
            "--out", str(out),
        ]
    )  # fmt: skip
    assert code == 0
    printed = capsys.readouterr().out
    assert "coverage vs published" in printed and "max fan-out vs log2(N)" in printed
    assert "filtered subscriptions / unwanted deliveries" in printed
    summary = json.loads((out / "summary.json").read_text())
    assert summary["events_injected"] == 15 and summary["config"]["nodes"] == 12
    assert summary["coverage_published"] == 1.0 and summary["duplicates"] == 0
    assert summary["config"]["filters"] == ["ups >= 2", "*"] and summary["unwanted"] == 0
    lines = (out / "records.jsonl").read_text().splitlines()
    assert lines
    for line in lines:
        rec = json.loads(line)
        validate_record(rec)
        assert rec["system"] == "sim" and rec["run"] == "sim-4"


@pytest.mark.slow
def test_communities_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    code = main(
        [
            "sim",
            "--nodes", "200",
            "--communities", "2",
            "--topics", "2",
            "--events", "40",
            "--grace", "15s",
            "--no-progress",
            "--out", str(out),
        ]
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["communities"] == 2
    assert summary["coverage_published"] == 1.0 and summary["duplicates"] == 0
    topics = {
        json.loads(line).get("topic")
        for line in (out / "records.jsonl").read_text().splitlines()
        if '"event_delivered"' in line
    }
    assert topics == {"reddit.com/0", "reddit.com/1", "politics/0", "politics/1"}


def test_rpc_records_are_opt_in(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Per-RPC records only with ``--rpc-records``; the summary's results do not change."""
    base = ["sim", "--nodes", "12", "--topics", "2", "--events", "10", "--grace", "10s"]
    summaries = {}
    kinds = {}
    for flag in ("", "--rpc-records", "--no-rpc-records"):
        out = tmp_path / (flag or "default")
        assert main([*base, *([flag] if flag else []), "--no-progress", "--out", str(out)]) == 0
        summary = json.loads((out / "summary.json").read_text())
        assert summary["config"].pop("rpc_records") == (flag == "--rpc-records")
        summary.pop("wall_seconds")
        summaries[flag] = summary
        kinds[flag] = {
            json.loads(line)["kind"] for line in (out / "records.jsonl").read_text().splitlines()
        }
    capsys.readouterr()
    assert "rpc_sent" in kinds["--rpc-records"] and "rpc_received" in kinds["--rpc-records"]
    assert not {"rpc_sent", "rpc_received"} & (kinds[""] | kinds["--no-rpc-records"])
    assert summaries[""] == summaries["--rpc-records"] == summaries["--no-rpc-records"]
