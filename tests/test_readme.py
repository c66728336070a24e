"""README.md's commands run as written (a doc test), so that the README cannot drift.

Every fenced ``sh`` and ``python`` block of README.md runs, in the order of the
document, in one ``bash`` session started at the repository's root (so ``$T`` made by
one block is there for the next); ``python`` blocks run through ``python -``. A block
that cannot run here says so in an HTML comment right above it,
``<!-- doc-test: skip: REASON -->``; ``<!-- doc-test: then wait for the sidecar's API
-->`` makes the session wait, after that block, until the sidecar it started answers
(what a reader does by reading the next paragraph).

The one difference from a reader's machine: the environment says where things are.
A one-node Kubo cluster stands for "the ipfs daemon" (``PULSARCAST_KUBO_API`` for the
sidecar, ``IPFS_PATH`` and ``PATH`` for ``ipfs``), and the sidecar's API, state and
the ``cluster`` command's state get free or temporary places (``PULSARCAST_API``,
``PULSARCAST_STATE_DIR``, ``XDG_RUNTIME_DIR``), so that the test disturbs nothing on
the machine. The README's text is not changed.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest

from pulsarcast_ipfs.cluster import ClusterConfig, LocalCluster
from pulsarcast_ipfs.cluster._ports import free_port
from pulsarcast_ipfs.cluster._process import child_env
from pulsarcast_ipfs.tools import ipfs_binary

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
MARKER = re.compile(r"<!--\s*doc-test:\s*(.*?)\s*-->")
FENCE = re.compile(r"^```(\w*)\s*$")
WAIT = "then wait for the sidecar's API"
DEADLINE = 90.0


@dataclass(frozen=True, slots=True)
class Block:
    line: int
    lang: str
    code: str
    marker: str | None


def blocks(text: str) -> list[Block]:
    """The fenced blocks of a Markdown text, each with the doc-test marker above it."""
    out: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        start, lang = i, m.group(1)
        i += 1
        body = []
        while not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        i += 1
        above = next((ln for ln in reversed(lines[:start]) if ln.strip()), "")
        found = MARKER.search(above)
        out.append(Block(start + 1, lang, "\n".join(body) + "\n", found and found.group(1)))
    return out


def script(bs: list[Block]) -> str:
    """One bash session running the blocks (the skipped ones left out)."""
    parts = [
        "set -euo pipefail",
        # background jobs (the sidecar, followers) end with the session
        "trap 'kill $(jobs -p) 2>/dev/null || true; wait' EXIT",
        f"cd {ROOT}",
    ]
    for b in bs:
        if b.marker is not None and b.marker.startswith("skip:"):
            continue
        parts.append(f"echo '--- README.md line {b.line}' >&2")
        if b.lang == "python":
            parts.append(f"python - <<'PYTHON_BLOCK'\n{b.code}PYTHON_BLOCK")
        else:
            parts.append(b.code)
        if b.marker == WAIT:
            parts.append(
                "for _ in $(seq 300); do pulsarcast status >/dev/null 2>&1 && break; "
                "sleep 0.1; done; pulsarcast status >/dev/null"
            )
    return "\n".join(parts) + "\n"


def test_every_block_runs_or_says_why_not() -> None:
    bs = blocks(README.read_text(encoding="utf-8"))
    for b in bs:
        if b.marker is not None:
            assert b.marker == WAIT or re.fullmatch(r"skip: \S.*", b.marker), (b.line, b.marker)
        else:
            assert b.lang in ("sh", "python"), f"README.md line {b.line}: ```{b.lang}"
    run = [b for b in bs if not (b.marker or "").startswith("skip:")]
    assert len(run) >= 6 and any(b.lang == "python" for b in run)
    for b in run:
        if b.lang == "python":
            compile(b.code, f"README.md line {b.line}", "exec")  # no await outside a function


def run_script(text: str, env: dict[str, str]) -> tuple[int, str, str]:
    """Run the session; its exit code, stdout and stderr. Whatever it started is
    stopped, even when it fails or runs over :data:`DEADLINE`."""
    proc = subprocess.Popen(
        ["bash", "-c", text],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=DEADLINE)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        cli = shutil.which("pulsarcast", path=str(Path(sys.executable).parent))
        if cli is not None:  # a failed run may have left the README's cluster up
            subprocess.run([cli, "cluster", "down"], env=env, capture_output=True, check=False)
    return proc.returncode, out.decode(), err.decode()


@pytest.fixture
async def kubo(anyio_backend: str, tmp_path: Path) -> AsyncIterator[LocalCluster]:
    async with LocalCluster(config=ClusterConfig(nodes=1, base_dir=tmp_path / "kubo")) as c:
        yield c


@pytest.mark.kubo
@pytest.mark.anyio
async def test_the_readme_runs_as_written(kubo: LocalCluster, tmp_path: Path) -> None:
    node = kubo[0]
    env = child_env(node.repo)
    env.pop("PULSARCAST_API_TOKEN", None)
    env.update(
        PATH=f"{ipfs_binary().parent}{os.pathsep}{env['PATH']}",
        PULSARCAST_KUBO_API=node.api_url,
        PULSARCAST_API=f"http://127.0.0.1:{free_port()}",
        PULSARCAST_STATE_DIR=str(tmp_path / "sidecar"),
        XDG_RUNTIME_DIR=str(tmp_path / "run"),
        PYTHONUNBUFFERED="1",
    )
    (tmp_path / "run").mkdir()
    if "VIRTUAL_ENV" in env:
        env.pop("VIRTUAL_ENV")
    text = script(blocks(README.read_text(encoding="utf-8")))
    code, out, err = await anyio.to_thread.run_sync(run_script, text, env)
    assert code == 0, f"stdout:\n{out}\nstderr:\n{err}"
    assert "Traceback" not in err and "Error:" not in err, err
    lines = out.splitlines()
    payloads = [ln.split("\t")[-1] for ln in lines if ln.startswith("bafy") and "\t" in ln]
    assert {"hello", "hi there"} <= set(payloads), out  # history's, as they are
    assert any(re.fullmatch(r"published bafy\w+", ln) for ln in lines), out  # the SDK block
    assert any(re.fullmatch(r"\d+ hello", ln) for ln in lines), out
