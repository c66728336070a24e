"""The checker's nemesis: seeded random faults on a real cluster, one at a time.

Every ``gap`` seconds (start to start, drawn uniformly from the range) it runs the
next fault of a seeded random order of :data:`FAULT_KINDS` (each kind once before
any repeats), on nodes drawn with the same seed:

- ``kill_restart``: a node's Kubo and sidecar SIGKILLed, back 2-8 s later with the
  same repo and state (a machine crash and reboot);
- ``destroy_publisher``: a publisher (never the topic's author) SIGKILLed right
  after its next acknowledged publish, its Kubo repo and state directory deleted;
  it stays dead (a machine lost with its disk). At most ``max_destroyed`` of them,
  and at least two publishers stay;
- ``partition``: up to a third of the live nodes cut off for 5-15 s, then healed;
- ``kubo_restart``: a node's Kubo SIGKILLed under its running sidecar, restarted
  2-6 s later;
- ``slow_link``: a node's bandwidth limited to 2, 5 or 20 KB/s for 5-15 s;
- ``unwritable_state``: a node's state directory (and delivery log) made immutable
  until its sidecar stops on the write error (at most 20 s), then writable again and
  the sidecar restarted.

The faults reuse the fault scenarios' machinery (:mod:`pulsarcast_ipfs.cluster`:
``kill_node``, ``partition``, ``throttle``, ``chattr``). Every fault heals itself
before the next starts; a node that does not come back is a problem of the run.
"""

from __future__ import annotations

import contextlib
import random
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import anyio

from pulsarcast_ipfs.cluster import LocalSidecarCluster
from pulsarcast_ipfs.cluster._faults import chattr, throttle
from pulsarcast_ipfs.polling import poll_until

__all__ = ["FAULT_KINDS", "FaultRecord", "Liveness", "Nemesis"]

FAULT_KINDS: Final = (
    "kill_restart",
    "destroy_publisher",
    "partition",
    "kubo_restart",
    "slow_link",
    "unwritable_state",
)

DESTROY_WAIT: Final = 30.0
"""Seconds the nemesis waits for a doomed publisher's next acknowledgement; then it
destroys the node without one."""


@dataclass(slots=True)
class Liveness:
    """Which nodes are gone for good (``dead``; ``destroyed`` the publishers the
    nemesis destroyed, with the time) and whose API is down for now (``down``)."""

    dead: set[int] = field(default_factory=set)
    down: set[int] = field(default_factory=set)
    destroyed: dict[int, float] = field(default_factory=dict)

    def usable(self, i: int) -> bool:
        return i not in self.dead and i not in self.down


@dataclass(slots=True, kw_only=True)
class FaultRecord:
    kind: str
    nodes: list[int]
    start: float
    end: float = 0.0
    detail: str = ""
    error: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "nodes": self.nodes,
            "start": self.start,
            "end": self.end,
            "detail": self.detail,
            "error": self.error,
        }


@dataclass(slots=True, kw_only=True)
class Nemesis:
    """The faults of the module docstring on ``sc``, drawn from ``rng``."""

    sc: LocalSidecarCluster
    rng: random.Random
    live: Liveness
    publishers: Sequence[int]
    author: int
    kinds: Sequence[str] = FAULT_KINDS
    gap: tuple[float, float] = (20.0, 40.0)
    spare: frozenset[int] = frozenset()
    """Nodes never faulted (e.g. the one with a planted bug)."""
    max_destroyed: int = 1
    say: Callable[[str], None] = lambda _: None
    faults: list[FaultRecord] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    _doomed: int | None = None
    _gone: anyio.Event = field(default_factory=anyio.Event)

    async def run(self, until: float) -> None:
        """Fault until ``until`` (a fault started before it ends after it)."""
        order: list[str] = []
        next_at = time.time() + self.rng.uniform(*self.gap)
        while next_at < until:
            await anyio.sleep(max(0.0, next_at - time.time()))
            if not order:
                order = self.rng.sample(list(self.kinds), len(self.kinds))
            started = time.time()
            for _ in range(len(order)):
                kind = order.pop(0)
                if await self.one(kind):
                    break
            next_at = started + self.rng.uniform(*self.gap)

    def _candidates(self) -> list[int]:
        return [i for i in range(len(self.sc)) if i not in self.live.dead and i not in self.spare]

    async def one(self, kind: str) -> bool:
        """Run one fault of ``kind``; False if no node can take it now."""
        nodes = self._candidates()
        if kind == "destroy_publisher":
            alive = [p for p in self.publishers if p not in self.live.dead]
            nodes = [p for p in alive if p != self.author and p not in self.spare]
            if len(self.live.destroyed) >= self.max_destroyed or len(alive) <= 2:
                nodes = []
        if not nodes:
            return False
        rec = FaultRecord(kind=kind, nodes=[], start=time.time())
        self.faults.append(rec)
        try:
            await getattr(self, kind)(rec, nodes)
        except Exception as exc:
            rec.error = f"{type(exc).__name__}: {exc}".splitlines()[0]
            self.problems.append(f"{kind} on {rec.nodes}: {rec.error}")
            for i in rec.nodes:  # a node that did not come back is not checked
                if kind != "partition" and kind != "slow_link":
                    self.live.dead.add(i)
        finally:
            rec.end = time.time()
        self.say(
            f"  nemesis {rec.kind} {rec.nodes} {rec.detail} ({rec.end - rec.start:.1f} s)"
            + (f" ERROR {rec.error}" if rec.error else "")
        )
        return True

    async def kill_restart(self, rec: FaultRecord, nodes: list[int]) -> None:
        i = self.rng.choice(nodes)
        rec.nodes = [i]
        down = self.rng.uniform(2, 8)
        rec.detail = f"down {down:.1f} s"
        self.live.down.add(i)
        try:
            await self.sc.kill_node(i)
            await anyio.sleep(down)
            await self.sc.start_node(i)
        finally:
            self.live.down.discard(i)

    async def kubo_restart(self, rec: FaultRecord, nodes: list[int]) -> None:
        i = self.rng.choice(nodes)
        rec.nodes = [i]
        down = self.rng.uniform(2, 6)
        rec.detail = f"Kubo down {down:.1f} s"
        await self.sc.kill_kubo(i)
        await anyio.sleep(down)
        await self.sc.restart_kubo(i)

    async def partition(self, rec: FaultRecord, nodes: list[int]) -> None:
        k = self.rng.randint(1, max(1, (len(self.sc) - len(self.live.dead)) // 3))
        cut = sorted(self.rng.sample(nodes, min(k, len(nodes))))
        rec.nodes = cut
        seconds = self.rng.uniform(5, 15)
        rec.detail = f"cut {seconds:.1f} s"
        try:
            await self.sc.partition(cut)
            await anyio.sleep(seconds)
        finally:
            with anyio.CancelScope(shield=True):
                await self.sc.heal(cut)

    async def slow_link(self, rec: FaultRecord, nodes: list[int]) -> None:
        i = self.rng.choice(nodes)
        rec.nodes = [i]
        kbps = self.rng.choice((2, 5, 20))
        seconds = self.rng.uniform(5, 15)
        rec.detail = f"{kbps} KB/s for {seconds:.1f} s"
        try:
            await throttle(self.sc, i, kbps)
            await anyio.sleep(seconds)
        finally:
            with anyio.CancelScope(shield=True):
                await throttle(self.sc, i, None)

    async def unwritable_state(self, rec: FaultRecord, nodes: list[int]) -> None:
        i = self.rng.choice(nodes)
        rec.nodes = [i]
        sidecar = self.sc[i]
        paths = [sidecar.state_dir]
        if (sidecar.state_dir / "deliveries.ndjson").exists():
            paths.append(sidecar.state_dir / "deliveries.ndjson")
        stopped = False
        chattr("+i", *paths)
        try:
            stopped = await poll_until(lambda: not sidecar.is_running(), deadline=20, interval=0.2)
        finally:
            chattr("-i", *paths)
        rec.detail = "sidecar stopped on the write error" if stopped else "no write in 20 s"
        if stopped:
            self.live.down.add(i)
            try:
                sidecar.pid = 0
                await self.sc.start_sidecar(i)
            finally:
                self.live.down.discard(i)

    async def destroy_publisher(self, rec: FaultRecord, nodes: list[int]) -> None:
        i = self.rng.choice(nodes)
        rec.nodes = [i]
        self._doomed, self._gone = i, anyio.Event()
        with anyio.move_on_after(DESTROY_WAIT):
            await self._gone.wait()
        if i not in self.live.destroyed:
            rec.detail = f"no acknowledgement within {DESTROY_WAIT:.0f} s; destroyed anyway"
            await self.destroy(i)
        else:
            rec.detail = "right after an acknowledgement"

    async def after_ack(self, i: int) -> bool:
        """The publishers' hook: destroy ``i`` now if it is doomed (True: it is gone)."""
        if self._doomed != i:
            return False
        await self.destroy(i)
        return True

    async def destroy(self, i: int) -> None:
        """SIGKILL node ``i`` (Kubo and sidecar) and delete its repo and state."""
        self._doomed = None
        self.live.dead.add(i)
        await self.sc.kill_node(i)
        self.live.destroyed[i] = time.time()
        for path in (self.sc.cluster[i].repo, self.sc[i].state_dir):
            with contextlib.suppress(OSError):
                shutil.rmtree(path)
        self._gone.set()
