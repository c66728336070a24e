"""The Pulsarcast simulator: real protocol nodes on an event heap with a virtual clock.

See ``docs/simulator.md`` and the theory of operation in :mod:`._runner`.
"""

from __future__ import annotations

from ._engine import EventHeap, SimulationError, substream
from ._network import RoutingTables, make_peer_ids
from ._runner import T0, SimConfig, SimNode, Simulation, run_simulation
from ._spec import (
    CrashSpec,
    LatencySpec,
    SpecError,
    parse_crashes,
    parse_duration,
    parse_fraction,
    parse_latency,
)
from ._stats import RunStats, SimSummary

__all__ = [
    "T0",
    "CrashSpec",
    "EventHeap",
    "LatencySpec",
    "RoutingTables",
    "RunStats",
    "SimConfig",
    "SimNode",
    "SimSummary",
    "Simulation",
    "SimulationError",
    "SpecError",
    "make_peer_ids",
    "parse_crashes",
    "parse_duration",
    "parse_fraction",
    "parse_latency",
    "run_simulation",
    "substream",
]
