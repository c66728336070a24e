"""Resource curves of a checker run: per node, every few seconds, the sidecar's RSS
and open file descriptors (psutil), and the size of its state directory and of its
Kubo repo; written as JSON lines (``resources.ndjson``), summarised
(:func:`summarise`) and plotted (:func:`plot`, ``resources.png``; needs matplotlib,
the ``spark`` extra).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import psutil

__all__ = ["ResourceSampler", "Sample", "dir_bytes", "plot", "summarise"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Sample:
    t: float
    """Seconds since the sampler started."""
    node: int
    rss: int | None
    """Sidecar resident memory, bytes (None: not running)."""
    fds: int | None
    state_bytes: int
    repo_bytes: int

    def to_json(self) -> dict[str, Any]:
        return {
            "t": round(self.t, 2),
            "node": self.node,
            "rss": self.rss,
            "fds": self.fds,
            "state_bytes": self.state_bytes,
            "repo_bytes": self.repo_bytes,
        }


def dir_bytes(path: Path) -> int:
    """Bytes of the files below ``path`` (0 if it is gone; files vanishing are skipped)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
    return total


@dataclass(slots=True, kw_only=True)
class ResourceSampler:
    """Sample ``nodes`` every ``interval`` seconds until :meth:`stop`.

    ``probe(i)`` gives node ``i``'s sidecar PID (0: not running), state directory and
    Kubo repo; ``skip(i)`` says the node is gone for good."""

    probe: Callable[[int], tuple[int, Path, Path]]
    nodes: Sequence[int]
    out: Path
    interval: float = 5.0
    skip: Callable[[int], bool] = lambda _: False
    samples: list[Sample] = field(default_factory=list)
    _stop: anyio.Event = field(default_factory=anyio.Event)

    def stop(self) -> None:
        self._stop.set()

    def sample_once(self, t: float) -> list[Sample]:
        got = []
        for i in self.nodes:
            if self.skip(i):
                continue
            pid, state_dir, repo = self.probe(i)
            rss = fds = None
            if pid > 0:
                try:
                    proc = psutil.Process(pid)
                    rss, fds = int(proc.memory_info().rss), int(proc.num_fds())
                except psutil.Error:
                    pass
            got.append(
                Sample(
                    t=t,
                    node=i,
                    rss=rss,
                    fds=fds,
                    state_bytes=dir_bytes(state_dir),
                    repo_bytes=dir_bytes(repo),
                )
            )
        return got

    async def run(self) -> None:
        began = time.monotonic()
        with self.out.open("a") as f:
            while not self._stop.is_set():
                t = time.monotonic() - began
                batch = await anyio.to_thread.run_sync(self.sample_once, t)
                self.samples += batch
                for s in batch:
                    f.write(json.dumps(s.to_json()) + "\n")
                f.flush()
                with anyio.move_on_after(max(0.0, began + t + self.interval - time.monotonic())):
                    await self._stop.wait()


MIB = 1024 * 1024


def summarise(samples: Sequence[Sample], *, settle: float) -> dict[str, Any]:
    """Per node, after ``settle`` seconds: RSS growth (MiB, last minus first sample
    after it, and the largest rise above that first sample), the range of open FDs,
    and the largest state-directory and Kubo-repo sizes over the run."""
    out: dict[str, Any] = {"settle_s": settle, "nodes": {}}
    for node in sorted({s.node for s in samples}):
        mine = [s for s in samples if s.node == node]
        late = [s for s in mine if s.t >= settle and s.rss is not None]
        fds = [s.fds for s in mine if s.t >= settle and s.fds is not None]
        doc: dict[str, Any] = {
            "state_max_mib": max(s.state_bytes for s in mine) / MIB,
            "repo_max_mib": max(s.repo_bytes for s in mine) / MIB,
            "state_last_mib": mine[-1].state_bytes / MIB,
            "repo_last_mib": mine[-1].repo_bytes / MIB,
        }
        if late:
            first = late[0].rss or 0
            doc["rss_at_settle_mib"] = first / MIB
            doc["rss_last_mib"] = (late[-1].rss or 0) / MIB
            doc["rss_growth_mib"] = ((late[-1].rss or 0) - first) / MIB
            doc["rss_max_rise_mib"] = (max(s.rss or 0 for s in late) - first) / MIB
        if fds:
            doc["fds_min"], doc["fds_max"] = min(fds), max(fds)
        out["nodes"][str(node)] = doc
    return out


def plot(
    samples: Sequence[Sample], path: Path, *, faults: Sequence[tuple[float, str]] = ()
) -> bool:
    """Four panels (RSS, FDs, state directory, Kubo repo) over time, a line per node,
    the faults as dashed vertical lines; False (no file) without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    panels: tuple[tuple[str, Callable[[Sample], float | None]], ...] = (
        ("sidecar RSS (MiB)", lambda s: None if s.rss is None else s.rss / MIB),
        ("sidecar open FDs", lambda s: s.fds),
        ("state directory (MiB)", lambda s: s.state_bytes / MIB),
        ("Kubo repo (MiB)", lambda s: s.repo_bytes / MIB),
    )
    fig, axes = plt.subplots(4, 1, figsize=(11, 12), sharex=True)
    nodes = sorted({s.node for s in samples})
    for ax, (title, value) in zip(axes, panels, strict=True):
        for node in nodes:
            xs, ys = [], []
            for s in samples:
                if s.node == node:
                    v = value(s)
                    xs.append(s.t / 60)
                    ys.append(float("nan") if v is None else v)
            ax.plot(xs, ys, label=f"node{node}", linewidth=1)
        for t, _ in faults:
            ax.axvline(t / 60, color="tab:red", alpha=0.35, linewidth=0.8, linestyle="--")
        ax.set_ylabel(title)
        ax.grid(alpha=0.3)
    axes[0].legend(ncol=min(len(nodes), 5), fontsize="small")
    axes[-1].set_xlabel("minutes (dashed red lines: faults)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True
