"""Kubo's CPU per stored event block (issue 13) — not a test.

Starts one offline Kubo daemon per configuration (a fresh repository, ``ipfs init
--profile=test[,pebbleds] --empty-repo``), writes ``--blocks`` dag-cbor blocks of
about 700 bytes through :class:`pulsarcast_ipfs.kubo.KuboClient` in batches of
``--batch`` (``block/put``, then, for the ``pin`` mode, a direct ``pin/add`` of the
batch, as the sidecar's block store does for the events it keeps) and prints the
daemon's CPU time (user + system, from ``/proc``) per block.

    PYTHONPATH=. .venv/bin/python benchmarks/kubo_store.py
    PYTHONPATH=. .venv/bin/python benchmarks/kubo_store.py --blocks 5000 --batch 50

Needs ``PULSARCAST_IPFS_BIN`` (or ``ipfs`` on the PATH) and Linux's ``/proc``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from pulsarcast_ipfs.core._dagcbor import encode
from pulsarcast_ipfs.kubo import KuboClient, KuboConfig


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(ipfs: str, profile: str, repo: Path) -> tuple[subprocess.Popen[bytes], int]:
    """A fresh repository in ``repo`` and its daemon, ready (offline)."""
    env = dict(os.environ, IPFS_PATH=str(repo))
    subprocess.run(
        [ipfs, "init", f"--profile={profile}", "--empty-repo"],
        env=env,
        check=True,
        capture_output=True,
    )
    api = _free_port()
    for key, value in (
        ("Addresses.API", f'"/ip4/127.0.0.1/tcp/{api}"'),
        ("Addresses.Gateway", '""'),
    ):
        subprocess.run([ipfs, "config", "--json", key, value], env=env, check=True)
    daemon = subprocess.Popen(
        [ipfs, "daemon", "--offline"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    assert daemon.stdout is not None
    for line in daemon.stdout:
        if b"Daemon is ready" in line:
            break
    return daemon, api


async def _write(api: int, data: list[bytes], batch: int, pin: bool) -> None:
    async with KuboClient(config=KuboConfig(base_url=f"http://127.0.0.1:{api}")) as kubo:
        for i in range(0, len(data), batch):
            cids = await kubo.block_put_many(data[i : i + batch])
            if pin:
                await kubo.pin_add_many(cids, recursive=False, fast_provide_root=False)


def measure(ipfs: str, profile: str, pin: bool, blocks: int, batch: int) -> dict[str, float]:
    repo = Path(tempfile.mkdtemp(prefix="kubo-store-"))
    try:
        daemon, api = _start(ipfs, profile, repo)
        try:
            data = [
                encode({"payload": os.urandom(300).hex(), "i": i, "topic": "bench"})
                for i in range(blocks)
            ]
            cpu0, t0 = _cpu_seconds(daemon.pid), time.perf_counter()
            asyncio.run(_write(api, data, batch, pin))
            cpu1, t1 = _cpu_seconds(daemon.pid), time.perf_counter()
        finally:
            daemon.terminate()
            daemon.wait()
    finally:
        shutil.rmtree(repo, ignore_errors=True)
    return {"kubo_cpu_us": 1e6 * (cpu1 - cpu0) / blocks, "wall_us": 1e6 * (t1 - t0) / blocks}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=10, help="blocks per call (10)")
    a = ap.parse_args()
    ipfs = os.environ.get("PULSARCAST_IPFS_BIN") or shutil.which("ipfs") or "ipfs"
    print(f"{'datastore':16} {'mode':5} {'Kubo CPU µs/block':>18} {'wall µs/block':>14}")
    for profile in ("test", "test,pebbleds"):
        for pin in (False, True):
            r = measure(ipfs, profile, pin, a.blocks, a.batch)
            mode = "pin" if pin else "put"
            print(f"{profile:16} {mode:5} {r['kubo_cpu_us']:18,.0f} {r['wall_us']:14,.0f}")


if __name__ == "__main__":
    main()
