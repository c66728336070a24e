"""A local cluster of real Kubo daemons on loopback, optionally behind Toxiproxy.

Each node is a stock Kubo daemon with its own repo, configured as docs/protocol.md §2
asks for a private cluster on loopback: ``ipfs init --profile=test,pebbleds``, a DHT server
(``Routing.Type=dhtserver``) with ``Routing.LoopbackAddressesOnLanDHT=true``, no
bootstrap peers, ``Experimental.Libp2pStreamMounting=true``,
``Provide.DHT.SweepEnabled=false``, ``Provide.Strategy=pinned`` (a block is
announced when pinned with fast-provide-root, not once per ``block/put``: the sidecar
pins the blocks its node creates itself, docs/sidecar.md "Providing"),
``Provide.Enabled=true`` with ``Provide.DHT.Interval=0s`` (no periodic reprovide,
which would re-announce every subscriber's retained events), Kubo's
pubsub only when asked for (baselines).
API and swarm listen on free loopback ports below the ephemeral range; the gateway
is off.

With ``toxiproxy=True`` one ``toxiproxy-server`` runs for the cluster and every
node gets a proxy in front of its swarm port; the node announces the proxy's
address instead of its own, so connections *into* a node pass its proxy and the
toxics set on it (latency, bandwidth, cut). A connection that the node itself
opens to a peer passes that peer's proxy instead.

Life cycle: :meth:`LocalCluster.start` inits the repos, starts the daemons, waits
for their APIs, connects them (a few seeds plus a ring) and waits until every
node's LAN routing table has peers. :meth:`LocalCluster.stop` kills every
process it started (SIGTERM, then SIGKILL, whole process group) and removes the
cluster's directory; it runs from ``async with``, from ``atexit``, and daemons of
an in-process cluster also die with their parent (``PR_SET_PDEATHSIG``). A daemon
that exits or does not come up raises :class:`ClusterError` with the node's name
and the tail of its log.

The pieces live beside this module: ports (``_ports``), child processes
(``_process``), the Kubo repo and its configuration (``_kubo``), one node and its
toxics (``_node``), the Toxiproxy client (``_toxiproxy``), the state a detached
cluster leaves on disk (``_state``).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import tempfile
import time
import weakref
from collections.abc import Callable
from pathlib import Path

import anyio

from pulsarcast_ipfs._lifecycle import AsyncService
from pulsarcast_ipfs.cluster._config import ClusterConfig
from pulsarcast_ipfs.cluster._errors import ClusterError, single_error
from pulsarcast_ipfs.cluster._kubo import configure_repo, daemon_command, init_repo, kubo_settings
from pulsarcast_ipfs.cluster._node import ClusterNode
from pulsarcast_ipfs.cluster._ports import free_port
from pulsarcast_ipfs.cluster._process import alive, child_env, kill_group, log_tail, ours, spawn
from pulsarcast_ipfs.cluster._state import (
    OWNER_FILE,
    read_state,
    sweep_stale_dirs,
    write_state,
)
from pulsarcast_ipfs.cluster._toxiproxy import ToxiproxyAPI, ToxiproxyError
from pulsarcast_ipfs.kubo import KuboClient, KuboConfig, KuboError
from pulsarcast_ipfs.tools import ipfs_binary, toxiproxy_binary

__all__ = ["LocalCluster"]

_LIVE: weakref.WeakSet[LocalCluster] = weakref.WeakSet()


@atexit.register
def _cleanup_at_exit() -> None:
    for cluster in list(_LIVE):
        if not cluster.detached:
            cluster.stop_now()


class LocalCluster(AsyncService):
    """N local Kubo daemons; ``async with LocalCluster(config=ClusterConfig(nodes=4)) as c:``.

    ``detached=True`` (used by ``pulsarcast cluster up``) leaves the daemons running
    when this process exits; :meth:`save_state` / :meth:`load` let another process
    find and stop them.
    """

    def __init__(self, *, config: ClusterConfig | None = None, detached: bool = False) -> None:
        self.config = config or ClusterConfig()
        self.detached = detached
        self.nodes: list[ClusterNode] = []
        self.toxiproxy_pid = 0
        self.toxiproxy_url = ""
        self._owns_base = self.config.base_dir is None
        self.base_dir: Path = self.config.base_dir or Path(
            tempfile.mkdtemp(prefix="pulsarcast-cluster-")
        )
        self.startup_seconds = 0.0
        self._stopped = False

    # context management

    def __len__(self) -> int:
        return len(self.nodes)

    def __getitem__(self, index: int) -> ClusterNode:
        return self.nodes[index]

    # start

    async def start(self, progress: Callable[[str], None] | None = None) -> None:
        """Start every daemon and wait until the DHT is usable; clean up on any failure."""
        say = progress or (lambda _msg: None)
        began = time.monotonic()
        _LIVE.add(self)
        try:
            await self._start(say)
        except BaseException as exc:
            with anyio.CancelScope(shield=True):
                await self.stop()
            single = single_error(exc)
            if single is not None:
                raise single from exc
            raise
        self.startup_seconds = time.monotonic() - began

    async def _start(self, say: Callable[[str], None]) -> None:
        cfg = self.config
        ipfs = ipfs_binary()
        self.base_dir.mkdir(parents=True, exist_ok=True)
        if self._owns_base:
            sweep_stale_dirs(self.base_dir.parent)
            (self.base_dir / OWNER_FILE).write_text(str(os.getpid()))
        self.nodes = [
            ClusterNode(index=i, repo=self.base_dir / f"node{i}") for i in range(cfg.nodes)
        ]
        proxy_api: ToxiproxyAPI | None = None
        if cfg.toxiproxy:
            say("starting toxiproxy")
            proxy_api = await self._start_toxiproxy()

        say(f"initialising {cfg.nodes} repos")
        limiter = anyio.CapacityLimiter(4)

        async def init(node: ClusterNode) -> None:
            async with limiter:
                await init_repo(ipfs, node.repo, name=node.name)
            announce: list[str] = []
            if proxy_api is not None:
                node.proxy_name = node.name
                node._toxiproxy = proxy_api
                listen = await proxy_api.create_proxy(
                    node.name, listen="127.0.0.1:0", upstream="127.0.0.1:9"
                )
                host, _, port = listen.rpartition(":")
                node.announce_address = f"/ip4/{host}/tcp/{port}"
                announce = [node.announce_address]
            settings = kubo_settings(
                stream_mounting=cfg.stream_mounting,
                pubsub_router=cfg.pubsub_router,
                announce=announce,
            )
            # Ports below the kernel's ephemeral range (not ``tcp/0``): a restarted
            # daemon binds the same ones again, and an ephemeral port may meanwhile
            # be held by any outgoing connection ("address already in use" in CI).
            settings["Addresses.API"] = f"/ip4/127.0.0.1/tcp/{free_port()}"
            settings["Addresses.Swarm"] = [f"/ip4/127.0.0.1/tcp/{free_port()}"]
            configure_repo(node.repo, settings)

        async with anyio.create_task_group() as tg:
            for node in self.nodes:
                tg.start_soon(init, node)

        say(f"starting {cfg.nodes} Kubo daemons")
        for node in self.nodes:
            node.pid = spawn(
                daemon_command(ipfs),
                env=child_env(node.repo),
                log=node.log_path,
                detached=self.detached,
            )
        async with anyio.create_task_group() as tg:
            for node in self.nodes:
                tg.start_soon(self._wait_ready, node, proxy_api)

        if cfg.nodes > 1:
            say("connecting the nodes")
            await self._connect_all()
            say("waiting for the routing tables")
            await self.wait_for_routing_tables()

    async def _start_toxiproxy(self) -> ToxiproxyAPI:
        binary = toxiproxy_binary()
        log = self.base_dir / "toxiproxy.log"
        for _attempt in range(3):
            port = free_port()
            self.toxiproxy_pid = spawn(
                [str(binary), "-host", "127.0.0.1", "-port", str(port)],
                env=child_env(),
                log=log,
                detached=self.detached,
            )
            self.toxiproxy_url = f"http://127.0.0.1:{port}"
            api = ToxiproxyAPI(self.toxiproxy_url)
            with anyio.move_on_after(10):
                while alive(self.toxiproxy_pid):
                    try:
                        await api.version()
                        return api
                    except ToxiproxyError:
                        await anyio.sleep(0.05)
            kill_group(self.toxiproxy_pid, str(binary))
        raise ClusterError(f"toxiproxy-server did not start; its log:\n{log_tail(log)}")

    async def _wait_ready(self, node: ClusterNode, proxy_api: ToxiproxyAPI | None) -> None:
        api_file = node.repo / "api"
        with anyio.move_on_after(self.config.start_timeout) as scope:
            while True:
                if not alive(node.pid):
                    raise ClusterError(
                        f"{node.name}: the Kubo daemon exited during start-up "
                        f"(repo {node.repo}); end of its log:\n{node.log_tail()}"
                    )
                if api_file.exists():
                    try:
                        url = KuboConfig.from_multiaddr(api_file.read_text()).base_url
                        async with KuboClient(
                            config=KuboConfig(base_url=url, timeout=5.0, connect_timeout=2.0)
                        ) as kubo:
                            me = await kubo.id()
                            listen = await kubo.swarm_listen_addresses()
                    except (KuboError, ValueError):
                        await anyio.sleep(0.05)
                        continue
                    node.api_url = url
                    node.peer_id = me.peer_id
                    tcp = [a for a in listen if "/tcp/" in a and "/ws" not in a]
                    if not tcp:
                        raise ClusterError(f"{node.name}: no TCP swarm address in {listen}")
                    node.swarm_address = tcp[0]
                    break
                await anyio.sleep(0.05)
        if scope.cancelled_caught:
            raise ClusterError(
                f"{node.name}: the Kubo daemon did not answer within "
                f"{self.config.start_timeout:.0f} s; end of its log:\n{node.log_tail()}"
            )
        if proxy_api is not None:
            parts = node.swarm_address.split("/")
            await proxy_api.update_proxy(node.proxy_name, upstream=f"{parts[2]}:{parts[4]}")

    async def _connect_all(self) -> None:
        """Link each node to the first ``seeds`` nodes and its ring predecessor.

        Each pair is dialled once, from one side only, so that two daemons never
        dial each other at the same moment; a failed dial is retried once.
        """
        seeds = self.nodes[: self.config.seeds]
        pairs: set[tuple[int, int]] = set()
        for node in self.nodes:
            others = [s.index for s in seeds] + [self.nodes[node.index - 1].index]
            for other in others:
                if other != node.index:
                    pairs.add((max(node.index, other), min(node.index, other)))
        targets: dict[int, list[ClusterNode]] = {}
        for dialler, target in sorted(pairs):
            targets.setdefault(dialler, []).append(self.nodes[target])

        async def connect(node: ClusterNode) -> None:
            async with node.client() as kubo:
                for target in targets.get(node.index, []):
                    for attempt in range(2):
                        try:
                            await kubo.swarm_connect(target.multiaddr)
                            break
                        except KuboError as exc:
                            self._check_alive()
                            if attempt == 0:
                                await anyio.sleep(0.5)
                                continue
                            raise ClusterError(
                                f"{node.name} could not connect to {target.name}: {exc}"
                            ) from exc

        async with anyio.create_task_group() as tg:
            for node in self.nodes:
                tg.start_soon(connect, node)

    def _check_alive(self) -> None:
        for node in self.nodes:
            if node.pid and not node.is_running():
                raise ClusterError(
                    f"{node.name}: the Kubo daemon died; end of its log:\n{node.log_tail()}"
                )

    async def wait_for_routing_tables(self, target: int | None = None) -> None:
        """Wait until every node has ``target`` peers in its LAN routing table.

        A node that lags is nudged with a DHT lookup of its own peer ID, which is
        what a Kademlia refresh does.
        """
        want = self.config.table_target if target is None else target
        pending = {n.index for n in self.nodes}
        sizes: dict[int, int] = {}
        with anyio.move_on_after(self.config.table_timeout) as scope:
            rounds = 0
            while pending:
                self._check_alive()
                for index in sorted(pending):
                    node = self.nodes[index]
                    async with node.client(timeout=10.0) as kubo:
                        table = await kubo.stats_dht()
                        sizes[index] = len(table.peers("lan"))
                        if sizes[index] >= want:
                            pending.discard(index)
                        elif rounds % 10 == 5:
                            other = self.nodes[(index + 1 + rounds) % len(self.nodes)]
                            with contextlib.suppress(KuboError):
                                await kubo.find_peer(other.peer_id, max_wait=5.0)
                if pending:
                    rounds += 1
                    await anyio.sleep(0.1)
        if scope.cancelled_caught:
            lagging = ", ".join(f"{self.nodes[i].name} ({sizes.get(i, 0)})" for i in pending)
            raise ClusterError(
                f"routing tables not populated within {self.config.table_timeout:.0f} s; "
                f"wanted {want} LAN peers per node, lagging: {lagging}"
            )

    # faults (kill -9, restart, partition)

    async def kill(self, index: int) -> None:
        """SIGKILL Kubo daemon ``index`` (a crash: no graceful shutdown)."""
        node = self.nodes[index]
        pid, marker = node.pid, str(node.repo)
        if pid and ours(pid, marker):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            await anyio.to_thread.run_sync(lambda: kill_group(pid, marker, 1.0))
        node.pid = 0

    async def restart(self, index: int, *, connect_to: int = 4) -> None:
        """Start the stopped daemon ``index`` again: same repo (same peer ID), same API
        and swarm ports (a sidecar configured with its API URL finds it again), the
        proxy (if any) pointed at it; then dial ``connect_to`` live nodes, since a
        restarted daemon of this cluster has no bootstrap peers."""
        node = self.nodes[index]
        if node.is_running():
            return
        api_port = node.api_url.rsplit(":", 1)[1]
        configure_repo(
            node.repo,
            {
                "Addresses.API": f"/ip4/127.0.0.1/tcp/{api_port}",
                "Addresses.Swarm": [node.swarm_address],
            },
        )
        node.pid = spawn(
            daemon_command(ipfs_binary()),
            env=child_env(node.repo),
            log=node.log_path,
            detached=self.detached,
        )
        await self._wait_ready(node, node._toxiproxy)
        await self.reconnect(index, connect_to=connect_to)

    async def reconnect(self, index: int, *, connect_to: int = 4) -> int:
        """Dial up to ``connect_to`` other live nodes from node ``index`` (after a
        restart or a healed cut); returns how many connections succeeded."""
        node = self.nodes[index]
        others = [n for n in self.nodes if n.index != index and n.is_running()]
        start = (index + 1) % max(1, len(others)) if others else 0
        targets = (others[start:] + others[:start])[:connect_to]
        done = 0
        async with node.client(timeout=10.0) as kubo:
            for target in targets:
                with contextlib.suppress(KuboError):
                    await kubo.swarm_connect(target.multiaddr)
                    done += 1
        return done

    # stop

    async def stop(self) -> None:
        """Kill every process of the cluster and remove its directory."""
        await anyio.to_thread.run_sync(self.stop_now)

    def stop_now(self) -> None:
        """Synchronous :meth:`stop` (for ``atexit`` and the CLI)."""
        if self._stopped:
            return
        self._stopped = True
        ipfs_marker = ""
        for node in self.nodes:
            if node.pid:
                ipfs_marker = str(node.repo)
                kill_group(node.pid, ipfs_marker)
        if self.toxiproxy_pid:
            kill_group(self.toxiproxy_pid, "toxiproxy-server")
        if self._owns_base or self.detached:
            shutil.rmtree(self.base_dir, ignore_errors=True)
        else:
            for node in self.nodes:
                shutil.rmtree(node.repo, ignore_errors=True)
        _LIVE.discard(self)

    # state for the CLI

    def save_state(self, state_dir: Path) -> Path:
        return write_state(
            state_dir,
            config=self.config,
            base_dir=self.base_dir,
            toxiproxy_pid=self.toxiproxy_pid,
            toxiproxy_url=self.toxiproxy_url,
            startup_seconds=self.startup_seconds,
            nodes=self.nodes,
        )

    @classmethod
    def load(cls, state_dir: Path) -> LocalCluster:
        """The cluster described by ``state_dir`` (from :meth:`save_state`)."""
        saved = read_state(state_dir)
        cluster = cls(config=saved.config, detached=True)
        cluster.toxiproxy_pid = saved.toxiproxy_pid
        cluster.toxiproxy_url = saved.toxiproxy_url
        cluster.startup_seconds = saved.startup_seconds
        cluster.nodes = list(saved.nodes)
        return cluster
