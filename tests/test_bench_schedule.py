"""Unit tests of the benchmark's configuration, schedule, payloads and summary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pulsarcast_ipfs.bench import (
    BenchConfig,
    BenchError,
    Latency,
    RecordWriter,
    build_schedule,
    frame_payload,
    load_bench_workload,
    markdown_table,
    parse_latency,
    protocol_table,
    summarise_run,
    unframe_payload,
)
from pulsarcast_ipfs.records import RecordKind, validate_record
from pulsarcast_ipfs.workload import Workload


@pytest.fixture(scope="module")
def w25k() -> Workload:
    return load_bench_workload("25k")


def test_users_map_to_node_k_mod_n(w25k: Workload) -> None:
    s = build_schedule(w25k, nodes=7, rate=10.0, events=500)
    # node i holds users i, i+7, i+14, ...: the union of their subscriptions
    for i in range(7):
        want = {t for u in w25k.users[i::7] for t in u.subscriptions}
        assert set(s.subscriptions[i]) == want
    # topics are created by the node of the user the file names
    for t in s.topics:
        src = next(x for x in w25k.topics if x.name == t.name)
        assert t.creator == src.creator % 7


def test_events_in_internal_id_order_at_rate(w25k: Workload) -> None:
    s = build_schedule(w25k, nodes=20, rate=40.0, events=1000)
    assert len(s.events) == 1000
    ids = [int(e.inject_id.split("-")[1]) for e in s.events]
    assert ids == sorted(ids)
    assert [e.at for e in s.events[:3]] == [0.0, 0.025, 0.05]
    assert s.duration == pytest.approx(999 / 40.0)
    assert len({e.inject_id for e in s.events}) == 1000
    # the publishing node holds the event's user
    by_name = {u.name: u.index for u in w25k.users}
    full = w25k.scale(nodes=20, events=1000)
    for e, p in zip(s.events, full.publications, strict=True):
        assert e.node == by_name[p.user] % 20


def test_schedule_is_deterministic_and_seeded(w25k: Workload) -> None:
    a = build_schedule(w25k, nodes=10, rate=5.0, events=50, seed=3)
    b = build_schedule(w25k, nodes=10, rate=5.0, events=50, seed=3)
    c = build_schedule(w25k, nodes=10, rate=5.0, events=50, seed=4)
    assert a == b
    assert [e.body for e in a.events] != [e.body for e in c.events]
    assert all(200 <= len(e.body) <= 600 for e in a.events)


def test_expected_deliveries_counts_subscribers(w25k: Workload) -> None:
    s = build_schedule(w25k, nodes=5, rate=5.0, events=40)
    assert s.expected_deliveries() == sum(len(s.subscribers(e.topic)) for e in s.events)


def test_payload_frame_round_trip() -> None:
    data = frame_payload("12-3456", 1767225600.25, b"x" * 300)
    assert unframe_payload(data) == ("12-3456", 1767225600.25)
    assert data.endswith(b"x" * 300)
    for bad in (b"", b"no header", b'{"i":1,"t":2}\nbody', b'{"i":"a","t":true}\n', b"\xff\n"):
        with pytest.raises(BenchError):
            unframe_payload(bad)


@pytest.mark.parametrize(
    ("text", "ms", "jitter"),
    [("500ms±300ms", 500, 300), ("500+-300", 500, 300), ("250", 250, 0), ("100, 20", 100, 20)],
)
def test_parse_latency(text: str, ms: int, jitter: int) -> None:
    assert parse_latency(text) == Latency(ms=ms, jitter=jitter)


@pytest.mark.parametrize("text", ["", "fast", "500ms±", "-5", "100±300"])
def test_parse_latency_rejects(text: str) -> None:
    with pytest.raises(BenchError):
        parse_latency(text)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"systems": ("kafka",)}, "unknown system"),
        ({"systems": ()}, "at least one system"),
        ({"conditions": ("storm",)}, "unknown condition"),
        ({"nodes": (0,)}, "nodes"),
        ({"nodes": ()}, "node count"),
        ({"nodes": (3, 3)}, "node count 3 is listed twice"),
        ({"rates": (0.0,)}, "rate"),
        ({"rates": (float("inf"),)}, "rate"),
        ({"rates": (5.0, 5.0)}, "rate 5 is listed twice"),
        ({"events": 0}, "events"),
        ({"grace": -1.0}, "grace"),
        ({"run": "a b"}, "run name"),
    ],
)
def test_config_errors(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(BenchError, match=message):
        BenchConfig(**kwargs)  # type: ignore[arg-type]


def test_unknown_workload_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(BenchError, match="cannot read workload"):
        load_bench_workload(str(tmp_path / "missing.jsonl"))


def _write_run(d: Path) -> None:
    """Three nodes A, B, C on topic t (C subscribes late), one event published
    before C subscribed and two after; B misses one; a meta-topic publication."""
    d.mkdir()
    (d / "run.json").write_text(
        json.dumps({"system": "gossipsub", "condition": "normal", "nodes": 3, "topics": ["t"]})
    )
    w = {n: RecordWriter(d / f"node-{n}.jsonl", run="r", system="gossipsub", node=n) for n in "ABC"}
    sub = RecordKind.SUBSCRIBED
    w["A"].write(sub, {"topic": "t"}, ts=1.0)
    w["B"].write(sub, {"topic": "t"}, ts=1.0)
    w["C"].write(sub, {"topic": "t"}, ts=15.0)
    for ev, t in (("e1", 10.0), ("e2", 20.0), ("e3", 30.0)):
        w["A"].write(RecordKind.EVENT_INJECTED, {"topic": "t", "inject_id": ev}, ts=t)
        w["A"].write(RecordKind.EVENT_PUBLISHED, {"topic": "t", "event": ev}, ts=t)
    w["A"].write(RecordKind.EVENT_PUBLISHED, {"topic": "meta-t", "event": "m"}, ts=0.5)

    def deliver(n: str, ev: str, lat: float) -> None:
        w[n].write(
            RecordKind.EVENT_DELIVERED,
            {"topic": "t", "event": ev, "latency": lat, "recovered": False},
            ts=0.0,
        )

    for ev in ("e1", "e2", "e3"):
        deliver("A", ev, 0.001)
    deliver("B", "e1", 0.010)
    deliver("B", "e1", 0.011)  # a duplicate
    deliver("B", "e3", 0.030)
    deliver("C", "e2", 0.020)
    deliver("C", "e3", 0.040)
    for i, (n, (bi, bo)) in enumerate(
        {"A": (1000, 3000), "B": (2000, 1000), "C": (1000, 1000)}.items()
    ):
        w[n].write(
            RecordKind.RESOURCE_SAMPLE,
            {
                "process": "kubo",
                "cpu_seconds": 1.0,
                "rss_bytes": 100 * 2**20,
                "bw_total_in": 0,
                "bw_total_out": 0,
                "bw_protocols": {
                    "/meshsub/1.3.0": {"in": 0, "out": 0},
                    "/ipfs/lan/kad/1.0.0": {"in": 0, "out": 0},
                },
            },
            ts=0.0,
        )
        w[n].write(
            RecordKind.RESOURCE_SAMPLE,
            {
                "process": "kubo",
                "cpu_seconds": 1.0 + 10.0 * (i + 1),
                "rss_bytes": (200 + i) * 2**20,
                "bw_total_in": bi,
                "bw_total_out": bo,
                "bw_protocols": {
                    "/meshsub/1.3.0": {"in": bi // 2, "out": bo // 2},
                    "/ipfs/lan/kad/1.0.0": {"in": bi // 4, "out": bo // 4},
                },
            },
            ts=100.0,
        )
    for x in w.values():
        x.close()
    with open(d / "node-A.jsonl", "a") as f:
        f.write('{"v": 1, "kind": "nonsense"}\n')


def test_summary_definitions(tmp_path: Path) -> None:
    d = tmp_path / "gossipsub-normal"
    _write_run(d)
    for line in (d / "node-B.jsonl").read_text().splitlines():
        validate_record(json.loads(line))
    s = summarise_run(d)
    assert (s.injected, s.published, s.rejected) == (3, 3, 1)
    # expected: e1 -> A, B (C not yet subscribed); e2, e3 -> A, B, C
    assert s.expected_injected == s.expected_published == 8
    # received: A 3, B e1+e3, C e2+e3 = 7 (the duplicate counted once)
    assert s.received == 7
    assert s.duplicates == 1
    assert s.coverage_published == pytest.approx(7 / 8)
    assert s.latency_p50 == pytest.approx(0.010)
    assert s.latency_max == pytest.approx(0.040)
    # wire bytes = (sum in + sum out) / 2 = (4000 + 5000) / 2
    assert s.wire_bytes == 4500
    assert s.bytes_per_delivery == pytest.approx(4500 / 7)
    assert s.wire_bytes_pubsub == pytest.approx(2250)
    assert s.cpu_per_node == pytest.approx((0.1 + 0.2 + 0.3) / 3)
    # CPU per delivery: Kubo's (a baseline's) CPU seconds, whole cluster, ÷ received
    assert s.cpu_seconds_by_process == {"kubo": pytest.approx(10 + 20 + 30)}
    assert s.cpu_process == "kubo"
    assert s.cpu_us_per_delivery == pytest.approx(60 / 7 * 1e6)
    assert s.rss_max_per_node == 202 * 2**20
    assert s.rpc_sent_per_node is None
    assert [t.topic for t in s.topics] == ["t"]
    table = markdown_table([s])
    assert "| gossipsub | normal | 3 | 3 | 3 | 87.50 % | 87.50 % |" in table


def test_summary_flags_a_node_without_records_and_tables_protocols(tmp_path: Path) -> None:
    d = tmp_path / "gossipsub-normal"
    _write_run(d)
    s = summarise_run(d)
    assert s.expected_scheduled is None
    assert "schedule expects" not in markdown_table([s])
    # A fourth node D was scheduled to receive all three events but wrote nothing.
    meta = json.loads((d / "run.json").read_text())
    meta["expected_deliveries"] = 8 + 3
    (d / "run.json").write_text(json.dumps(meta))
    s = summarise_run(d)
    assert (s.expected_injected, s.expected_scheduled) == (8, 11)
    table = markdown_table([s])
    assert "the schedule expects 11 deliveries, the records 8" in table
    assert "received ÷ scheduled = 63.64 %" in table
    by_proto = protocol_table([s])
    assert "`/meshsub/1.3.0`" in by_proto
    assert "| gossipsub | normal | 0.00 | 0.00 |" in by_proto  # 4,500 B, 2,250 B


def test_summary_counts_bytes_from_the_runners_sample_series(tmp_path: Path) -> None:
    """A sidecar's own Kubo samples (its protocol only, on its own schedule) must
    not move the window the bytes are counted over."""
    d = tmp_path / "gossipsub-normal"
    _write_run(d)
    side = RecordWriter(d / "sidecar-A.jsonl", run="r", system="gossipsub", node="A")
    side.write(
        RecordKind.RESOURCE_SAMPLE,
        {
            "process": "kubo",
            "cpu_seconds": 0.5,
            "rss_bytes": 2**20,
            "bw_total_in": 10**6,
            "bw_total_out": 10**6,
            "bw_protocols": {"/x/pulsarcast/1.0.0": {"in": 10**6, "out": 10**6}},
        },
        ts=200.0,
    )
    side.close()
    s = summarise_run(d)
    assert s.wire_bytes == 4500
    assert s.wire_bytes_by_protocol == {
        "/ipfs/lan/kad/1.0.0": pytest.approx(1125),
        "/meshsub/1.3.0": pytest.approx(2250),
    }
    # nor the window CPU is counted over (its sample at 200 s, 0.5 CPU s, is outside)
    assert s.cpu_seconds_by_process == {"kubo": pytest.approx(60)}
    assert s.cpu_per_node == pytest.approx((0.1 + 0.2 + 0.3) / 3)


def test_summary_cpu_per_delivery_is_the_sidecars_for_pulsarcast(tmp_path: Path) -> None:
    """For Pulsarcast the dissemination process is the sidecar: its CPU seconds
    between the runner's first and last sample (both at the Kubo sample's ``ts``),
    not the sidecar's own samples from before the runner's first."""
    d = tmp_path / "pulsarcast-normal"
    _write_run(d)
    meta = json.loads((d / "run.json").read_text())
    meta["system"] = "pulsarcast"
    (d / "run.json").write_text(json.dumps(meta))
    for n in "ABC":
        runner = RecordWriter(d / f"node-{n}.jsonl", run="r", system="pulsarcast", node=n)
        for ts, cpu in ((0.0, 2.0), (100.0, 2.7)):
            runner.write(
                RecordKind.RESOURCE_SAMPLE,
                {"process": "sidecar", "cpu_seconds": cpu, "rss_bytes": 2**20},
                ts=ts,
            )
        runner.close()
        own = RecordWriter(d / "sidecar" / f"r-{n}.jsonl", run="r", system="pulsarcast", node=n)
        own.write(  # the sidecar's own sample, at its start: outside the window
            RecordKind.RESOURCE_SAMPLE,
            {"process": "sidecar", "cpu_seconds": 0.5, "rss_bytes": 2**20},
            ts=-20.0,
        )
        own.close()
    s = summarise_run(d)
    assert s.system == "pulsarcast" and s.cpu_process == "sidecar"
    assert s.cpu_seconds_by_process["sidecar"] == pytest.approx(3 * 0.7)
    assert s.cpu_us_per_delivery == pytest.approx(3 * 0.7 / 7 * 1e6)
    assert "| 300,000 (sidecar) |" in markdown_table([s])


def _ordered_run(d: Path, parents: dict[str, str | None], order: dict[str, list[str]]) -> None:
    d.mkdir()
    (d / "run.json").write_text(
        json.dumps(
            {"system": "pulsarcast-ordered", "condition": "normal", "nodes": 2, "topics": ["t"]}
        )
    )
    w = {
        n: RecordWriter(d / f"node-{n}.jsonl", run="r", system="pulsarcast-ordered", node=n)
        for n in order
    }
    for n in order:
        w[n].write(RecordKind.SUBSCRIBED, {"topic": "t"}, ts=1.0)
    for i, (ev, parent) in enumerate(parents.items()):
        w["A"].write(
            RecordKind.EVENT_PUBLISHED, {"topic": "t", "event": ev, "parent": parent}, ts=10.0 + i
        )
    for n, seq in order.items():
        for i, ev in enumerate(seq):
            w[n].write(
                RecordKind.EVENT_DELIVERED,
                {"topic": "t", "event": ev, "latency": 0.01, "recovered": False},
                ts=20.0 + i,
            )
    for x in w.values():
        x.close()


def test_summary_checks_one_chain_per_topic(tmp_path: Path) -> None:
    chain = {"e1": None, "e2": "e1", "e3": "e2"}
    _ordered_run(tmp_path / "a", chain, {"A": ["e1", "e2", "e3"], "B": ["e1", "e3", "e2"]})
    s = summarise_run(tmp_path / "a")
    assert (s.chain_forks, s.chain_out_of_order, s.chain_sequences) == (0, 1, 2)
    assert "0 forked events, 1 of 2 subscribers' sequences out of chain order" in (
        markdown_table([s])
    )
    forked = {"e1": None, "e2": "e1", "e3": "e1"}  # two events on one parent
    _ordered_run(tmp_path / "b", forked, {"A": ["e1", "e2", "e3"], "B": ["e1", "e3", "e2"]})
    s = summarise_run(tmp_path / "b")
    assert (s.chain_forks, s.chain_sequences) == (1, 0)  # no chain order to check


def test_summary_counts_fast_delivery_paths(tmp_path: Path) -> None:
    """``pulsarcast-fast``: the first copy's ``path`` of each delivery is counted, with
    each path's p99, and the table notes it."""
    d = tmp_path / "pulsarcast-fast-normal"
    _write_run(d)
    w = RecordWriter(d / "node-D.jsonl", run="r", system="pulsarcast-fast", node="D")
    for ev, lat, path in (("e1", 0.05, "group"), ("e2", 0.09, "helper"), ("e3", 0.2, "tree")):
        w.write(
            RecordKind.EVENT_DELIVERED,
            {"topic": "t", "event": ev, "latency": lat, "recovered": False, "path": path},
            ts=0.0,
        )
    w.close()
    s = summarise_run(d)
    assert s.delivery_paths == {"group": 1, "helper": 1, "tree": 1}
    assert s.path_p99 == {"group": 0.05, "helper": 0.09, "tree": 0.2}
    assert "first copy by group 1 (p99 50" in markdown_table([s])
