"""``pulsarcast report --master spark://…`` on a standalone Spark cluster (a master and
one worker started from the pyspark installation, on loopback) gives the same tables
as local mode; the cluster reads the Parquet dataset ``pulsarcast collect`` wrote
from the records that local mode reads as JSON lines."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq
import pytest

from pulsarcast_ipfs.cluster._ports import free_port
from pulsarcast_ipfs.collect import Collector
from pulsarcast_ipfs.testing import SPARK_TEST_JVM_OPTIONS, RecordSources, records_r1

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(900)]

TABLES = ("topics", "runs", "latency", "rpc_summary", "rpc_topics", "deliveries")
"""The report's tables compared (``OUT/tables/NAME``)."""


def _spark_class() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-class"


@pytest.fixture(scope="module")
def conf_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``spark-defaults.conf``: a few shuffle partitions (Spark's 200 are one task each
    on the worker's one core), drivers and executors with :data:`SPARK_TEST_JVM_OPTIONS`."""
    d = tmp_path_factory.mktemp("spark-conf")
    (d / "spark-defaults.conf").write_text(
        "spark.sql.shuffle.partitions 2\n"
        f"spark.driver.extraJavaOptions {SPARK_TEST_JVM_OPTIONS}\n"
        f"spark.executor.extraJavaOptions {SPARK_TEST_JVM_OPTIONS}\n"
    )
    return d


def _env(conf: Path) -> dict[str, str]:
    import pyspark

    env = dict(os.environ)
    env.update(
        SPARK_CONF_DIR=str(conf),
        SPARK_HOME=str(Path(pyspark.__file__).parent),
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,
        SPARK_NO_DAEMONIZE="1",
    )
    return env


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


@pytest.fixture(scope="module")
def master(tmp_path_factory: pytest.TempPathFactory, conf_dir: Path) -> Iterator[str]:
    """``spark://127.0.0.1:PORT`` of a master with one live worker."""
    logs = tmp_path_factory.mktemp("spark-logs")
    port, ui, worker_ui = free_port(), free_port(), free_port()
    url = f"spark://127.0.0.1:{port}"
    procs: list[subprocess.Popen[bytes]] = []

    def start(name: str, *args: str) -> None:
        with (logs / f"{name}.log").open("wb") as log:
            procs.append(
                subprocess.Popen(
                    [str(_spark_class()), *args],
                    env=_env(conf_dir),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # its own process group: stopped as a whole
                )
            )

    try:
        start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
              "--port", str(port), "--webui-port", str(ui))  # fmt: skip
        start("worker", "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
              "--cores", "1", "--memory", "1g", "--webui-port", str(worker_ui),
              "--work-dir", str(logs / "work"))  # fmt: skip
        deadline = time.monotonic() + 120
        while True:
            try:
                state = httpx.get(f"http://127.0.0.1:{ui}/json/", timeout=2).json()
                if any(w.get("state") == "ALIVE" for w in state.get("workers", [])):
                    break
            except (httpx.HTTPError, ValueError):
                pass
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                tails = {p.name: p.read_text()[-2000:] for p in logs.glob("*.log")}
                pytest.fail(f"the standalone Spark cluster did not come up: {tails}")
            time.sleep(1)
        yield url
    finally:
        for p in procs[::-1]:
            _stop(p)


def _report(conf: Path, run_dir: Path, out: Path, *extra: str) -> None:
    cmd = [str(Path(sys.executable).parent / "pulsarcast"), "report", str(run_dir)]
    cmd += ["--out", str(out), "--no-plots", "--driver-memory", "1g", *extra]
    done = subprocess.run(cmd, env=_env(conf), capture_output=True, text=True, timeout=420)
    assert done.returncode == 0, done.stdout + done.stderr[-4000:]


def _rows(out: Path, name: str) -> list[str]:
    rows: list[dict[str, Any]] = pq.read_table(out / "tables" / name).to_pylist()
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in rows)


def test_standalone_cluster_report_equals_local_mode(
    master: str, conf_dir: Path, tmp_path: Path
) -> None:
    recs = records_r1()
    jsonl = tmp_path / "jsonl" / "r1"
    src = RecordSources()
    for i, node in enumerate(sorted({r["node"] for r in recs})):
        live = jsonl / f"r1-{node}.jsonl"
        live.parent.mkdir(parents=True, exist_ok=True)
        live.write_text("".join(json.dumps(r) + "\n" for r in recs if r["node"] == node))
        src.add(f"http://127.0.0.1:{7000 + i}", run="r1", node=node, live=live)
    dataset = tmp_path / "dataset"
    results = Collector(dataset, transport=src.transport()).collect(list(src.sources))
    assert sum(r.records for r in results) == len(recs) and not any(r.error for r in results)

    local, cluster = tmp_path / "local", tmp_path / "cluster"
    _report(conf_dir, jsonl, local, "--master", "local[1]")
    _report(conf_dir, dataset / "run=r1", cluster, "--master", master)
    for name in TABLES:
        assert _rows(cluster, name) == _rows(local, name), name
    assert _rows(local, "topics")  # tables with rows, not two empty ones
