"""Benchmark configuration: systems, network conditions and the run parameters.

The issue (docs/benchmark.md) names four systems and two network conditions;
every (system, condition) pair runs on a fresh local cluster, back to back.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

__all__ = [
    "CONDITIONS",
    "SYSTEMS",
    "BenchConfig",
    "BenchError",
    "Latency",
    "parse_latency",
]

SYSTEMS: Final = ("pulsarcast", "pulsarcast-ordered", "gossipsub", "floodsub")
"""``pulsarcast``: anyone may publish. ``pulsarcast-ordered``: only a topic's creator
publishes, everyone else requests to publish (one ordered chain per topic).
``gossipsub`` / ``floodsub``: Kubo's own pubsub through its RPC API."""

CONDITIONS: Final = ("normal", "latency")
"""``normal``: loopback as it is. ``latency``: a Toxiproxy latency toxic (default
500 ms ± 300 ms) on every node's inbound connections."""


class BenchError(RuntimeError):
    """The benchmark could not be configured, started or completed."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Latency:
    """Toxiproxy latency toxic: ``ms`` delay with ``jitter`` ms of jitter."""

    ms: int = 500
    jitter: int = 300

    def __post_init__(self) -> None:
        if self.ms < 0 or self.jitter < 0:
            raise BenchError("latency and jitter must be >= 0")
        if self.jitter > self.ms:
            raise BenchError("jitter must not exceed the latency")

    def __str__(self) -> str:
        return f"{self.ms}ms±{self.jitter}ms"


_LATENCY_RE: Final = re.compile(
    r"^\s*(\d+)\s*(?:ms)?\s*(?:(?:±|\+-|\+/-|,)\s*(\d+)\s*(?:ms)?)?\s*$", re.IGNORECASE
)


def parse_latency(text: str) -> Latency:
    """``"500ms±300ms"``, ``"500+-300"``, ``"500,300"`` or ``"500"`` → :class:`Latency`."""
    m = _LATENCY_RE.match(text)
    if m is None:
        raise BenchError(f"latency must look like 500ms±300ms (or 500+-300), got {text!r}")
    return Latency(ms=int(m.group(1)), jitter=int(m.group(2) or 0))


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchConfig:
    """One benchmark run set.

    ``workload`` is a shipped workload (``25k``, ``10k``) or a path. ``rate`` is
    the aggregate publication rate (events/s over the whole cluster); ``events``
    limits the number of events (``None``: all of the workload); ``grace`` is how
    long the runner waits after the last publication; ``settle`` how long after
    the subscriptions before the first publication. ``sample_interval`` spaces the
    resource samples. ``run`` names the run set (records carry ``<run>-<condition>``).
    """

    systems: tuple[str, ...] = ("gossipsub",)
    conditions: tuple[str, ...] = ("normal",)
    nodes: int = 4
    workload: str = "25k"
    rate: float = 50.0
    events: int | None = None
    topics: int | None = None
    grace: float = 30.0
    settle: float = 5.0
    latency: Latency = field(default_factory=Latency)
    sample_interval: float = 10.0
    seed: int = 0
    out: Path = Path("bench-run")
    run: str = "bench"
    command: str = ""

    def __post_init__(self) -> None:
        if not self.systems:
            raise BenchError("give at least one system")
        for s in self.systems:
            if s not in SYSTEMS:
                raise BenchError(f"unknown system {s!r} (choose from {', '.join(SYSTEMS)})")
        if len(set(self.systems)) != len(self.systems):
            raise BenchError("a system is listed twice")
        if not self.conditions:
            raise BenchError("give at least one condition")
        for c in self.conditions:
            if c not in CONDITIONS:
                raise BenchError(f"unknown condition {c!r} (choose from {', '.join(CONDITIONS)})")
        if len(set(self.conditions)) != len(self.conditions):
            raise BenchError("a condition is listed twice")
        if not 1 <= self.nodes <= 200:
            raise BenchError(f"nodes must be in 1..200, got {self.nodes}")
        if not self.rate > 0:
            raise BenchError(f"rate must be positive, got {self.rate}")
        if self.events is not None and self.events < 1:
            raise BenchError(f"events must be at least 1, got {self.events}")
        if self.topics is not None and self.topics < 1:
            raise BenchError(f"topics must be at least 1, got {self.topics}")
        if self.grace < 0 or self.settle < 0:
            raise BenchError("grace and settle must be >= 0")
        if not self.sample_interval > 0:
            raise BenchError("sample interval must be positive")
        if not re.fullmatch(r"[A-Za-z0-9._-]+", self.run):
            raise BenchError(f"run name may hold letters, digits, '.', '_', '-': {self.run!r}")

    def run_dir(self, system: str, condition: str) -> Path:
        """Where one (system, condition) run writes: ``OUT/<system>-<condition>``."""
        return self.out / f"{system}-{condition}"

    def run_id(self, condition: str) -> str:
        """The ``run`` field of the records of one condition (Spark keys on run+system)."""
        return f"{self.run}-{condition}"
