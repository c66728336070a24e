"""Small simulator runs on the real ``PulsarcastNode``: determinism, faults, restart."""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from pulsarcast_ipfs.sim import CrashSpec, SimConfig, SimSummary, Simulation, parse_latency
from pulsarcast_ipfs.workload import Workload, load_workload


@pytest.fixture(scope="module")
def workload() -> Workload:
    return load_workload()


def _run(workload: Workload, out: Path | None = None, **kw: Any) -> tuple[Simulation, SimSummary]:
    base: dict[str, Any] = {
        "nodes": 30,
        "topics": 5,
        "events": 40,
        "seed": 1,
        "rate": 10.0,
        "grace": 30.0,
        "latency": parse_latency("20ms..120ms"),
    }
    base.update(kw)
    sim = Simulation(SimConfig(**base), out=out, workload=workload)
    return sim, sim.run()


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.mark.slow
def test_same_seed_same_records_byte_for_byte(workload: Workload, tmp_path: Path) -> None:
    kw: dict[str, Any] = {"loss": 0.05, "crashes": (CrashSpec(at=1.0, count=3),)}
    _run(workload, tmp_path / "a", **kw)
    _run(workload, tmp_path / "b", **kw)
    _run(workload, tmp_path / "c", seed=2, **kw)
    a, b, c = (_sha(tmp_path / d / "records.jsonl") for d in "abc")
    assert a == b
    assert a != c
    sa, sb = (json.loads((tmp_path / d / "summary.json").read_text()) for d in "ab")
    sa.pop("wall_seconds")
    sb.pop("wall_seconds")
    assert sa == sb


def test_gzip_records_are_deterministic(workload: Workload, tmp_path: Path) -> None:
    for d in "ab":
        Simulation(
            SimConfig(nodes=10, topics=2, events=10, grace=5.0), out=tmp_path / d,
            gzip_records=True, workload=workload,
        ).run()  # fmt: skip
    a, b = (tmp_path / d / "records.jsonl.gz" for d in "ab")
    assert _sha(a) == _sha(b)
    assert gzip.decompress(a.read_bytes()).count(b"\n") > 10


def test_small_fault_free_run(workload: Workload) -> None:
    _, s = _run(workload)
    assert s.events_published == s.events_injected == 40
    assert s.coverage_published == 1.0 and s.duplicates == 0
    assert s.tree_depth_max >= 1 and s.fanout_max >= 1
    assert s.latency_p50 is not None and 0.02 <= s.latency_p50 <= s.latency_p99  # type: ignore[operator]


def test_crash_and_restart(workload: Workload) -> None:
    sim, s = _run(
        workload,
        crashes=(CrashSpec(at=1.0, fraction=0.2),),
        crash_roots=1,
        restart=5.0,
        grace=60.0,
    )
    assert s.crashed == 6 and s.restarted == 6 and s.crashed_roots == 1
    assert all(sim.alive) and all(n is not None for n in sim.nodes)
    # calls made while their node was down are skipped, not injected
    assert s.events_injected + s.events_skipped == 40


def test_a_restarted_node_resumes_from_its_subscription_time(workload: Workload) -> None:
    """The sidecar resumes a subscription with ``since`` = when it started (state.json),
    and suppresses re-deliveries with its delivery log. With ``since`` = the crash time
    (the simulator before), node 4 lost the 24 events it had received but held back for
    a lost parent (causal order) when it crashed: created before ``since``, they were
    history to its new incarnation (live coverage 1,176 / 1,200)."""
    sim, s = _run(
        workload,
        topics=None,
        seed=2,
        rate=50.0,
        latency=parse_latency("50ms"),
        loss=0.05,
        crashes=(CrashSpec(at=1.0, fraction=0.1),),
        restart=5.0,
        grace=30.0,
        rpc_records=False,
    )
    assert s.restarted == 3 and all(sim.alive)
    assert (s.live_delivered, s.live_expected) == (1200, 1200)
    assert s.duplicates == 0
    assert s.redelivered > 0  # what they had before the crash came again, suppressed
