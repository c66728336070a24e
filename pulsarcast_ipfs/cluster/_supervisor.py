"""A local cluster of real Kubo daemons on loopback, optionally behind Toxiproxy.

Each node is a stock Kubo daemon with its own repo, configured as PROTOCOL.md §2
asks for a private cluster on loopback: ``ipfs init --profile=test``, a DHT server
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
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import ctypes
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import anyio
import psutil

from pulsarcast_ipfs.cluster._toxiproxy import ToxiproxyAPI, ToxiproxyError
from pulsarcast_ipfs.kubo import KuboClient, KuboConfig, KuboError
from pulsarcast_ipfs.tools import ipfs_binary, toxiproxy_binary

__all__ = ["ClusterConfig", "ClusterError", "ClusterNode", "LocalCluster", "default_state_dir"]

STATE_FILE = "cluster.json"
_PUBSUB_ROUTERS = ("gossipsub", "floodsub")


class ClusterError(RuntimeError):
    """The local cluster could not be started, reached or torn down."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterConfig:
    """What cluster to start.

    ``pubsub_router`` turns Kubo's own pubsub on (``gossipsub``/``floodsub``, for
    baselines). ``stream_mounting=False`` starts nodes without
    ``Experimental.Libp2pStreamMounting`` (to test that error). ``min_table_peers``
    is how many LAN routing-table peers every node needs before start returns
    (default: ``min(nodes - 1, 4)``). ``base_dir`` holds the repos (a fresh temp
    dir by default; removed on stop either way).
    """

    nodes: int = 4
    toxiproxy: bool = False
    pubsub_router: str | None = None
    stream_mounting: bool = True
    min_table_peers: int | None = None
    seeds: int = 3
    start_timeout: float = 60.0
    table_timeout: float = 90.0
    base_dir: Path | None = None

    def __post_init__(self) -> None:
        if not (isinstance(self.nodes, int) and 1 <= self.nodes <= 200):
            raise ValueError(f"nodes must be an integer in 1..200, got {self.nodes!r}")
        if self.pubsub_router is not None and self.pubsub_router not in _PUBSUB_ROUTERS:
            raise ValueError(f"pubsub_router must be one of {_PUBSUB_ROUTERS} or None")
        if self.min_table_peers is not None and not 0 <= self.min_table_peers < self.nodes:
            raise ValueError("min_table_peers must be in 0..nodes-1")
        if self.seeds < 1:
            raise ValueError("seeds must be at least 1")
        if self.start_timeout <= 0 or self.table_timeout <= 0:
            raise ValueError("timeouts must be positive")

    @property
    def table_target(self) -> int:
        if self.min_table_peers is not None:
            return self.min_table_peers
        return min(self.nodes - 1, 4)


def default_state_dir() -> Path:
    """Where ``pulsarcast cluster up`` keeps its state when no ``--state-dir`` is given."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = Path(runtime) if runtime else Path(tempfile.gettempdir()) / f"pulsarcast-{os.getuid()}"
    return base / "pulsarcast-cluster"


# -- processes -------------------------------------------------------------------------

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _spawn(cmd: Sequence[str], *, env: dict[str, str], log: Path, detached: bool) -> int:
    """Start ``cmd`` in its own process group, output to ``log``; return its pid."""
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            list(cmd),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=None if detached else _die_with_parent,
        )
    _CHILDREN[proc.pid] = proc
    return proc.pid


# Popen objects of the children of this process, so that they can be reaped.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def _alive(pid: int) -> bool:
    child = _CHILDREN.get(pid)
    if child is not None:
        return child.poll() is None
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _ours(pid: int, marker: str) -> bool:
    """Whether ``pid`` is still the process we started (its command or env names ``marker``)."""
    if pid in _CHILDREN:
        return _alive(pid)
    try:
        proc = psutil.Process(pid)
        if marker in " ".join(proc.cmdline()):
            return True
        return marker in proc.environ().values()
    except psutil.Error:
        return False


def _kill_group(pid: int, marker: str, grace: float = 5.0) -> None:
    """SIGTERM the process group of ``pid``, SIGKILL it after ``grace`` seconds; reap."""
    if not _ours(pid, marker):
        _CHILDREN.pop(pid, None)
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.05)
    if _alive(pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
    child = _CHILDREN.pop(pid, None)
    if child is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=5)
    else:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.05)


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in _leaves(sub)]
    return [exc]


def _single_error(exc: BaseException) -> ClusterError | None:
    """One :class:`ClusterError` for a group of start-up failures (None: not ours)."""
    if not isinstance(exc, BaseExceptionGroup):
        if isinstance(exc, KuboError | ToxiproxyError):
            return ClusterError(f"cluster start-up failed: {exc}")
        return None
    leaves = _leaves(exc)
    if not all(isinstance(e, ClusterError | KuboError | ToxiproxyError) for e in leaves):
        return None
    first, rest = str(leaves[0]), leaves[1:]
    if rest:
        others = "; ".join(str(e).splitlines()[0] for e in rest[:5])
        first += f"\n(and {len(rest)} more: {others})"
    return ClusterError(first)


OWNER_FILE = "owner.pid"


def _sweep_stale_dirs(parent: Path) -> None:
    """Remove temp cluster dirs left by a process that was killed (SIGKILL skips cleanup;
    its daemons died with it through PR_SET_PDEATHSIG)."""
    for d in parent.glob("pulsarcast-cluster-*"):
        try:
            owner = int((d / OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue
        if not psutil.pid_exists(owner):
            shutil.rmtree(d, ignore_errors=True)


_HANDED_OUT: collections.deque[int] = collections.deque(maxlen=4096)


def _ephemeral_low() -> int:
    """The lowest port the kernel hands out to outgoing connections (Linux), else 32768."""
    try:
        text = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text()
        return int(text.split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


_PORT_RNG = random.SystemRandom()


def _free_port() -> int:
    """A free loopback port not handed out recently by this process.

    Ports are chosen before the processes bind them, so two picks in a row may
    get the same free port from the kernel; the second process would then fail
    to bind while requests meant for it reached the first. They are also taken
    *below* the kernel's ephemeral range: a restarted sidecar or proxy binds its
    port again, and in the ephemeral range an outgoing connection of any process
    may hold it meanwhile ("address already in use", seen in CI).
    """
    low = _ephemeral_low()
    for _ in range(2000 if low > 12_000 else 0):
        port = _PORT_RNG.randrange(10_000, low)
        if port in _HANDED_OUT:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED_OUT.append(port)
        return port
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in _HANDED_OUT:
            _HANDED_OUT.append(port)
            return port


def _log_tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    tail = [ln for ln in text.splitlines() if ln.strip()][-lines:]
    return "\n".join("    " + ln for ln in tail) or "    (empty log)"


def _child_env(repo: Path | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["IPFS_TELEMETRY"] = "off"
    # With port reuse two daemons dialling each other at the same moment on
    # loopback can meet in a TCP simultaneous open, and the TLS handshake
    # then fails on both sides ("unexpected handshake message").  Dial from
    # ephemeral ports instead.
    env.setdefault("LIBP2P_TCP_REUSEPORT", "false")
    env.setdefault("GOLOG_LOG_LEVEL", "error")
    if repo is not None:
        env["IPFS_PATH"] = str(repo)
    return env


def _set(config: dict[str, Any], dotted: str, value: Any) -> None:
    node = config
    *parents, last = dotted.split(".")
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value


def kubo_settings(
    *, stream_mounting: bool, pubsub_router: str | None, announce: Sequence[str]
) -> dict[str, Any]:
    """The configuration keys a cluster node gets on top of ``--profile=test`` (§2)."""
    return {
        "Addresses.API": "/ip4/127.0.0.1/tcp/0",
        "Addresses.Gateway": [],
        "Addresses.Swarm": ["/ip4/127.0.0.1/tcp/0"],
        "Addresses.Announce": list(announce),
        "Bootstrap": [],
        "AutoConf.Enabled": False,
        "AutoNAT.ServiceMode": "disabled",
        "AutoTLS.Enabled": False,
        "Discovery.MDNS.Enabled": False,
        "Routing.Type": "dhtserver",
        "Routing.LoopbackAddressesOnLanDHT": True,
        "Provide.DHT.SweepEnabled": False,
        "Provide.Strategy": "pinned",
        # No periodic reprovide: its first round, a minute after start, re-announced
        # every pinned block, i.e. every subscriber's retained events (issue 12):
        # 130 MB of LAN DHT and a p50 of 1.3 s in a 20-node bench at 5 events/s.
        # Pins are still announced when pinned (fast-provide-root), `provide once` works.
        "Provide.Enabled": True,
        "Provide.DHT.Interval": "0s",
        "Experimental.Libp2pStreamMounting": stream_mounting,
        "Pubsub.Enabled": pubsub_router is not None,
        "Pubsub.Router": pubsub_router or "",
        "Swarm.RelayClient.Enabled": False,
        "Swarm.RelayService.Enabled": False,
        "Swarm.DisableNatPortMap": True,
        "Swarm.ConnMgr.Type": "basic",
        "Swarm.ConnMgr.LowWater": 250,
        "Swarm.ConnMgr.HighWater": 400,
        "Swarm.ConnMgr.GracePeriod": "2m",
        "Swarm.ResourceMgr.MaxMemory": "1GB",
        "Swarm.ResourceMgr.MaxFileDescriptors": 4096,
    }


# -- nodes -----------------------------------------------------------------------------


@dataclass(slots=True, kw_only=True)
class ClusterNode:
    """One Kubo daemon of a :class:`LocalCluster`.

    ``multiaddr`` is the address other nodes dial (the proxy when Toxiproxy is on),
    ``/p2p/<peer_id>`` included.
    """

    index: int
    repo: Path
    pid: int = 0
    api_url: str = ""
    peer_id: str = ""
    swarm_address: str = ""
    announce_address: str = ""
    proxy_name: str = ""
    _toxiproxy: ToxiproxyAPI | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return f"node{self.index}"

    @property
    def log_path(self) -> Path:
        return self.repo.parent / f"{self.name}.log"

    @property
    def multiaddr(self) -> str:
        return f"{self.announce_address or self.swarm_address}/p2p/{self.peer_id}"

    def client(self, **config: Any) -> KuboClient:
        """A new :class:`KuboClient` of this node (use it with ``async with``)."""
        return KuboClient(config=KuboConfig(base_url=self.api_url, **config))

    def is_running(self) -> bool:
        return self.pid > 0 and _alive(self.pid)

    def memory_rss(self) -> int:
        """Resident memory of the daemon in bytes."""
        try:
            return int(psutil.Process(self.pid).memory_info().rss)
        except psutil.Error as exc:
            raise ClusterError(f"{self.name} (pid {self.pid}) is not running") from exc

    def log_tail(self, lines: int = 20) -> str:
        return _log_tail(self.log_path, lines)

    def _require_proxy(self) -> ToxiproxyAPI:
        if self._toxiproxy is None or not self.proxy_name:
            raise ClusterError(f"{self.name}: the cluster was started without toxiproxy=True")
        return self._toxiproxy

    async def set_latency(self, ms: int, jitter: int = 0) -> None:
        """Delay everything this node sends on connections into it by ``ms`` (± ``jitter``).

        A round trip started by either side over such a connection gets ``ms`` longer.
        ``ms=0`` removes the toxic.
        """
        api = self._require_proxy()
        if ms < 0 or jitter < 0:
            raise ValueError("latency and jitter must be >= 0")
        if ms == 0 and jitter == 0:
            await api.remove_toxic(self.proxy_name, "latency")
        else:
            await api.set_toxic(
                self.proxy_name, "latency", "latency", "downstream", latency=ms, jitter=jitter
            )

    async def set_bandwidth(self, kbps: int | None) -> None:
        """Limit both directions of connections into this node to ``kbps`` KB/s (None: lift)."""
        api = self._require_proxy()
        for stream in ("upstream", "downstream"):
            name = f"bandwidth_{stream}"
            if kbps is None:
                await api.remove_toxic(self.proxy_name, name)
            elif kbps <= 0:
                raise ValueError("kbps must be positive (use cut() to stop traffic)")
            else:
                await api.set_toxic(self.proxy_name, name, "bandwidth", stream, rate=kbps)

    async def cut(self) -> None:
        """Isolate the node: its proxy drops and refuses connections, and the node's
        own dials and connections to loopback peers are filtered (``swarm/filters``)."""
        api = self._require_proxy()
        await api.update_proxy(self.proxy_name, enabled=False)
        async with self.client() as kubo:
            await kubo.swarm_filters_add("/ip4/127.0.0.1/ipcidr/32")
            for peer in await kubo.swarm_peers():
                with contextlib.suppress(KuboError):
                    await kubo.swarm_disconnect(f"/p2p/{peer.peer_id}")

    async def restore(self) -> None:
        """Undo :meth:`cut` (connections are re-established by the DHT or by the caller)."""
        api = self._require_proxy()
        listen = self.announce_address.split("/")
        await api.update_proxy(self.proxy_name, enabled=True, listen=f"{listen[2]}:{listen[4]}")
        async with self.client() as kubo:
            with contextlib.suppress(KuboError):
                await kubo.swarm_filters_rm("/ip4/127.0.0.1/ipcidr/32")

    def to_state(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "repo": str(self.repo),
            "pid": self.pid,
            "api_url": self.api_url,
            "peer_id": self.peer_id,
            "swarm_address": self.swarm_address,
            "announce_address": self.announce_address,
            "proxy_name": self.proxy_name,
        }


# -- the cluster -----------------------------------------------------------------------

_LIVE: weakref.WeakSet[LocalCluster] = weakref.WeakSet()


@atexit.register
def _cleanup_at_exit() -> None:
    for cluster in list(_LIVE):
        if not cluster.detached:
            cluster.stop_now()


class LocalCluster:
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

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with anyio.CancelScope(shield=True):
            await self.stop()

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
            single = _single_error(exc)
            if single is not None:
                raise single from exc
            raise
        self.startup_seconds = time.monotonic() - began

    async def _start(self, say: Callable[[str], None]) -> None:
        cfg = self.config
        ipfs = ipfs_binary()
        self.base_dir.mkdir(parents=True, exist_ok=True)
        if self._owns_base:
            _sweep_stale_dirs(self.base_dir.parent)
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
                result = await anyio.run_process(
                    [str(ipfs), "init", "--profile=test", "--empty-repo"],
                    env=_child_env(node.repo),
                    check=False,
                )
            if result.returncode != 0:
                out = (result.stdout + result.stderr).decode(errors="replace").strip()
                raise ClusterError(f"{node.name}: `ipfs init` failed: {out[-2000:]}")
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
            config_path = node.repo / "config"
            config = json.loads(config_path.read_text())
            settings = kubo_settings(
                stream_mounting=cfg.stream_mounting,
                pubsub_router=cfg.pubsub_router,
                announce=announce,
            )
            for key, value in settings.items():
                _set(config, key, value)
            # Ports below the kernel's ephemeral range (not ``tcp/0``): a restarted
            # daemon binds the same ones again, and an ephemeral port may meanwhile
            # be held by any outgoing connection ("address already in use" in CI).
            _set(config, "Addresses.API", f"/ip4/127.0.0.1/tcp/{_free_port()}")
            _set(config, "Addresses.Swarm", [f"/ip4/127.0.0.1/tcp/{_free_port()}"])
            config_path.write_text(json.dumps(config, indent=2))

        async with anyio.create_task_group() as tg:
            for node in self.nodes:
                tg.start_soon(init, node)

        say(f"starting {cfg.nodes} Kubo daemons")
        for node in self.nodes:
            node.pid = _spawn(
                [str(ipfs), "daemon", "--migrate=false"],
                env=_child_env(node.repo),
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
            port = _free_port()
            self.toxiproxy_pid = _spawn(
                [str(binary), "-host", "127.0.0.1", "-port", str(port)],
                env=_child_env(),
                log=log,
                detached=self.detached,
            )
            self.toxiproxy_url = f"http://127.0.0.1:{port}"
            api = ToxiproxyAPI(self.toxiproxy_url)
            with anyio.move_on_after(10):
                while _alive(self.toxiproxy_pid):
                    try:
                        await api.version()
                        return api
                    except ToxiproxyError:
                        await anyio.sleep(0.05)
            _kill_group(self.toxiproxy_pid, str(binary))
        raise ClusterError(f"toxiproxy-server did not start; its log:\n{_log_tail(log)}")

    async def _wait_ready(self, node: ClusterNode, proxy_api: ToxiproxyAPI | None) -> None:
        api_file = node.repo / "api"
        with anyio.move_on_after(self.config.start_timeout) as scope:
            while True:
                if not _alive(node.pid):
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
        if pid and _ours(pid, marker):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            await anyio.to_thread.run_sync(lambda: _kill_group(pid, marker, 1.0))
        node.pid = 0

    async def restart(self, index: int, *, connect_to: int = 4) -> None:
        """Start the stopped daemon ``index`` again: same repo (same peer ID), same API
        and swarm ports (a sidecar configured with its API URL finds it again), the
        proxy (if any) pointed at it; then dial ``connect_to`` live nodes, since a
        restarted daemon of this cluster has no bootstrap peers."""
        node = self.nodes[index]
        if node.is_running():
            return
        config_path = node.repo / "config"
        config = json.loads(config_path.read_text())
        api_port = node.api_url.rsplit(":", 1)[1]
        _set(config, "Addresses.API", f"/ip4/127.0.0.1/tcp/{api_port}")
        _set(config, "Addresses.Swarm", [node.swarm_address])
        config_path.write_text(json.dumps(config, indent=2))
        node.pid = _spawn(
            [str(ipfs_binary()), "daemon", "--migrate=false"],
            env=_child_env(node.repo),
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
                _kill_group(node.pid, ipfs_marker)
        if self.toxiproxy_pid:
            _kill_group(self.toxiproxy_pid, "toxiproxy-server")
        if self._owns_base or self.detached:
            shutil.rmtree(self.base_dir, ignore_errors=True)
        else:
            for node in self.nodes:
                shutil.rmtree(node.repo, ignore_errors=True)
        _LIVE.discard(self)

    # state for the CLI

    def save_state(self, state_dir: Path) -> Path:
        state_dir.mkdir(parents=True, exist_ok=True)
        path = state_dir / STATE_FILE
        doc = {
            "base_dir": str(self.base_dir),
            "toxiproxy_pid": self.toxiproxy_pid,
            "toxiproxy_url": self.toxiproxy_url,
            "config": {
                "nodes": self.config.nodes,
                "toxiproxy": self.config.toxiproxy,
                "pubsub_router": self.config.pubsub_router,
                "stream_mounting": self.config.stream_mounting,
            },
            "startup_seconds": self.startup_seconds,
            "nodes": [n.to_state() for n in self.nodes],
        }
        path.write_text(json.dumps(doc, indent=2))
        return path

    @classmethod
    def load(cls, state_dir: Path) -> LocalCluster:
        """The cluster described by ``state_dir`` (from :meth:`save_state`)."""
        path = state_dir / STATE_FILE
        try:
            doc = json.loads(path.read_text())
            raw = doc["config"]
            config = ClusterConfig(
                nodes=int(raw["nodes"]),
                toxiproxy=bool(raw["toxiproxy"]),
                pubsub_router=raw.get("pubsub_router"),
                stream_mounting=bool(raw.get("stream_mounting", True)),
                base_dir=Path(doc["base_dir"]),
            )
        except FileNotFoundError as exc:
            raise ClusterError(f"no cluster is running (no {path})") from exc
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ClusterError(f"unreadable cluster state {path}: {exc}") from exc
        cluster = cls(config=config, detached=True)
        cluster.toxiproxy_pid = int(doc.get("toxiproxy_pid") or 0)
        cluster.toxiproxy_url = str(doc.get("toxiproxy_url") or "")
        cluster.startup_seconds = float(doc.get("startup_seconds") or 0.0)
        api = ToxiproxyAPI(cluster.toxiproxy_url) if cluster.toxiproxy_url else None
        for n in doc["nodes"]:
            cluster.nodes.append(
                ClusterNode(
                    index=int(n["index"]),
                    repo=Path(n["repo"]),
                    pid=int(n["pid"]),
                    api_url=str(n["api_url"]),
                    peer_id=str(n["peer_id"]),
                    swarm_address=str(n["swarm_address"]),
                    announce_address=str(n["announce_address"]),
                    proxy_name=str(n["proxy_name"]),
                    _toxiproxy=api if n["proxy_name"] else None,
                )
            )
        return cluster
