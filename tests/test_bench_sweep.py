"""Benchmark sweeps: ``--rate``/``--nodes`` lists, the run layout
of a sweep, each system's knee, the CPU cost per delivery, ``summary.md`` and
``bench.json``. No cluster: runs are planted as records or as :class:`RunSummary`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pulsarcast_ipfs.bench import (
    DEFAULT_NODES,
    DEFAULT_RATE,
    KNEE_P99_SECONDS,
    BenchConfig,
    BenchError,
    Combination,
    RecordWriter,
    RunSummary,
    knee_table,
    knees,
    parse_node_counts,
    parse_rates,
    rate_label,
    set_document,
    set_report,
    shortfall,
    summarise_set,
    sustained,
    write_summary,
)
from pulsarcast_ipfs.records import RecordKind

EXE = Path(sys.executable).parent / "pulsarcast"

# --- parsing ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("50", (50.0,)),
        ("2.5", (2.5,)),
        ("5,20,50,100", (5.0, 20.0, 50.0, 100.0)),
        (" 5 , 20 ,", (5.0, 20.0)),
        ("1e2", (100.0,)),
    ],
)
def test_parse_rates(text: str, want: tuple[float, ...]) -> None:
    assert parse_rates(text) == want


@pytest.mark.parametrize(
    ("text", "bad"),
    [
        ("0", "'0'"),
        ("-5", "'-5'"),
        ("fast", "'fast'"),
        ("5,abc,50", "'abc' (in '5,abc,50')"),
        ("5,nan", "'nan'"),
        ("inf", "'inf'"),
    ],
)
def test_parse_rates_names_the_bad_value(text: str, bad: str) -> None:
    with pytest.raises(BenchError, match="positive number of events per second") as exc:
        parse_rates(text)
    assert bad in str(exc.value)


@pytest.mark.parametrize("text", ["", ",", " , "])
def test_parse_rates_needs_one(text: str) -> None:
    with pytest.raises(BenchError, match="at least one rate"):
        parse_rates(text)


def test_parse_node_counts() -> None:
    assert parse_node_counts("20") == (20,)
    assert parse_node_counts("20,50") == (20, 50)
    for text, bad in (("0", "'0'"), ("2.5", "'2.5'"), ("20,201", "'201' (in '20,201')")):
        with pytest.raises(BenchError, match=r"whole number in 1\.\.200") as exc:
            parse_node_counts(text)
        assert bad in str(exc.value)
    with pytest.raises(BenchError, match="at least one node count"):
        parse_node_counts("")


def test_rate_label() -> None:
    assert [rate_label(r) for r in (50.0, 2.5, 0.1, 100.0)] == ["50", "2.5", "0.1", "100"]


# --- configuration and layout ------------------------------------------------------


def test_default_rate_and_cluster_are_named_constants() -> None:
    cfg = BenchConfig()
    assert cfg.rates == (DEFAULT_RATE,) and cfg.nodes == (DEFAULT_NODES,)
    assert not cfg.sweep


def test_single_combination_keeps_todays_layout(tmp_path: Path) -> None:
    cfg = BenchConfig(nodes=(20,), rates=(50.0,), out=tmp_path, run="b1")
    (only,) = cfg.combinations()
    assert only == Combination(nodes=20, rate=50.0)
    assert cfg.run_dir("gossipsub", "normal") == tmp_path / "gossipsub-normal"
    assert cfg.run_dir("gossipsub", "normal", only) == tmp_path / "gossipsub-normal"
    assert cfg.run_id("normal") == cfg.run_id("normal", only) == "b1-normal"


def test_sweep_layout_names_nodes_and_rate(tmp_path: Path) -> None:
    cfg = BenchConfig(nodes=(20, 50), rates=(5.0, 2.5), out=tmp_path, run="b1")
    assert cfg.sweep
    assert [c.label for c in cfg.combinations()] == ["n20-r5", "n20-r2.5", "n50-r5", "n50-r2.5"]
    c = Combination(nodes=50, rate=2.5)
    assert cfg.run_dir("pulsarcast", "latency", c) == tmp_path / "pulsarcast-latency-n50-r2.5"
    # the Spark report keys on (run, system): every combination needs its own run id
    assert cfg.run_id("latency", c) == "b1-latency-n50-r2.5"
    with pytest.raises(BenchError, match="combination"):
        cfg.run_dir("pulsarcast", "latency")
    assert BenchConfig(rates=(5.0, 20.0)).sweep and BenchConfig(nodes=(3, 4)).sweep


# --- the knee ----------------------------------------------------------------------


def _summary(
    system: str,
    rate: float | None,
    *,
    nodes: int = 20,
    condition: str = "normal",
    p99: float | None = 0.1,
    received: int = 100,
    expected: int = 100,
    scheduled: int | None = None,
    status: str | None = "ok",
    delay: float | None = 0.05,
) -> RunSummary:
    return RunSummary(
        system=system,
        condition=condition,
        nodes=nodes,
        records=1,
        rejected=0,
        injected=10,
        published=10,
        deliveries=received,
        duplicates=0,
        expected_injected=expected,
        expected_published=expected,
        received=received,
        latency_p50=None if p99 is None else p99 / 2,
        latency_p95=p99,
        latency_p99=p99,
        latency_max=p99,
        wire_bytes=None,
        wire_bytes_pubsub=None,
        status=status,
        expected_scheduled=scheduled,
        rate=rate,
        max_publish_delay=delay,
    )


def test_sustained_needs_p99_under_the_bound_and_every_delivery() -> None:
    assert sustained(_summary("gossipsub", 5.0))
    assert shortfall(_summary("gossipsub", 5.0, p99=0.249)) is None
    # "under 250 ms": 250 ms itself is not
    assert shortfall(_summary("gossipsub", 5.0, p99=KNEE_P99_SECONDS)) == "p99 250 ms"
    assert shortfall(_summary("gossipsub", 5.0, p99=None)) == "p99 n/a ms"
    assert shortfall(_summary("gossipsub", 5.0, received=99)) == "coverage 99.00 %"
    # a node whose records were lost: the schedule expected more than the records
    assert shortfall(_summary("gossipsub", 5.0, scheduled=110)) == "coverage 90.91 %"
    assert shortfall(_summary("gossipsub", 5.0, received=0, expected=0)) == ("no delivery expected")
    assert shortfall(_summary("gossipsub", 5.0, status="failed")) == "run failed"
    assert shortfall(_summary("gossipsub", 5.0, status=None)) is None  # no run.json status


def test_knee_of_monotone_results() -> None:
    runs = [
        _summary("gossipsub", 5.0),
        _summary("gossipsub", 20.0),
        _summary("gossipsub", 50.0, p99=0.4),  # the p99 bound is crossed here
        _summary("gossipsub", 100.0, p99=1.2, received=90),
        _summary("floodsub", 5.0, received=95),  # incomplete coverage at the lowest rate
        _summary("floodsub", 20.0, received=98),
        _summary("pulsarcast", 20.0, delay=0.2),  # every rate sustained
        _summary("pulsarcast", 5.0),
    ]
    by = {k.system: k for k in knees(runs)}
    assert [k.system for k in knees(runs)] == ["pulsarcast", "gossipsub", "floodsub"]
    g = by["gossipsub"]
    assert [r.rate for r in g.rates] == [5.0, 20.0, 50.0, 100.0]
    assert (g.knee, g.at_max, g.label(), g.sustained_above) == (20.0, False, "20", ())
    assert [r.shortfall for r in g.rates] == [None, None, "p99 400 ms", "coverage 90.00 %"]
    f = by["floodsub"]
    assert (f.knee, f.label(), f.knee_publish_delay) == (None, "none", None)
    p = by["pulsarcast"]
    assert (p.knee, p.at_max, p.label(), p.knee_publish_delay) == (20.0, True, "≥ 20", 0.2)


def test_knee_of_non_monotone_results_stops_at_the_first_failure() -> None:
    """A rate sustained above one that was not (a loaded machine during one run)
    does not raise the knee: it and every lower rate tested must be sustained."""
    runs = [
        _summary("gossipsub", 100.0),
        _summary("gossipsub", 5.0),
        _summary("gossipsub", 20.0, received=99),
        _summary("gossipsub", 50.0),
    ]
    (k,) = knees(runs)
    assert (k.knee, k.at_max, k.sustained_above) == (5.0, False, (50.0, 100.0))
    table = knee_table([k])
    assert "| gossipsub | 20 | 5 | 5 ✓, 20 ✗ coverage 99.00 %, 50 ✓, 100 ✓ | 0.05 |" in table
    assert "gossipsub, 20 nodes: 50, 100 events/s sustained above a rate that was not" in table


def test_knee_per_node_count_from_normal_runs_only() -> None:
    runs = [
        _summary("gossipsub", 5.0, nodes=20),
        _summary("gossipsub", 20.0, nodes=20),
        _summary("gossipsub", 5.0, nodes=50),
        _summary("gossipsub", 20.0, nodes=50, p99=0.3),
        _summary("gossipsub", 50.0, nodes=20, condition="latency", p99=0.9),
        _summary("gossipsub", None, nodes=20),  # no rate in run.json: not a sweep point
    ]
    assert [(k.nodes, k.label()) for k in knees(runs)] == [(20, "≥ 20"), (50, "5")]
    assert knees([_summary("gossipsub", 5.0, condition="latency")]) == []
    assert knee_table([]) == ""


def test_a_rate_run_twice_counts_its_completed_runs() -> None:
    """A start-up failure measured nothing: a re-run at the same rate decides; a rate
    with no completed run is not sustained."""
    runs = [
        _summary("pulsarcast", 5.0, status="failed", p99=None, received=0),
        _summary("pulsarcast", 5.0),
        _summary("pulsarcast", 20.0, status="aborted"),
        _summary("gossipsub", 5.0),
        _summary("gossipsub", 5.0, p99=0.3, delay=0.4),
    ]
    by = {k.system: k for k in knees(runs)}
    assert by["pulsarcast"].knee == 5.0
    assert by["pulsarcast"].rates[1].shortfall == "run aborted"
    assert by["gossipsub"].knee is None  # one of its two completed runs missed the bound
    assert by["gossipsub"].rates[0].max_publish_delay == 0.4


# --- summary.md and bench.json -----------------------------------------------------


def test_set_report_has_a_table_per_combination_and_the_knees() -> None:
    runs = [
        _summary("gossipsub", 5.0),
        _summary("pulsarcast", 5.0, p99=0.6),
        _summary("gossipsub", 20.0, nodes=50),
        _summary("gossipsub", 20.0),
    ]
    text = set_report(runs)
    heads = [line for line in text.splitlines() if line.startswith("### ")]
    assert heads == [
        "### 20 nodes, 5 events/s",
        "### 20 nodes, 20 events/s",
        "### 50 nodes, 20 events/s",
        "### Knee",
    ]
    assert text.count("| system | condition | nodes |") == 3
    assert "| pulsarcast | 20 | none | 5 ✗ p99 600 ms | — |" in text
    assert "| gossipsub | 20 | ≥ 20 | 5 ✓, 20 ✓ | 0.05 |" in text
    assert "| gossipsub | 50 | ≥ 20 | 20 ✓ | 0.05 |" in text


def test_set_report_of_one_combination_is_todays_table_then_the_knee() -> None:
    runs = [_summary("gossipsub", 50.0), _summary("gossipsub", 50.0, condition="latency")]
    text = set_report(runs)
    assert text.startswith("| system | condition | nodes |")
    assert "###" not in text
    assert text.index("| gossipsub | normal |") < text.index("Knee: the highest rate")
    assert "| gossipsub | 20 | ≥ 50 | 50 ✓ | 0.05 |" in text


def test_set_document_is_the_same_data() -> None:
    runs = [_summary("gossipsub", 5.0), _summary("gossipsub", 20.0, p99=0.3)]
    doc = json.loads(json.dumps(set_document(runs)))
    assert doc["knee_rule"] == {
        "condition": "normal",
        "p99_under_seconds": 0.25,
        "every_expected_delivery": True,
        "every_lower_rate_sustained": True,
    }
    (k,) = doc["knees"]
    assert (k["system"], k["nodes"], k["knee"], k["at_max"], k["label"]) == (
        "gossipsub",
        20,
        5.0,
        False,
        "5",
    )
    assert [(r["rate"], r["sustained"], r["shortfall"]) for r in k["rates"]] == [
        (5.0, True, None),
        (20.0, False, "p99 300 ms"),
    ]
    assert [(r["rate"], r["shortfall"], r["complete"]) for r in doc["runs"]] == [
        (5.0, None, True),
        (20.0, "p99 300 ms", True),
    ]


def _plant_run(d: Path, *, system: str, nodes: int, rate: float, latency: float) -> None:
    """A two-node run directory: both nodes subscribe to topic t, one event, both
    deliver it with ``latency``; runner samples of Kubo at 0 s and 10 s."""
    d.mkdir(parents=True)
    (d / "run.json").write_text(
        json.dumps(
            {
                "system": system,
                "condition": "normal",
                "nodes": nodes,
                "rate": rate,
                "topics": ["t"],
                "expected_deliveries": 2,
                "status": "ok",
                "max_publish_delay": 0.01,
            }
        )
    )
    for n in "AB":
        w = RecordWriter(d / f"node-{n}.jsonl", run="r", system=system, node=n)
        w.write(RecordKind.SUBSCRIBED, {"topic": "t"}, ts=1.0)
        if n == "A":
            w.write(RecordKind.EVENT_INJECTED, {"topic": "t", "inject_id": "e1"}, ts=2.0)
            w.write(RecordKind.EVENT_PUBLISHED, {"topic": "t", "event": "e1"}, ts=2.0)
        w.write(
            RecordKind.EVENT_DELIVERED,
            {"topic": "t", "event": "e1", "latency": latency, "recovered": False},
            ts=2.0 + latency,
        )
        for ts, cpu in ((0.0, 1.0), (10.0, 1.5)):
            w.write(
                RecordKind.RESOURCE_SAMPLE,
                {
                    "process": "kubo",
                    "cpu_seconds": cpu,
                    "rss_bytes": 2**20,
                    "bw_total_in": 0,
                    "bw_total_out": 0,
                    "bw_protocols": {"/meshsub/1.3.0": {"in": 0, "out": 0}},
                },
                ts=ts,
            )
        w.close()


def test_write_summary_reads_both_layouts_and_fills_bench_json(tmp_path: Path) -> None:
    """A run set extended by a sweep: today's ``gossipsub-normal`` beside
    ``gossipsub-normal-n2-r5`` ...; bench.json keeps the runner's config."""
    (tmp_path / "bench.json").write_text(json.dumps({"config": {"run": "x"}, "machine": {}}))
    _plant_run(tmp_path / "gossipsub-normal", system="gossipsub", nodes=2, rate=50, latency=0.5)
    for rate, lat in ((5.0, 0.01), (20.0, 0.02)):
        d = tmp_path / f"gossipsub-normal-n2-r{rate_label(rate)}"
        _plant_run(d, system="gossipsub", nodes=2, rate=rate, latency=lat)
    assert len(summarise_set(tmp_path)) == 3
    text = write_summary(tmp_path)
    assert (tmp_path / "summary.md").read_text() == text
    assert "### 2 nodes, 50 events/s" in text
    assert "| gossipsub | 2 | 20 | 5 ✓, 20 ✓, 50 ✗ p99 500 ms | 0.01 |" in text
    doc = json.loads((tmp_path / "bench.json").read_text())
    assert doc["config"] == {"run": "x"}
    assert [k["knee"] for k in doc["knees"]] == [20.0]
    # CPU per delivery: 2 nodes × 0.5 Kubo CPU s ÷ 2 deliveries = 0.5 s = 500,000 µs
    assert [r["cpu_us_per_delivery"] for r in doc["runs"]] == [pytest.approx(500_000)] * 3
    assert not list(tmp_path.glob("*.tmp"))


# --- the CLI -----------------------------------------------------------------------


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
    ("option", "value", "message"),
    [
        ("--rate", "5,0,50", "rate must be a positive number of events per second, got '0'"),
        ("--rate", "abc", "events per second, got 'abc'"),
        ("--nodes", "20,x", "nodes must be a whole number in 1..200, got 'x'"),
        ("--rate", "5,5", "rate 5 is listed twice"),
    ],
)
def test_cli_rejects_a_bad_sweep_value(
    tmp_path: Path, option: str, value: str, message: str
) -> None:
    res = _cli(option, value, "--out", "out", cwd=tmp_path)
    assert res.returncode == 1, res
    assert "Error: " in res.stderr and message in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "out").exists()


def test_cli_help_shows_a_sweep() -> None:
    res = subprocess.run(
        [str(EXE), "bench", "--help"], capture_output=True, text=True, check=True, timeout=60
    )
    assert "--rate 5,20,50,100 --nodes 20,50" in res.stdout
    assert f"(default {rate_label(DEFAULT_RATE)})" in res.stdout
    assert "p99" in res.stdout and "250 ms" in res.stdout
