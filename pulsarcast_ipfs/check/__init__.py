"""The checker (``pulsarcast check``, docs/faults.md "The checker"): a real cluster
under a seeded random nemesis, publishers at mixed acknowledgement levels, and a
Jepsen-style verdict per level — lost, duplicated, unexpected, causal-order
violations, the fate of calls without an answer — with the resource curves::

    outcome = await run_check(CheckConfig(out=Path("runs/check1"), nodes=5, duration=180))
    print(render(outcome)); assert outcome.ok

:func:`analyse` is the pure verdict, usable on recorded calls and reads.
"""

from __future__ import annotations

from pulsarcast_ipfs.check._analysis import (
    CheckReport,
    LevelReport,
    NodeRead,
    PublishCall,
    analyse,
    payload_key,
)
from pulsarcast_ipfs.check._nemesis import FAULT_KINDS, FaultRecord, Liveness, Nemesis
from pulsarcast_ipfs.check._publishers import Publishers, ack_value
from pulsarcast_ipfs.check._resources import ResourceSampler, Sample, plot, summarise
from pulsarcast_ipfs.check._runner import CheckConfig, CheckOutcome, render, run_check

__all__ = [
    "FAULT_KINDS",
    "CheckConfig",
    "CheckOutcome",
    "CheckReport",
    "FaultRecord",
    "LevelReport",
    "Liveness",
    "Nemesis",
    "NodeRead",
    "PublishCall",
    "Publishers",
    "ResourceSampler",
    "Sample",
    "ack_value",
    "analyse",
    "payload_key",
    "plot",
    "render",
    "run_check",
    "summarise",
]
