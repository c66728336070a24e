"""Two small runs' summaries, pinned: speed work on the simulator must not change results.

The figures in ``data/sim_pinned_summaries.json`` were written by the two command lines
below. A change that alters any of them changes what the simulator computes: say why in
its commit and rewrite the file with the same commands (``config`` and ``wall_seconds``
left out).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pulsarcast_ipfs.cli import main

_PINNED = Path(__file__).parent / "data" / "sim_pinned_summaries.json"
_BASE = ["sim", "--nodes", "30", "--topics", "3", "--events", "40", "--seed", "7"]
_BASE += ["--grace", "20s", "--loss", "5%", "--no-progress"]
_RUNS = [[], ["--byzantine", "10%", "--attack", "silent"]]


@pytest.mark.parametrize("index", range(len(_RUNS)))
def test_summary_is_pinned(index: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert main([*_BASE, *_RUNS[index], "--out", str(out)]) == 0
    capsys.readouterr()
    summary = json.loads((out / "summary.json").read_text())
    summary.pop("config")
    summary.pop("wall_seconds")
    assert summary == json.loads(_PINNED.read_text())[index]
