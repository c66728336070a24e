"""Same seed, same records, byte for byte: also across processes. Python salts the
hashes of ``str`` and ``bytes`` per process (``PYTHONHASHSEED``), so iterating a set
of peer IDs or CIDs gives another order in another process; the core must never let
such an order reach its outputs (it did: the window owed to new children, the
LEAVEs of a node leaving, the followers of a meta topic)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
MAIN = "import sys; from pulsarcast_ipfs.cli import main; sys.exit(main(sys.argv[1:]))"


def _records_digest(tmp: Path, hash_seed: int) -> str:
    out = tmp / f"h{hash_seed}"
    env = {**os.environ, "PYTHONHASHSEED": str(hash_seed), "PYTHONPATH": str(ROOT)}
    args = ["--nodes", "40", "--events", "100", "--seed", "4", "--loss", "5%"]
    args += ["--crash", "10%@20s", "--restart", "10s", "--grace", "30s", "--no-progress"]
    args += ["--run", "hashseed", "--out", str(out)]
    subprocess.run(
        [sys.executable, "-c", MAIN, "sim", *args],
        env=env,
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    return hashlib.sha256((out / "records.jsonl").read_bytes()).hexdigest()


def test_the_same_records_whatever_the_hash_seed(tmp_path: Path) -> None:
    assert _records_digest(tmp_path, 1) == _records_digest(tmp_path, 2)
