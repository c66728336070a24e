"""Small real benchmark runs: Kubo daemons (and sidecars) started by the runner."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import psutil
import pytest

from pulsarcast_ipfs.bench import (
    BenchConfig,
    BenchProgress,
    Combination,
    Latency,
    build_schedule,
    iter_records,
    load_bench_workload,
    run_bench,
    summarise_run,
    write_summary,
)
from pulsarcast_ipfs.records import validate_record

pytestmark = [pytest.mark.anyio, pytest.mark.kubo, pytest.mark.cluster]


class Watch(BenchProgress):
    """Remembers the stages seen and how far publishing went."""

    def __init__(self, cancel_after: int | None = None) -> None:
        self.stages: list[str] = []
        self.combinations: list[tuple[Combination, int, int]] = []
        self.runs: list[tuple[str, str, int, int]] = []
        self.published = 0
        self.joins: list[tuple[int, int]] = []
        self.cancel_after = cancel_after
        self.reached = anyio.Event()

    def combination_started(self, combination: Combination, index: int, total: int) -> None:
        self.combinations.append((combination, index, total))

    def run_started(self, system: str, condition: str, index: int, total: int) -> None:
        self.runs.append((system, condition, index, total))

    def stage(self, text: str) -> None:
        self.stages.append(text)

    def joining(self, ready: int, total: int) -> None:
        self.joins.append((ready, total))

    def publishing(self, done: int, total: int) -> None:
        self.published = done
        if self.cancel_after is not None and done >= self.cancel_after:
            self.reached.set()


async def test_gossipsub_run_writes_valid_records(tmp_path: Path) -> None:
    cfg = BenchConfig(
        systems=("gossipsub",),
        conditions=("normal",),
        nodes=(4,),
        rates=(15.0,),
        events=30,
        grace=3.0,
        settle=2.0,
        sample_interval=2.0,
        out=tmp_path / "b",
        run="t1",
    )
    watch = Watch()
    result = await run_bench(cfg, progress=watch)
    assert result.ok, result.runs
    run_dir = cfg.run_dir("gossipsub", "normal")
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["kubo_version"] and meta["nodes"] == 4 and meta["status"] == "ok"
    assert meta["machine"]["nproc"] >= 1 and meta["events"] == 30
    kinds: dict[str, int] = {}
    for rec in iter_records(run_dir):
        assert rec is not None
        kind = validate_record(rec)
        assert rec["system"] == "gossipsub" and rec["run"] == "t1-normal"
        kinds[kind.value] = kinds.get(kind.value, 0) + 1
    schedule = build_schedule(load_bench_workload("25k"), nodes=4, rate=15.0, events=30)
    assert kinds["event_injected"] == kinds["event_published"] == 30
    assert kinds["subscribed"] == sum(len(s) for s in schedule.subscriptions)
    assert kinds["resource_sample"] >= 8  # at least a first and a last sample per node
    s = summarise_run(run_dir)
    assert s.expected_published == schedule.expected_deliveries()
    assert s.coverage_published is not None and 0 < s.received <= s.expected_published
    assert s.wire_bytes is not None and s.wire_bytes > 0
    assert s.wire_bytes_pubsub is not None and s.wire_bytes_pubsub > 0
    assert watch.published == 30
    print(
        f"gossipsub 4 nodes, 30 events: coverage {s.coverage_published:.4f}, "
        f"p50 {s.latency_p50}, bytes/delivery {s.bytes_per_delivery}"
    )


async def test_sweep_runs_every_combination(tmp_path: Path) -> None:
    """Two rates on one small cluster size, one run directory and
    one run id per combination, progress per combination, the knee in bench.json."""
    cfg = BenchConfig(
        systems=("gossipsub",),
        conditions=("normal",),
        nodes=(3,),
        rates=(5.0, 10.0),
        events=10,
        grace=2.0,
        settle=1.0,
        sample_interval=2.0,
        out=tmp_path / "b",
        run="t5",
    )
    watch = Watch()
    result = await run_bench(cfg, progress=watch)
    assert result.ok, result.runs
    assert [(c.rate, i, n) for c, i, n in watch.combinations] == [(5.0, 0, 2), (10.0, 1, 2)]
    assert [(r[2], r[3]) for r in watch.runs] == [(0, 2), (1, 2)]
    assert sorted(p.name for p in cfg.out.iterdir() if p.is_dir()) == [
        "gossipsub-normal-n3-r10",
        "gossipsub-normal-n3-r5",
    ]
    for rate in (5.0, 10.0):
        run_dir = cfg.run_dir("gossipsub", "normal", Combination(nodes=3, rate=rate))
        meta = json.loads((run_dir / "run.json").read_text())
        assert (meta["nodes"], meta["rate"], meta["status"]) == (3, rate, "ok")
        runs = {rec["run"] for rec in iter_records(run_dir) if rec is not None}
        assert runs == {f"t5-normal-n3-r{rate:g}"}
        s = summarise_run(run_dir)
        assert s.rate == rate and s.cpu_us_per_delivery is not None
    text = write_summary(cfg.out)
    assert "### 3 nodes, 5 events/s" in text and "### 3 nodes, 10 events/s" in text
    doc = json.loads((cfg.out / "bench.json").read_text())
    assert doc["config"]["rates"] == [5.0, 10.0]
    (knee,) = doc["knees"]
    assert (knee["system"], knee["nodes"]) == ("gossipsub", 3)
    assert [r["rate"] for r in knee["rates"]] == [5.0, 10.0]


async def test_cancel_tears_everything_down(tmp_path: Path) -> None:
    cfg = BenchConfig(
        systems=("floodsub",),
        conditions=("normal",),
        nodes=(3,),
        rates=(2.0,),
        events=100,
        grace=1.0,
        settle=0.5,
        out=tmp_path / "b",
        run="t2",
    )
    watch = Watch(cancel_after=3)
    with anyio.move_on_after(60) as scope:
        async with anyio.create_task_group() as tg:

            async def cancel_when_publishing() -> None:
                await watch.reached.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(cancel_when_publishing)
            await run_bench(cfg, progress=watch)
    assert not scope.cancelled_caught, "publishing never started"
    meta = json.loads((cfg.run_dir("floodsub", "normal") / "run.json").read_text())
    assert meta["status"] == "aborted"
    assert 3 <= meta["publications_completed"] < 100
    pids = meta["pids"]
    assert len(pids) == 3 and all(p > 0 for p in pids)
    for pid in pids:  # every daemon the run started is gone (or at most a reaped zombie)
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie"


async def test_latency_condition_delays_every_hop(tmp_path: Path) -> None:
    cfg = BenchConfig(
        systems=("gossipsub",),
        conditions=("latency",),
        nodes=(3,),
        rates=(10.0,),
        events=10,
        grace=4.0,
        settle=2.0,
        latency=Latency(ms=300, jitter=0),
        out=tmp_path / "b",
        run="t4",
    )
    result = await run_bench(cfg)
    assert result.ok, result.runs
    run_dir = cfg.run_dir("gossipsub", "latency")
    publisher: dict[str, str] = {}
    delivered: list[tuple[str, str, float]] = []
    for rec in iter_records(run_dir):
        assert rec is not None
        if rec["kind"] == "event_published":
            publisher[rec["event"]] = rec["node"]
        elif rec["kind"] == "event_delivered":
            delivered.append((rec["node"], rec["event"], rec["latency"]))
    remote = [lat for node, ev, lat in delivered if publisher[ev] != node]
    assert remote, "no delivery crossed the network"
    # a toxic can only add delay: every delivery to another node took >= 300 ms
    assert min(remote) >= 0.3


@pytest.mark.slow
async def test_pulsarcast_run_collects_sidecar_records(tmp_path: Path) -> None:
    cfg = BenchConfig(
        systems=("pulsarcast",),
        conditions=("normal",),
        nodes=(3,),
        rates=(5.0,),
        events=10,
        grace=5.0,
        settle=1.0,
        sample_interval=2.0,
        out=tmp_path / "b",
        run="t3",
    )
    watch = Watch()
    result = await run_bench(cfg, progress=watch)
    assert result.ok, result.runs
    run_dir = cfg.run_dir("pulsarcast", "normal")
    # publishing began once every subscriber and publisher had joined its trees
    pairs = sum(
        len(t)
        for t in build_schedule(load_bench_workload("25k"), nodes=3, rate=5.0, events=10)
        .participants()
        .values()
    )
    assert watch.joins and watch.joins[-1] == (pairs, pairs)
    assert all(ready < pairs for ready, _ in watch.joins[:-1])
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["join_seconds"] >= 0
    # a failed publish call (none expected here) would be counted by reason
    assert sum(meta["publish_failures"].values()) == meta["errors"].get("publish", 0)
    assert list((run_dir / "sidecar").glob("t3-normal-*.jsonl"))
    systems = set()
    for rec in iter_records(run_dir):
        assert rec is not None
        systems.add(rec["system"])
    assert systems == {"pulsarcast"}
    s = summarise_run(run_dir)
    assert s.injected == 10
    assert s.rpc_sent_per_node is not None and s.rpc_sent_per_node > 0
    assert s.expected_published > 0 and s.coverage_published is not None
    # what each node keeps (pins) of each topic's history at the end
    kept = json.loads((run_dir / "retention.json").read_text())
    assert kept and all(r["events"] > 0 and r["bytes"] > 0 for r in kept)
    print(
        f"pulsarcast 3 nodes, 10 events: coverage {s.coverage_published:.4f} "
        f"(published {s.published}), p50 {s.latency_p50}"
    )
