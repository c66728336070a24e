"""Kubo's CPU per stored event block — not a test.

Starts one offline Kubo daemon per configuration (a fresh repository, ``ipfs init
--profile=test[,pebbleds] --empty-repo``), writes ``--blocks`` dag-cbor blocks of
about 700 bytes through :class:`pulsarcast_ipfs.kubo.KuboClient` in batches of
``--batch`` (``block/put``; the ``import`` mode: one ``dag/import`` of a CAR per
batch, as the sidecar's block store does since session 19; then, for the ``pin``
mode, a direct ``pin/add`` of the batch, as the sidecar's block store did for the
events it keeps until session 13;
for the ``index`` mode, as it does now, the batch linked from the retention index
(``sidecar._retainindex``), whose changed blocks are put and whose root replaces the
pinned one with ``pin/update`` every ``--index-every`` batches) and prints the
daemon's CPU time (user + system, from ``/proc``) and this process's per block.

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

from pulsarcast_ipfs.core._dagcbor import encode, sha256_cid
from pulsarcast_ipfs.kubo import KuboClient, KuboConfig
from sidecar._retainindex import EMPTY_ROOT, INDEX_PIN_NAME, RetainIndex

MODES = ("put", "import", "pin", "index")


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


async def _write(api: int, data: list[bytes], batch: int, mode: str, index_every: int) -> None:
    index = RetainIndex()
    empty = sha256_cid(EMPTY_ROOT)
    async with KuboClient(config=KuboConfig(base_url=f"http://127.0.0.1:{api}")) as kubo:
        if mode == "index":  # as the block store starts: the empty index, pinned
            await kubo.block_put_many([EMPTY_ROOT])
            await kubo.pin_add_many([empty], recursive=True, name=INDEX_PIN_NAME)
        calls = 0
        for i in range(0, len(data), batch):
            if mode == "import":  # the block store's puts since session 19
                chunk = data[i : i + batch]
                cids = await kubo.block_import_many(chunk, cids=[sha256_cid(d) for d in chunk])
            else:
                cids = await kubo.block_put_many(data[i : i + batch])
            calls += 1
            if mode == "pin":
                await kubo.pin_add_many(cids, recursive=False, fast_provide_root=False)
            elif mode == "index":
                for cid in cids:
                    index.add(cid)
                if calls % index_every == 0 or i + batch >= len(data):
                    build = index.build()
                    await kubo.block_put_many(
                        [d for _, d in build.blocks], cids=[c for c, _ in build.blocks]
                    )
                    await kubo.pin_update(index.root or empty, build.root)
                    index.commit(build)


def measure(
    ipfs: str, profile: str, mode: str, blocks: int, batch: int, index_every: int = 10
) -> dict[str, float]:
    repo = Path(tempfile.mkdtemp(prefix="kubo-store-"))
    try:
        daemon, api = _start(ipfs, profile, repo)
        try:
            data = [
                encode({"payload": os.urandom(300).hex(), "i": i, "topic": "bench"})
                for i in range(blocks)
            ]
            cpu0, t0, own0 = _cpu_seconds(daemon.pid), time.perf_counter(), time.process_time()
            asyncio.run(_write(api, data, batch, mode, index_every))
            cpu1, t1, own1 = _cpu_seconds(daemon.pid), time.perf_counter(), time.process_time()
        finally:
            daemon.terminate()
            daemon.wait()
    finally:
        shutil.rmtree(repo, ignore_errors=True)
    return {
        "kubo_cpu_us": 1e6 * (cpu1 - cpu0) / blocks,
        "client_cpu_us": 1e6 * (own1 - own0) / blocks,
        "wall_us": 1e6 * (t1 - t0) / blocks,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=10, help="blocks per call (10)")
    ap.add_argument(
        "--index-every",
        type=int,
        default=10,
        help="index mode: batches per index update (10: with 10 blocks a batch, about "
        "the store's 5 s at 20 events/s)",
    )
    ap.add_argument("--profiles", default="test,test+pebbleds", help="comma-separated; + for ,")
    ap.add_argument("--modes", default=",".join(MODES), help=f"comma-separated of {MODES}")
    a = ap.parse_args()
    ipfs = os.environ.get("PULSARCAST_IPFS_BIN") or shutil.which("ipfs") or "ipfs"
    print(
        f"{'datastore':16} {'mode':6} {'Kubo CPU µs/block':>18} {'client CPU µs/block':>20} "
        f"{'wall µs/block':>14}"
    )
    for profile in a.profiles.replace("+", ";").split(","):
        profile = profile.replace(";", ",")
        for mode in a.modes.split(","):
            r = measure(ipfs, profile, mode, a.blocks, a.batch, a.index_every)
            print(
                f"{profile:16} {mode:6} {r['kubo_cpu_us']:18,.0f} {r['client_cpu_us']:20,.0f} "
                f"{r['wall_us']:14,.0f}"
            )


if __name__ == "__main__":
    main()
