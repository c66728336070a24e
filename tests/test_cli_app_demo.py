"""``pulsarcast demo`` (``make demo``) end to end: a real local cluster of Kubo daemons
and sidecars, run as a user runs it (a subprocess), its output and its records."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import psutil
import pytest

from pulsarcast_ipfs.records import validate_record

NODES = 5
PULSARCAST = str(Path(sys.executable).parent / "pulsarcast")  # the installed command


@pytest.mark.cluster
@pytest.mark.slow
def test_the_demo_runs_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "records"
    proc = subprocess.run(
        [PULSARCAST, "demo", "-n", str(NODES), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text
    for stage in (
        f"{NODES} nodes up",
        "node0 creates two topics",
        "every subscriber has a parent in its tree",
        "node2 → alerts: requested",
        f"node{NODES - 2} → alerts: Error: not allowed",
        "expected deliveries arrived",
        "deliveries per node",
        "dissemination trees",
        "cluster torn down",
        "✓ demo finished",
    ):
        assert stage in text, f"missing {stage!r} in:\n{text}"
    # news: node0 + NODES-1 subscribers x 3 events; alerts: node0 + NODES-2 subscribers x 1.
    expected = NODES * 3 + (NODES - 1)
    assert f"all {expected} expected deliveries arrived" in text
    history = text.split("history of news", 1)[1].split("▶", 1)[0]
    assert [m for m in re.findall(r"'([^']+)'", history)] == [
        "last word",
        "node2 says hi",
        "hello from node0",
    ]

    # The metric records were kept, one directory per node, all valid.
    files = sorted(out.glob("node*/*.jsonl"))
    assert [f.parent.name for f in files] == [f"node{i}" for i in range(NODES)]
    kinds: Counter[str] = Counter()
    runs = set()
    for f in files:
        for line in f.read_text().splitlines():
            record = json.loads(line)
            kinds[validate_record(record).value] += 1
            runs.add(record["run"])
    assert kinds["event_delivered"] == expected
    assert kinds["event_injected"] == 4  # three on news, the request on alerts
    assert kinds["event_published"] >= 4
    assert f"{sum(kinds.values())} metric records" in text

    # Nothing of the run is left running.
    (run,) = runs
    assert f"run {run}" in text
    leftovers = []
    for p in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(p.info["cmdline"] or [])
        if run in cmdline:
            leftovers.append(cmdline)
    assert leftovers == []


def test_the_demo_refuses_bad_arguments(tmp_path: Path) -> None:
    (tmp_path / "x").write_text("taken")
    for argv in (["-n", "2"], ["--out", str(tmp_path)]):
        proc = subprocess.run(
            [PULSARCAST, "demo", *argv],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert proc.returncode == 2
        assert "Error:" in proc.stdout + proc.stderr
