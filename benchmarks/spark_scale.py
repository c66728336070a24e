"""Benchmark (not a test): the report job on generated records from 100 nodes.

For each size N it generates about N schema-v1 records (in Spark, written as
100 gzip JSON-lines files, one per node) — a realistic mix per event: one
``event_injected``, one ``event_published``, ~15 ``event_delivered`` (2 % lost,
1 % recovered), one ``rpc_sent`` and one ``rpc_received`` per delivery, plus
subscriptions and resource samples every 10 s per node and process — then runs
the whole report job in local mode and prints records/s and the peak memory of
the driver (Python process + its JVM, sampled every 0.2 s with psutil).

    .venv/bin/python benchmarks/spark_scale.py --records 1000000 10000000
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

import psutil

import spark as job

NODES = 100
TOPICS = 23
SUBS_PER_TOPIC = 15
PER_EVENT = 2 + 3 * SUBS_PER_TOPIC  # injected, published, deliveries + 2 RPCs each


class PeakRss:
    """Peak RSS of this process and all its children (the JVM), sampled."""

    def __init__(self, interval: float = 0.2) -> None:
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> int:
        me = psutil.Process()
        total = me.memory_info().rss
        for c in me.children(recursive=True):
            try:
                total += c.memory_info().rss
            except psutil.Error:
                pass
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._sample())
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakRss:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()
        self.peak = max(self.peak, self._sample())


def generate(session: job.SessionConfig | None, n_records: int, out: Path) -> int:
    """Write ~n_records records as 100 per-node gzip JSONL files; return the exact count."""
    from pyspark.sql import Column
    from pyspark.sql import functions as F

    spark = job.get_session(session)
    events = max(1, n_records // PER_EVENT)
    run, system = F.lit("bench"), F.lit("pulsarcast")

    def u(*cols: Column) -> Column:  # uniform [0, 1) from a hash
        return F.pmod(F.xxhash64(*cols), F.lit(1_000_000)) / F.lit(1_000_000.0)

    ev = spark.range(events).select(
        F.col("id").alias("i"),
        F.floor(F.lit(TOPICS) * F.pow(u(F.col("id"), F.lit(1)), 3)).cast("int").alias("t"),
        F.pmod(F.xxhash64(F.col("id"), F.lit(2)), F.lit(NODES)).cast("int").alias("pub"),
        (F.col("id") * 0.01).alias("ts"),
    )
    topic = F.concat(F.lit("topic-"), F.col("t"))

    def node(c: Column) -> Column:
        return F.concat(F.lit("node-"), c)

    base = [F.lit(1).alias("v"), run.alias("run"), system.alias("system")]
    inj = ev.select(
        *base,
        F.col("ts"),
        node(F.col("pub")).alias("node"),
        F.lit("event_injected").alias("kind"),
        topic.alias("topic"),
        F.concat(F.lit("i"), F.col("i")).alias("inject_id"),
        F.lit(600).alias("size"),
    )
    pub = ev.select(
        *base,
        (F.col("ts") + 0.005).alias("ts"),
        node(F.col("pub")).alias("node"),
        F.lit("event_published").alias("kind"),
        topic.alias("topic"),
        F.concat(F.lit("e"), F.col("i")).alias("event"),
        F.concat(F.lit("i"), F.col("i")).alias("inject_id"),
    )
    rcv = (
        ev.crossJoin(spark.range(SUBS_PER_TOPIC).select(F.col("id").alias("j")))
        .select(
            "*",
            F.pmod(F.col("t") * 7 + F.col("j"), F.lit(NODES)).alias("dst"),
            u(F.col("i"), F.col("j"), F.lit(3)).alias("x"),
        )
        .where(F.col("x") >= 0.02)
    )
    lat = F.lit(0.02) + F.col("x") * 0.3
    dl = rcv.select(
        *base,
        (F.col("ts") + 0.005 + lat).alias("ts"),
        node(F.col("dst")).alias("node"),
        F.lit("event_delivered").alias("kind"),
        topic.alias("topic"),
        F.concat(F.lit("e"), F.col("i")).alias("event"),
        lat.alias("latency"),
        (F.col("x") < 0.03).alias("recovered"),
    )
    sent = rcv.select(
        *base,
        (F.col("ts") + 0.006).alias("ts"),
        node(F.col("pub")).alias("node"),
        F.lit("rpc_sent").alias("kind"),
        F.lit("event").alias("op"),
        F.lit(700).alias("bytes"),
        node(F.col("dst")).alias("peer"),
        topic.alias("topic"),
    )
    got = rcv.select(
        *base,
        (F.col("ts") + 0.006 + lat).alias("ts"),
        node(F.col("dst")).alias("node"),
        F.lit("rpc_received").alias("kind"),
        F.lit("event").alias("op"),
        F.lit(700).alias("bytes"),
        node(F.col("pub")).alias("peer"),
        topic.alias("topic"),
    )
    subs = spark.range(TOPICS * SUBS_PER_TOPIC).select(
        *base,
        F.lit(0.0).alias("ts"),
        node(
            F.pmod(
                F.floor(F.col("id") / SUBS_PER_TOPIC) * 7 + F.col("id") % SUBS_PER_TOPIC,
                F.lit(NODES),
            )
        ).alias("node"),
        F.lit("subscribed").alias("kind"),
        F.concat(F.lit("topic-"), F.floor(F.col("id") / SUBS_PER_TOPIC)).alias("topic"),
    )
    samples = int(events * 0.01 / 10) + 1
    res = spark.range(NODES * 2 * samples).select(
        *base,
        ((F.col("id") % samples) * 10.0).alias("ts"),
        node(F.floor(F.col("id") / (2 * samples))).alias("node"),
        F.lit("resource_sample").alias("kind"),
        F.when(F.floor(F.col("id") / samples) % 2 == 0, "sidecar")
        .otherwise("kubo")
        .alias("process"),
        ((F.col("id") % samples) * 10.0 * 0.05).alias("cpu_seconds"),
        (F.lit(200_000_000) + (F.col("id") % samples) * 1000).alias("rss_bytes"),
        ((F.col("id") % samples) * 50_000).alias("bw_total_in"),
        ((F.col("id") % samples) * 60_000).alias("bw_total_out"),
    )
    allrec = (
        inj.unionByName(pub, allowMissingColumns=True)
        .unionByName(dl, allowMissingColumns=True)
        .unionByName(sent, allowMissingColumns=True)
        .unionByName(got, allowMissingColumns=True)
        .unionByName(subs, allowMissingColumns=True)
        .unionByName(res, allowMissingColumns=True)
    )
    tmp = out / "_gen"
    (
        allrec.repartition(NODES, "node")
        .select(F.to_json(F.struct(*allrec.columns)).alias("value"))
        .write.mode("overwrite")
        .option("compression", "gzip")
        .text(str(tmp))
    )
    n = 0
    for k, f in enumerate(sorted(tmp.glob("part-*"))):
        f.rename(out / f"node-{k:03d}.jsonl.gz")
    shutil.rmtree(tmp)
    n = int(spark.read.text(str(out)).count())
    return n


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--records", type=int, nargs="+", default=[1_000_000, 10_000_000])
    ap.add_argument("--workdir", default=None, help="where to write (default: a temp dir)")
    ap.add_argument(
        "--driver-memory",
        default=job.default_driver_memory(),
        help="default: the report's, a quarter of this machine's memory (2g to 8g)",
    )
    args = ap.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="spark-scale-"))
    cfg = job.SessionConfig(driver_memory=args.driver_memory)
    spark = job.get_session(cfg)
    print(
        f"Spark {spark.version}, master {spark.sparkContext.master}, "
        f"driver memory {args.driver_memory}, {os.cpu_count()} CPUs, workdir {work}"
    )
    rows = []
    for n in args.records:
        runs = work / f"n{n}" / "run"
        out = work / f"n{n}" / "out"
        runs.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        got = generate(cfg, n, runs)
        gen_s = time.monotonic() - t0
        size = sum(f.stat().st_size for f in runs.glob("*.jsonl.gz"))
        print(f"\n{got:,} records generated in {gen_s:.1f} s ({size / 2**20:.0f} MiB gzip)")
        with PeakRss() as peak:
            t0 = time.monotonic()
            res = job.run_report(
                spark,
                job.ReportConfig(run_dirs=(str(runs),), out=str(out), plots=True),
                progress=lambda m: print("  " + m, flush=True),
            )
            secs = time.monotonic() - t0
        r = res.runs[0]
        print(
            f"  coverage vs published {r['coverage_published']:.4f}, "
            f"latency p50 {r['latency_p50']:.3f} s, rejected {res.rejected_records}"
        )
        rows.append((got, secs, got / secs, peak.peak))
        print(
            f"  => {got:,} records in {secs:.1f} s: {got / secs:,.0f} records/s, "
            f"peak driver RSS (python + JVM) {peak.peak / 2**20:,.0f} MiB"
        )
        shutil.rmtree(work / f"n{n}")
    print("\nrecords      seconds   records/s   peak driver MiB")
    for got, secs, rate, pk in rows:
        print(f"{got:>11,} {secs:9.1f} {rate:11,.0f} {pk / 2**20:12,.0f}")
    if len(rows) >= 2:
        (a, sa, _r, _p), (b, sb, _r2, _p2) = rows[0], rows[-1]
        print(f"\n{b / a:.1f}x the records took {sb / sa:.2f}x the time")
    spark.stop()
    if args.workdir is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
