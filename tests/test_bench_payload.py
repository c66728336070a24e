"""``pulsarcast bench --payload``: parsing the sizes, payloads of exactly that size
with the workload's timing and topics, the sweep layout, and the summary's payload
table. No cluster: runs are planted as :class:`RunSummary`."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from pulsarcast_ipfs.bench import (
    MAX_BENCH_PAYLOAD,
    BenchConfig,
    BenchError,
    Combination,
    RunSummary,
    build_schedule,
    frame_payload,
    load_bench_workload,
    parse_payload_sizes,
    payload_label,
    payload_table,
    set_document,
    set_report,
    unframe_payload,
)
from pulsarcast_ipfs.core import MAX_PAYLOAD_SIZE

EXE = Path(sys.executable).parent / "pulsarcast"


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("16k", (16384,)),
        ("1k,16k,64k,256k", (1024, 16384, 65536, 262144)),
        (" 2048 , 4KiB ,", (2048, 4096)),
        ("512K", (524288,)),
        ("2000b", (2000,)),
    ],
)
def test_parse_payload_sizes(text: str, want: tuple[int, ...]) -> None:
    assert parse_payload_sizes(text) == want


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("16q", "optional k or m suffix (e.g. 16k), got '16q'"),
        ("16k,x", "got 'x' (in '16k,x')"),
        ("-1k", "got '-1k'"),
        ("1.5k", "got '1.5k'"),
        ("512", "from 1k to 512k (Pulsarcast's payload limit), got '512'"),
        ("513k", "from 1k to 512k (Pulsarcast's payload limit), got '513k'"),
        ("1m", "from 1k to 512k"),
        ("16k,16384", "'16384' (in '16k,16384') is listed twice"),
        (" , ", "give at least one payload size"),
    ],
)
def test_parse_payload_sizes_names_the_bad_value(text: str, message: str) -> None:
    with pytest.raises(BenchError) as exc:
        parse_payload_sizes(text)
    assert message in str(exc.value)


def test_the_maximum_is_pulsarcasts_payload_limit() -> None:
    assert MAX_BENCH_PAYLOAD == MAX_PAYLOAD_SIZE == 512 * 1024
    assert payload_label(MAX_BENCH_PAYLOAD) == "512k"
    assert [payload_label(n) for n in (1024, 1536, 2**20)] == ["1k", "1536b", "1m"]


def test_config_refuses_a_size_out_of_range() -> None:
    with pytest.raises(BenchError, match="payload size must be"):
        BenchConfig(payloads=(MAX_PAYLOAD_SIZE + 1,))
    with pytest.raises(BenchError, match="each payload size once"):
        BenchConfig(payloads=(2048, 2048))


def test_payloads_have_exactly_the_size_and_the_workloads_timing() -> None:
    w = load_bench_workload("25k")
    plain = build_schedule(w, nodes=5, rate=5.0, events=30)
    sized = build_schedule(w, nodes=5, rate=5.0, events=30, payload=64 * 1024)
    assert [(e.node, e.topic, e.at, e.inject_id, e.attributes) for e in sized.events] == [
        (e.node, e.topic, e.at, e.inject_id, e.attributes) for e in plain.events
    ]
    for ev in sized.events:
        data = frame_payload(ev.inject_id, 1764000000.123456, ev.body, ev.size)
        assert len(data) == 64 * 1024
        assert unframe_payload(data) == (ev.inject_id, 1764000000.123456)
        # the record is there, then seeded filler: the same bytes every time
        assert data.split(b"\n", 1)[1].startswith(ev.body)
        assert data == frame_payload(ev.inject_id, 1764000000.123456, ev.body, ev.size)
    # without a size: header and record, as before
    ev = plain.events[0]
    assert ev.size is None
    assert frame_payload(ev.inject_id, 1.0, ev.body).endswith(b"\n" + ev.body)


def test_a_size_too_small_for_the_record_is_an_error() -> None:
    with pytest.raises(BenchError, match="no room"):
        frame_payload("x-1", 1.0, b"r" * 1010, 1024)


def test_payload_sizes_make_a_sweep(tmp_path: Path) -> None:
    one = BenchConfig(out=tmp_path, payloads=(16384,))
    assert not one.sweep
    assert one.run_dir("gossipsub", "normal", one.combinations()[0]) == (
        tmp_path / "gossipsub-normal"
    )
    cfg = BenchConfig(out=tmp_path, rates=(5.0,), nodes=(20,), payloads=(16384, 262144))
    assert cfg.sweep
    assert cfg.combinations() == (
        Combination(nodes=20, rate=5.0, payload=16384),
        Combination(nodes=20, rate=5.0, payload=262144),
    )
    c = cfg.combinations()[1]
    assert cfg.run_dir("floodsub", "normal", c) == tmp_path / "floodsub-normal-n20-r5-p256k"
    assert cfg.run_id("normal", c) == "bench-normal-n20-r5-p256k"
    assert Combination(nodes=20, rate=5.0).label == "n20-r5"


def _summary(system: str, payload: int | None, *, bytes_: float, p50: float) -> RunSummary:
    return RunSummary(
        system=system,
        condition="normal",
        nodes=20,
        records=1,
        rejected=0,
        injected=10,
        published=10,
        deliveries=100,
        duplicates=0,
        expected_injected=100,
        expected_published=100,
        received=100,
        latency_p50=p50,
        latency_p95=2 * p50,
        latency_p99=2 * p50,
        latency_max=2 * p50,
        wire_bytes=bytes_ * 100,
        wire_bytes_pubsub=None,
        rate=5.0,
        payload=payload,
        status="ok",
    )


def test_summary_tables_bytes_and_latency_per_size_against_gossipsub() -> None:
    runs = [
        _summary("gossipsub", 16384, bytes_=100_000, p50=0.020),
        _summary("pulsarcast", 16384, bytes_=30_000, p50=0.010),
        _summary("floodsub", 262144, bytes_=2_000_000, p50=0.100),
        _summary("gossipsub", 262144, bytes_=1_000_000, p50=0.050),
    ]
    table = payload_table(runs)
    rows = [line for line in table.splitlines() if line.startswith("| 16k") or "256k" in line]
    assert rows == [
        "| 16k | 20 | 5 | pulsarcast | normal | 100.00 % | 10 / 20 | 30,000 | 0.30× "
        "| 0.50× / 0.50× |",
        "| 16k | 20 | 5 | gossipsub | normal | 100.00 % | 20 / 40 | 100,000 | 1.00× "
        "| 1.00× / 1.00× |",
        "| 256k | 20 | 5 | gossipsub | normal | 100.00 % | 50 / 100 | 1,000,000 | 1.00× "
        "| 1.00× / 1.00× |",
        "| 256k | 20 | 5 | floodsub | normal | 100.00 % | 100 / 200 | 2,000,000 | 2.00× "
        "| 2.00× / 2.00× |",
    ]
    text = set_report(runs)
    heads = [line for line in text.splitlines() if line.startswith("### ")]
    assert heads == [
        "### 20 nodes, 5 events/s, payload 16k",
        "### 20 nodes, 5 events/s, payload 256k",
        "### Payload sizes",
        "### Knee",
    ]
    # knees per payload size: never one rate list mixing two sizes
    assert "| gossipsub | 20 (16k) |" in text and "| gossipsub | 20 (256k) |" in text
    doc = json.loads(json.dumps(set_document(runs)))
    assert sorted(r["payload"] for r in doc["runs"]) == [16384, 16384, 262144, 262144]
    assert {(k["system"], k["payload"]) for k in doc["knees"]} >= {
        ("gossipsub", 16384),
        ("gossipsub", 262144),
    }


def test_small_ratios_keep_two_significant_digits() -> None:
    runs = [
        _summary("gossipsub", 16384, bytes_=100_000, p50=7.38),
        _summary("pulsarcast", 16384, bytes_=18_565, p50=0.008),
    ]
    assert "| 0.19× | 0.0011× / 0.0011× |" in payload_table(runs)


def test_summary_without_sizes_has_no_payload_table() -> None:
    run = _summary("gossipsub", None, bytes_=1000, p50=0.01)
    assert payload_table([run]) == ""
    assert "Payload sizes" not in set_report([run])
    assert "payload" not in set_report([dataclasses.replace(run, rate=20.0), run]).lower()


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(EXE), "bench", *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("16k,abc", "got 'abc' (in '16k,abc')"),
        ("2m", "from 1k to 512k (Pulsarcast's payload limit), got '2m'"),
    ],
)
def test_cli_rejects_a_bad_payload_in_one_line(tmp_path: Path, value: str, message: str) -> None:
    res = _cli("--payload", value, "--out", "out", cwd=tmp_path)
    assert res.returncode == 1, res
    assert res.stderr.strip().splitlines() == [f"Error: {res.stderr.strip()[7:]}"]
    assert message in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "out").exists()


def test_cli_help_shows_the_payload_option() -> None:
    res = subprocess.run(
        [str(EXE), "bench", "--help"], capture_output=True, text=True, check=True, timeout=60
    )
    assert "--payload SIZES" in res.stdout
    assert "--payload 16k,64k,256k" in res.stdout
