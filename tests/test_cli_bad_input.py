"""Bad input files given to the CLI ("the CLI and metric files"): one clear
line on stderr, a non-zero exit code, no traceback, no output directory left
behind. The sidecar's own configuration errors are in test_sidecar_units.py and
damaged metric files in test_spark_report.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXE = Path(sys.executable).parent / "pulsarcast"

BAD_WORKLOADS = {
    "truncated.jsonl": ('{"type":"topic"\n', "truncated.jsonl:1: not valid JSON"),
    "binary.jsonl": ("\x00\x01\x02garbage\n", "binary.jsonl:1: not valid JSON"),
    "foreign.jsonl": ('{"hello": "world"}\n', "foreign.jsonl:1"),
    "empty.jsonl": ("", "empty.jsonl"),
}


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(EXE), *args], capture_output=True, text=True, check=False, cwd=cwd, timeout=120
    )


@pytest.mark.parametrize("name", sorted(BAD_WORKLOADS))
@pytest.mark.parametrize("command", ["sim", "bench"])
def test_bad_workload_file(tmp_path: Path, command: str, name: str) -> None:
    content, message = BAD_WORKLOADS[name]
    (tmp_path / name).write_text(content)
    extra = ["--no-progress"] if command == "sim" else []
    res = _run(command, "--workload", name, "--nodes", "3", "--out", "out", *extra, cwd=tmp_path)
    assert res.returncode in (1, 2), res
    assert message in res.stderr, res.stderr
    assert "Traceback" not in res.stderr and "Traceback" not in res.stdout
    assert not (tmp_path / "out").exists()  # nothing half-written


def test_bench_refuses_to_mix_into_an_existing_run(tmp_path: Path) -> None:
    run = tmp_path / "out" / "pulsarcast-normal"
    run.mkdir(parents=True)
    (run / "node-0.jsonl").write_text("{}\n")
    res = _run("bench", "--nodes", "3", "--systems", "pulsarcast", "--out", "out", cwd=tmp_path)
    assert res.returncode == 1, res
    assert "already holds a run; choose another --out" in res.stderr
    assert "Traceback" not in res.stderr
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["pulsarcast-normal"]
    assert (run / "node-0.jsonl").read_text() == "{}\n"
