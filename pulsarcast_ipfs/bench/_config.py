"""Benchmark configuration: systems, network conditions and the run parameters.

The issue (docs/benchmark.md) names four systems and two network conditions;
every (system, condition) pair runs on a fresh local cluster, back to back. A
*sweep* gives several node counts, rates and/or payload sizes: every :class:`Combination`
(node count × rate × payload size) then runs every (system, condition) pair, and the run
directories and run ids name the combination (``<system>-<condition>-n20-r50``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from pulsarcast_ipfs.core import MAX_PAYLOAD_SIZE

__all__ = [
    "CONDITIONS",
    "DEFAULT_NODES",
    "DEFAULT_RATE",
    "DEFAULT_SELECTIVITY",
    "MAX_BENCH_PAYLOAD",
    "MIN_BENCH_PAYLOAD",
    "SYSTEMS",
    "BenchConfig",
    "BenchError",
    "Combination",
    "Latency",
    "parse_latency",
    "parse_node_counts",
    "parse_payload_sizes",
    "parse_rates",
    "payload_label",
    "rate_label",
]

SYSTEMS: Final = (
    "pulsarcast",
    "pulsarcast-ordered",
    "pulsarcast-fast",
    "pulsarcast-filtered",
    "gossipsub",
    "floodsub",
)
"""``pulsarcast``: anyone may publish. ``pulsarcast-ordered``: only a topic's creator
publishes, everyone else requests to publish (one ordered chain per topic).
``pulsarcast-fast``: as ``pulsarcast``, every subscription with ``fast`` (fast
groups: each publisher sends to its subscribers directly, at most
``group_capacity`` of them, helpers beyond; docs/protocol-notes.md "Fast groups").
``pulsarcast-filtered``: as ``pulsarcast``, every subscription with its filter
(``_filters.py``; the subscriber's node filters, tree filtering is off). Every
Pulsarcast system publishes the workload's attributes.
``gossipsub`` / ``floodsub``: Kubo's own pubsub through its RPC API."""

DEFAULT_SELECTIVITY: Final = 0.1
"""The share of a topic's events a subscription's filter matches (``--selectivity``)."""

CONDITIONS: Final = ("normal", "latency")
"""``normal``: loopback as it is. ``latency``: a Toxiproxy latency toxic (default
500 ms ± 300 ms) on every node's inbound connections."""

MAX_NODES: Final = 200

MIN_BENCH_PAYLOAD: Final = 1024
"""The smallest ``--payload``: room for the JSON header and the workload record."""

MAX_BENCH_PAYLOAD: Final = MAX_PAYLOAD_SIZE
"""The largest ``--payload``: Pulsarcast's payload limit (512 KiB), below Kubo's
pubsub message limit (1 MiB) so that every system carries the same bytes."""

DEFAULT_GROUP_CAPACITY: Final = 4
"""``pulsarcast-fast``'s group capacity: the largest topics of the 20-node cluster
have more subscribers than this, so their publishers recruit helpers."""

DEFAULT_NODES: Final = 20
"""The default cluster: the node count of ``pulsarcast bench`` without ``--nodes``."""

DEFAULT_RATE: Final = 5.0
"""The default ``--rate`` (aggregate events per second): a rate that every system
sustains on the default cluster (:data:`DEFAULT_NODES` nodes, ``normal`` condition),
at or below every system's knee (docs/benchmark.md, "Sweeps"). Measured by the
sweep of run set "s6b" (docs/benchmark-history.md): knee 5 for Pulsarcast, 20 for gossipsub on
the shared 2-core machine. It was 50, which neither sustained there."""


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


def _items(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def _where(item: str, text: str) -> str:
    return f"{item!r}" if item == text.strip() else f"{item!r} (in {text!r})"


def parse_rates(text: str) -> tuple[float, ...]:
    """``"50"`` → ``(50.0,)``; ``"5,20,50"`` → ``(5.0, 20.0, 50.0)``: positive, finite
    events per second, each once, in the order given."""
    rates: list[float] = []
    for item in _items(text):
        try:
            rate = float(item)
        except ValueError:
            rate = math.nan
        if not (math.isfinite(rate) and rate > 0):
            raise BenchError(
                f"rate must be a positive number of events per second, got {_where(item, text)}"
            )
        rates.append(rate)
    if not rates:
        raise BenchError(f"give at least one rate, got {text!r}")
    return tuple(rates)


def parse_node_counts(text: str) -> tuple[int, ...]:
    """``"20"`` → ``(20,)``; ``"20,50"`` → ``(20, 50)``: whole numbers in 1..200."""
    counts: list[int] = []
    for item in _items(text):
        try:
            n = int(item)
        except ValueError:
            n = 0
        if not 1 <= n <= MAX_NODES:
            raise BenchError(
                f"nodes must be a whole number in 1..{MAX_NODES}, got {_where(item, text)}"
            )
        counts.append(n)
    if not counts:
        raise BenchError(f"give at least one node count, got {text!r}")
    return tuple(counts)


_SIZE_RE: Final = re.compile(r"^(\d+)\s*(k|kib|m|mib|b)?$", re.IGNORECASE)


def parse_payload_sizes(text: str) -> tuple[int, ...]:
    """``"16k"`` → ``(16384,)``; ``"1k,16k,64k,256k"`` → bytes each, in the order given.
    A size is a whole number of bytes with an optional binary suffix (``k``/``KiB``,
    ``m``/``MiB``, ``b``), from :data:`MIN_BENCH_PAYLOAD` to :data:`MAX_BENCH_PAYLOAD`,
    each once."""
    sizes: list[int] = []
    for item in _items(text):
        m = _SIZE_RE.match(item)
        if m is None:
            raise BenchError(
                f"payload size must be bytes with an optional k or m suffix (e.g. 16k), "
                f"got {_where(item, text)}"
            )
        unit = (m.group(2) or "b").lower()[0]
        size = int(m.group(1)) * {"b": 1, "k": 1024, "m": 1024 * 1024}[unit]
        if not MIN_BENCH_PAYLOAD <= size <= MAX_BENCH_PAYLOAD:
            raise BenchError(
                f"payload size must be from {payload_label(MIN_BENCH_PAYLOAD)} to "
                f"{payload_label(MAX_BENCH_PAYLOAD)} (Pulsarcast's payload limit), "
                f"got {_where(item, text)}"
            )
        if size in sizes:
            raise BenchError(f"payload size {_where(item, text)} is listed twice")
        sizes.append(size)
    if not sizes:
        raise BenchError(f"give at least one payload size, got {text!r}")
    return tuple(sizes)


def payload_label(size: int) -> str:
    """``16384`` → ``"16k"``, ``1048576`` → ``"1m"``, ``1000`` → ``"1000b"``."""
    if size % (1024 * 1024) == 0:
        return f"{size // (1024 * 1024)}m"
    if size % 1024 == 0:
        return f"{size // 1024}k"
    return f"{size}b"


def rate_label(rate: float) -> str:
    """``50.0`` → ``"50"``, ``2.5`` → ``"2.5"`` (run directories, run ids, tables)."""
    return str(int(rate)) if rate.is_integer() else repr(rate)


@dataclass(frozen=True, slots=True, kw_only=True)
class Combination:
    """One point of a sweep: a cluster of ``nodes`` nodes publishing ``rate`` events/s,
    each of ``payload`` bytes (``None``: the workload's own 200-600 byte records)."""

    nodes: int
    rate: float
    payload: int | None = None

    @property
    def label(self) -> str:
        """``n20-r50`` (``n20-r50-p16k`` with a payload size): the suffix of a sweep's
        run directories and run ids."""
        size = "" if self.payload is None else f"-p{payload_label(self.payload)}"
        return f"n{self.nodes}-r{rate_label(self.rate)}{size}"


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchConfig:
    """One benchmark run set.

    ``nodes`` are the cluster sizes and ``rates`` the aggregate publication rates
    (events/s over the whole cluster) to run: one value each for a single
    combination, several for a sweep (:meth:`combinations`). ``workload`` is a
    shipped workload (``25k``, ``10k``) or a path. ``events`` limits the number of
    events (``None``: all of the workload); ``grace`` is how long the runner waits
    after the last publication; ``settle`` how long after the subscriptions before
    the first publication. ``sample_interval`` spaces the
    resource samples. ``run`` names the run set (records carry ``<run>-<condition>``,
    and ``<run>-<condition>-n<nodes>-r<rate>`` in a sweep).
    """

    systems: tuple[str, ...] = ("gossipsub",)
    conditions: tuple[str, ...] = ("normal",)
    nodes: tuple[int, ...] = (DEFAULT_NODES,)
    workload: str = "25k"
    rates: tuple[float, ...] = (DEFAULT_RATE,)
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
    group_capacity: int = DEFAULT_GROUP_CAPACITY
    """``pulsarcast-fast``: each sidecar's ``--group-capacity`` (below the group sizes
    of the 20-node cluster by default, so that helpers carry part of every group)."""
    filters: bool = False
    """Give every subscription a filter (``_filters.py``) even without
    ``pulsarcast-filtered`` in :attr:`systems` (:attr:`filtered`)."""
    selectivity: float = DEFAULT_SELECTIVITY
    """The share of a topic's events each subscription's filter should match."""
    ack: int = 0
    """Pulsarcast systems: the acknowledgement level of every publish (0: ``local``,
    answered once the event is in the publisher's node; N: once N other nodes hold
    it). Always sent explicitly: the sidecar's own default is 1."""
    payloads: tuple[int | None, ...] = (None,)
    """Synthetic payload sizes in bytes (``--payload``): every event published is
    exactly this long (the workload's record padded, same timing and topics);
    ``None``: the workload's own records. Several make a sweep."""
    join_timeout: float = 120.0
    """Seconds the runner waits, after subscribing, for every subscriber and publisher
    to join its topics' trees before the first publication (``_ready.py``); past it
    the run fails, naming what still waits."""

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
        if not self.nodes:
            raise BenchError("give at least one node count")
        for n in self.nodes:
            if not 1 <= n <= MAX_NODES:
                raise BenchError(f"nodes must be in 1..{MAX_NODES}, got {n}")
        twice = [n for n in self.nodes if self.nodes.count(n) > 1]
        if twice:
            raise BenchError(f"node count {twice[0]} is listed twice")
        if not self.rates:
            raise BenchError("give at least one rate")
        for r in self.rates:
            if not (math.isfinite(r) and r > 0):
                raise BenchError(f"rate must be positive, got {r}")
        again = [r for r in self.rates if self.rates.count(r) > 1]
        if again:
            raise BenchError(f"rate {rate_label(again[0])} is listed twice")
        if self.events is not None and self.events < 1:
            raise BenchError(f"events must be at least 1, got {self.events}")
        if self.topics is not None and self.topics < 1:
            raise BenchError(f"topics must be at least 1, got {self.topics}")
        if self.grace < 0 or self.settle < 0:
            raise BenchError("grace and settle must be >= 0")
        if not (math.isfinite(self.join_timeout) and self.join_timeout > 0):
            raise BenchError(f"join timeout must be positive, got {self.join_timeout}")
        if isinstance(self.ack, bool) or not isinstance(self.ack, int) or not 0 <= self.ack <= 64:
            raise BenchError(f"ack must be local (0) or 1..64 other nodes, got {self.ack!r}")
        if not self.payloads or len(set(self.payloads)) != len(self.payloads):
            raise BenchError("give each payload size once")
        for size in self.payloads:
            if size is not None and not MIN_BENCH_PAYLOAD <= size <= MAX_BENCH_PAYLOAD:
                raise BenchError(
                    f"payload size must be {MIN_BENCH_PAYLOAD}..{MAX_BENCH_PAYLOAD} bytes, "
                    f"got {size}"
                )
        if self.group_capacity < 1:
            raise BenchError(f"group capacity must be at least 1, got {self.group_capacity}")
        if not (math.isfinite(self.selectivity) and 0 < self.selectivity < 1):
            raise BenchError(
                f"selectivity must be between 0 and 1 (exclusive), got {self.selectivity}"
            )
        if not self.sample_interval > 0:
            raise BenchError("sample interval must be positive")
        if not re.fullmatch(r"[A-Za-z0-9._-]+", self.run):
            raise BenchError(f"run name may hold letters, digits, '.', '_', '-': {self.run!r}")

    @property
    def filtered(self) -> bool:
        """Subscriptions get filters: ``pulsarcast-filtered`` subscribes with them, every
        other system's application applies them (the summary counts matching
        deliveries), the same filters for every system of the set."""
        return self.filters or "pulsarcast-filtered" in self.systems

    @property
    def sweep(self) -> bool:
        """More than one node count, rate or payload size: run directories and ids name
        the combination."""
        return len(self.nodes) > 1 or len(self.rates) > 1 or len(self.payloads) > 1

    def combinations(self) -> tuple[Combination, ...]:
        """Every (node count, rate, payload size), node counts outer, each in the order
        given."""
        return tuple(
            Combination(nodes=n, rate=r, payload=p)
            for n in self.nodes
            for r in self.rates
            for p in self.payloads
        )

    def _combination(self, combination: Combination | None) -> Combination | None:
        if combination is not None:
            return combination
        if self.sweep:
            raise BenchError("a sweep's runs need their combination")
        return None

    def run_dir(self, system: str, condition: str, combination: Combination | None = None) -> Path:
        """Where one run writes: ``OUT/<system>-<condition>`` for a single combination,
        ``OUT/<system>-<condition>-n<nodes>-r<rate>`` in a sweep."""
        c = self._combination(combination)
        name = f"{system}-{condition}"
        return self.out / (f"{name}-{c.label}" if self.sweep and c is not None else name)

    def run_id(self, condition: str, combination: Combination | None = None) -> str:
        """The ``run`` field of one run's records (the Spark report keys on run + system):
        ``<run>-<condition>``, and ``<run>-<condition>-n<nodes>-r<rate>`` in a sweep."""
        c = self._combination(combination)
        name = f"{self.run}-{condition}"
        return f"{name}-{c.label}" if self.sweep and c is not None else name
