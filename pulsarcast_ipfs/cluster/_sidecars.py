"""A local cluster of Kubo daemons, each with a ``pulsarcast-sidecar`` beside it.

Sidecars are subprocesses (``python -m sidecar``), so that tests and the demo can
stop, kill and restart them one by one::

    async with LocalSidecarCluster(nodes=8, routing_k=1) as sc:
        async with sc.client(0) as api:                 # httpx.AsyncClient on node 0's API
            topic = (await api.post("/v1/topics", json={"name": "news"})).json()
        await sc.kill_sidecar(3)                          # SIGKILL (no graceful shutdown)
        await sc.start_sidecar(3)                         # same state dir, same API port
        await sc.stop_kubo(5)                             # kill node 5's Kubo (and sidecar)

Faults (``toxiproxy=True`` for the network ones): ``kill_node(i)`` SIGKILLs Kubo and
sidecar, ``start_node(i)`` brings both back with the same state; ``kill_kubo(i)`` /
``restart_kubo(i)`` crash and restart only the Kubo daemon under a running sidecar
(same API port); ``partition([...])`` isolates nodes, ``heal([...])`` reconnects them.

Relays that lie (test only): ``misbehave={i: "silent"}`` starts node ``i``'s sidecar
with ``--misbehave silent`` (``blackhole``, ``censor=PEER``, ``delay=SECONDS``;
:mod:`pulsarcast_ipfs.testing._misbehave`) and ``PULSARCAST_ALLOW_MISBEHAVE=1``;
``sc.misbehave[i]`` can be set or removed between a stop and a start.

``sidecars=`` chooses which nodes get a sidecar (default: all); the others are bare
Kubo nodes (``sc.cluster[i]`` is the :class:`ClusterNode`). Everything is torn down
on exit (processes killed, directories removed).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx

from pulsarcast_ipfs._lifecycle import AsyncService
from pulsarcast_ipfs.cluster._config import ClusterConfig
from pulsarcast_ipfs.cluster._errors import ClusterError
from pulsarcast_ipfs.cluster._node import ClusterNode
from pulsarcast_ipfs.cluster._ports import free_port
from pulsarcast_ipfs.cluster._process import (
    CHILDREN,
    alive,
    child_env,
    kill_group,
    log_tail,
    ours,
    spawn,
)
from pulsarcast_ipfs.cluster._supervisor import LocalCluster
from pulsarcast_ipfs.testing._misbehave import ALLOW_ENV, parse_misbehaviour

__all__ = ["START_CONCURRENCY", "LocalSidecarCluster", "SidecarProcess"]

START_CONCURRENCY = 16
"""Sidecars started at once, each until its ``/health`` answers. All 100 of a
100-node cluster at once on 2 cores: 64 had not even logged a line after
``start_timeout`` (60 s), their imports starved by each other and by 100 Kubo
daemons (docs/benchmark-history.md, session 12)."""


@dataclass(slots=True, kw_only=True)
class SidecarProcess:
    """One sidecar subprocess (its state dir and ports survive restarts)."""

    index: int
    kubo: ClusterNode
    state_dir: Path
    api_port: int
    p2p_port: int
    log_path: Path
    pid: int = 0

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    @property
    def metrics_dir(self) -> Path:
        return self.state_dir / "metrics"

    def is_running(self) -> bool:
        return self.pid > 0 and alive(self.pid)

    def log_tail(self, lines: int = 30) -> str:
        return log_tail(self.log_path, lines)

    def returncode(self) -> int | None:
        """The exit code once the process has exited (None while running or unknown)."""
        child = CHILDREN.get(self.pid)
        return None if child is None else child.poll()


class LocalSidecarCluster(AsyncService):
    """``nodes`` Kubo daemons (a :class:`LocalCluster`) with one sidecar each."""

    def __init__(
        self,
        *,
        nodes: int = 8,
        sidecars: Sequence[int] | None = None,
        routing_k: int | None = None,
        run: str = "local",
        extra_args: Sequence[str] = (),
        start_timeout: float = 60.0,
        toxiproxy: bool = False,
        misbehave: Mapping[int, str] | None = None,
    ) -> None:
        for spec in (misbehave or {}).values():
            parse_misbehaviour(spec)  # a bad spec now, not as a sidecar's start-up error
        self.misbehave: dict[int, str] = dict(misbehave or {})
        """Node -> ``--misbehave`` spec of its sidecar (test only), read at each start."""
        self.base_dir = Path(tempfile.mkdtemp(prefix="pulsarcast-sidecars-"))
        self.cluster = LocalCluster(
            config=ClusterConfig(nodes=nodes, base_dir=self.base_dir / "kubo", toxiproxy=toxiproxy)
        )
        self.with_sidecar = list(range(nodes)) if sidecars is None else list(sidecars)
        self.routing_k = routing_k
        self.run = run
        self.extra_args = list(extra_args)
        self.start_timeout = start_timeout
        self.sidecars: dict[int, SidecarProcess] = {}

    def __len__(self) -> int:
        return len(self.cluster)

    def __getitem__(self, index: int) -> SidecarProcess:
        return self.sidecars[index]

    async def start(self) -> None:
        """Start the Kubo cluster, then every sidecar, and wait for their ``/health``."""
        try:
            await self.cluster.start()
            for i in self.with_sidecar:
                node = self.cluster[i]
                self.sidecars[i] = SidecarProcess(
                    index=i,
                    kubo=node,
                    state_dir=self.base_dir / f"sidecar{i}",
                    api_port=free_port(),
                    p2p_port=free_port(),
                    log_path=self.base_dir / f"sidecar{i}.log",
                )
            limiter = anyio.CapacityLimiter(START_CONCURRENCY)

            async def start_one(i: int) -> None:
                async with limiter:
                    await self.start_sidecar(i)

            async with anyio.create_task_group() as tg:
                for i in self.sidecars:
                    tg.start_soon(start_one, i)
            self.write_manifest()
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self.stop()
            raise

    def write_manifest(self) -> Path:
        """``sidecars.json`` in :attr:`base_dir`: every sidecar's name, peer and API
        (what ``pulsarcast collect --cluster DIR`` reads)."""
        path = self.base_dir / "sidecars.json"
        doc = {
            "run": self.run,
            "sidecars": [
                {"name": f"sidecar{i}", "peer_id": sc.kubo.peer_id, "api": sc.api_url}
                for i, sc in sorted(self.sidecars.items())
            ],
        }
        path.write_text(json.dumps(doc, indent=2))
        return path

    def _command(self, sc: SidecarProcess) -> list[str]:
        cmd = [
            sys.executable,
            "-m",
            "sidecar",
            "--kubo-api",
            sc.kubo.api_url,
            "--api",
            f"127.0.0.1:{sc.api_port}",
            "--state-dir",
            str(sc.state_dir),
            "--p2p-port",
            str(sc.p2p_port),
            "--run",
            self.run,
            "--kubo-pid",
            str(sc.kubo.pid),
            "--routing-interval",
            "1",
        ]
        if self.routing_k is not None:
            cmd += ["--routing-k", str(self.routing_k)]
        if sc.index in self.misbehave:
            cmd += ["--misbehave", self.misbehave[sc.index]]
        return cmd + self.extra_args

    async def start_sidecar(self, index: int) -> None:
        """(Re)start sidecar ``index`` and wait until its API answers ``/health``."""
        sc = self.sidecars[index]
        if sc.is_running():
            return
        sc.state_dir.mkdir(parents=True, exist_ok=True)
        env = child_env()
        env.pop("PULSARCAST_API_TOKEN", None)
        env.pop(ALLOW_ENV, None)
        env.pop("PULSARCAST_MISBEHAVE", None)
        if index in self.misbehave:
            env[ALLOW_ENV] = "1"
        sc.pid = spawn(self._command(sc), env=env, log=sc.log_path, detached=False)
        with anyio.move_on_after(self.start_timeout) as scope:
            async with httpx.AsyncClient(base_url=sc.api_url, trust_env=False) as http:
                while True:
                    if not sc.is_running():
                        raise ClusterError(
                            f"sidecar{index} exited during start-up:\n{sc.log_tail()}"
                        )
                    with contextlib.suppress(httpx.HTTPError, ValueError):
                        if (await http.get("/health", timeout=2)).status_code == 200:
                            # the sidecar of this node, not another on the same port
                            r = await http.get("/v1/status", timeout=5)
                            if r.status_code == 401:
                                return  # a token-protected API: nothing else answers with it
                            status = r.json()
                            if status.get("peer_id") == sc.kubo.peer_id:
                                return
                            raise ClusterError(
                                f"sidecar{index}: port {sc.api_port} answers for "
                                f"{status.get('peer_id')}, not {sc.kubo.peer_id}"
                            )
                    await anyio.sleep(0.1)
        if scope.cancelled_caught:
            raise ClusterError(f"sidecar{index} not healthy in time:\n{sc.log_tail()}")

    async def stop_sidecar(self, index: int) -> None:
        """Stop sidecar ``index`` gracefully (SIGTERM; SIGKILL after 10 s)."""
        sc = self.sidecars[index]
        if sc.pid:
            await anyio.to_thread.run_sync(lambda: kill_group(sc.pid, str(sc.state_dir), 10.0))
            sc.pid = 0

    async def kill_sidecar(self, index: int) -> None:
        """SIGKILL sidecar ``index`` (no graceful shutdown: a crash)."""
        sc = self.sidecars[index]
        if sc.pid and ours(sc.pid, str(sc.state_dir)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(sc.pid, signal.SIGKILL)
            await anyio.to_thread.run_sync(lambda: kill_group(sc.pid, str(sc.state_dir), 1.0))
        sc.pid = 0

    async def stop_kubo(self, index: int) -> None:
        """Kill Kubo daemon ``index`` (its sidecar first, if any)."""
        if index in self.sidecars:
            await self.kill_sidecar(index)
        node = self.cluster[index]
        if node.pid:
            await anyio.to_thread.run_sync(lambda: kill_group(node.pid, str(node.repo), 5.0))
            node.pid = 0

    async def kill_kubo(self, index: int) -> None:
        """SIGKILL Kubo daemon ``index`` only; its sidecar keeps running."""
        await self.cluster.kill(index)

    async def restart_kubo(self, index: int) -> None:
        """Start Kubo daemon ``index`` again (same repo and API port) and reconnect it."""
        await self.cluster.restart(index)

    async def kill_node(self, index: int) -> None:
        """SIGKILL node ``index``: its sidecar and its Kubo daemon (a machine crash)."""
        if index in self.sidecars:
            await self.kill_sidecar(index)
        await self.cluster.kill(index)

    async def start_node(self, index: int) -> None:
        """Bring a killed node back: Kubo (same repo, ports, peers dialled), then its
        sidecar (same state dir)."""
        await self.cluster.restart(index)
        if index in self.sidecars:
            await self.start_sidecar(index)

    async def partition(self, indices: Sequence[int]) -> None:
        """Cut nodes ``indices`` off the network (their Toxiproxy proxies disabled,
        connections dropped, loopback dials filtered; needs ``toxiproxy=True``)."""
        async with anyio.create_task_group() as tg:
            for i in indices:
                tg.start_soon(self.cluster[i].cut)

    async def heal(self, indices: Sequence[int]) -> None:
        """Undo :meth:`partition` and dial live peers again from each healed node."""
        for i in indices:
            await self.cluster[i].restore()
        for i in indices:
            await self.cluster.reconnect(i)

    def client(self, index: int, **kwargs: object) -> httpx.AsyncClient:
        """An ``httpx.AsyncClient`` on sidecar ``index``'s API (use with ``async with``)."""
        kwargs.setdefault("timeout", 30)
        return httpx.AsyncClient(
            base_url=self.sidecars[index].api_url,
            trust_env=False,
            **kwargs,  # type: ignore[arg-type]
        )

    async def stop(self) -> None:
        """Kill every sidecar and Kubo daemon and remove the directories."""
        for i in list(self.sidecars):
            with contextlib.suppress(Exception):
                await self.stop_sidecar(i)
        await self.cluster.stop()
        shutil.rmtree(self.base_dir, ignore_errors=True)
