"""The client's CPU per Kubo RPC call: httpx against the lean HTTP path — not a test.

Starts one offline Kubo daemon (a fresh ``--profile=test`` repository, as
``benchmarks/kubo_store.py`` does) and times, in this process, ``--calls`` calls of
each kind through :class:`pulsarcast_ipfs.kubo.KuboClient` forced onto httpx
(``transport=httpx.AsyncHTTPTransport()``) and through its lean path
(``kubo/_http.py``): ``block_put_many`` of ``--batch`` dag-cbor blocks of about
700 bytes (the CIDs given, as the sidecar's block store gives them) and
``version``. The two paths alternate ``--rounds`` times; printed: the median of
this process's CPU time (``time.process_time``) and wall time per call.

    PYTHONPATH=. .venv/bin/python benchmarks/kubo_http.py
    PYTHONPATH=. .venv/bin/python benchmarks/kubo_http.py --calls 2000 --rounds 5

Needs ``PULSARCAST_IPFS_BIN`` (or ``ipfs`` on the PATH).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
import time
from pathlib import Path

import httpx

from benchmarks.kubo_store import _start
from pulsarcast_ipfs.core._dagcbor import encode, sha256_cid
from pulsarcast_ipfs.kubo import KuboClient, KuboConfig
from pulsarcast_ipfs.stats import percentile

PATHS = ("httpx", "lean")
KINDS = ("block_put_many", "version")


def _client(api: int, path: str) -> KuboClient:
    config = KuboConfig(base_url=f"http://127.0.0.1:{api}")
    if path == "httpx":
        return KuboClient(config=config, transport=httpx.AsyncHTTPTransport())
    client = KuboClient(config=config)
    assert client._pool is not None, "not the lean path"
    return client


async def _time(api: int, path: str, kind: str, calls: int, batch: int) -> tuple[float, float]:
    """CPU and wall seconds of ``calls`` calls (after a few untimed ones)."""
    batches = []
    for _ in range(calls + 5):
        blocks = [
            encode({"payload": os.urandom(300).hex(), "topic": "bench"}) for _ in range(batch)
        ]
        batches.append((blocks, [sha256_cid(b) for b in blocks]))
    async with _client(api, path) as kubo:
        for i in range(calls + 5):
            if i == 5:
                cpu0, t0 = time.process_time(), time.perf_counter()
            if kind == "version":
                await kubo.version()
            else:
                blocks, cids = batches[i]
                await kubo.block_put_many(blocks, cids=cids)
        return time.process_time() - cpu0, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=500)
    ap.add_argument("--batch", type=int, default=10, help="blocks per block/put (10)")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    ipfs = os.environ.get("PULSARCAST_IPFS_BIN") or shutil.which("ipfs") or "ipfs"
    repo = Path(tempfile.mkdtemp(prefix="kubo-http-"))
    results: dict[tuple[str, str], list[tuple[float, float]]] = {}
    try:
        daemon, api = _start(ipfs, "test", repo)
        try:
            for r in range(a.rounds):
                for kind in KINDS:
                    for path in PATHS if r % 2 == 0 else PATHS[::-1]:
                        cpu, wall = asyncio.run(_time(api, path, kind, a.calls, a.batch))
                        results.setdefault((kind, path), []).append((cpu, wall))
        finally:
            daemon.terminate()
            daemon.wait()
    finally:
        shutil.rmtree(repo, ignore_errors=True)
    print(f"{a.calls} calls x {a.rounds} rounds; per call: median (min-max) of the rounds")
    print(f"{'call':16} {'path':6} {'CPU µs/call':>22} {'wall µs/call':>22}")
    for kind in KINDS:
        for path in PATHS:
            runs = results[(kind, path)]
            cells = []
            for values in ([c for c, _ in runs], [w for _, w in runs]):
                us = [v / a.calls * 1e6 for v in values]
                mid = percentile(us, 0.5)  # the project's nearest-rank median
                cells.append(f"{mid:,.0f} ({min(us):,.0f}-{max(us):,.0f})")
            print(f"{kind:16} {path:6} {cells[0]:>22} {cells[1]:>22}")


if __name__ == "__main__":
    main()
