"""The Pulsarcast simulator: real protocol nodes on the core's in-process network
driver (:class:`~pulsarcast_ipfs.core.NetDriver`) with a virtual clock.

See ``docs/simulator.md`` and the theory of operation in :mod:`._runner`.
"""

from __future__ import annotations

from pulsarcast_ipfs.core import EventHeap, make_peer_ids, make_signers, substream

from ._attack import ATTACKS, Attacker, AttackSpec, parse_attack
from ._network import RoutingTables
from ._runner import T0, SimConfig, SimNode, Simulation, SimulationError, run_simulation
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
    "ATTACKS",
    "T0",
    "AttackSpec",
    "Attacker",
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
    "make_signers",
    "parse_attack",
    "parse_crashes",
    "parse_duration",
    "parse_fraction",
    "parse_latency",
    "run_simulation",
    "substream",
]
