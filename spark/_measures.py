"""The measures of the Pulsarcast evaluation, as Spark DataFrame jobs.

Theory of operation
-------------------
Every function takes the *valid* records (one row per record, the schema's
columns) and returns an aggregate DataFrame keyed by the run key
``(run, system)``; nothing is collected here. The definitions follow the
extended report's evaluation section (quoted in ``docs/metrics.md``):

* "Events published by topic and in total", "Events received by topic and in
  total" — :func:`topic_table`.
* "Percentage of subscriptions fulfilled based on the number of events
  successfully published" and "... based on the total number of events injected
  in the system" — subscription coverage, :func:`topic_table` /
  :func:`run_totals`. Expected deliveries of a topic = Σ over its events of the
  nodes subscribed to it at the event's time (``event_published`` ts, resp.
  ``event_injected`` ts); received = distinct (node, event) deliveries to nodes
  subscribed at the event's publication time; coverage = received ÷ expected,
  ``NULL`` (n/a) when nothing was expected.
* "Number of RPC messages sent per topic and in total" and "Average, standard
  deviation and percentiles (99/95) of the number of RPC messages received and
  sent by each node" — :func:`rpc_tables`.
* "Resource usage as a total in the whole cluster, and per-node (95/99
  percentile and average)" of CPU, memory and network — :func:`resource_tables`.

The same measures in pure Python are :mod:`pulsarcast_ipfs.measures`, which the
benchmark and simulator summaries use; ``tests/test_spark_measures_differential.py``
requires its tables and these equal on the same records.

Percentiles are nearest-rank (the smallest value with at least p of the values
at or below it), computed by ``percentile_approx`` with accuracy 10 000: exact on
small sets, within 1/10 000 of the rank on large ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

__all__ = [
    "ALL",
    "KEY",
    "MeasureConfig",
    "deliveries",
    "kind_counts",
    "latency_table",
    "resource_tables",
    "rpc_tables",
    "run_totals",
    "subscription_intervals",
    "topic_table",
]

KEY: Final = ("run", "system")
ALL: Final = "(all)"
"""Topic label of the rows that aggregate over all topics."""
NO_TOPIC: Final = "(none)"
"""Topic label of RPCs that carry no topic."""
ACCURACY: Final = 10_000


@dataclass(frozen=True, slots=True, kw_only=True)
class MeasureConfig:
    """Choices the evaluation leaves open (documented in docs/metrics.md)."""

    exclude_publisher: bool = False
    """Do not expect (nor count) delivery of an event to the node that published it."""
    bucket_seconds: float = 10.0
    """Width of the time buckets that align resource samples across nodes."""


def _pct(col: str, p: float) -> Column:
    return F.percentile_approx(col, p, ACCURACY)


def _kind(rec: DataFrame, kind: str) -> DataFrame:
    return rec.where(F.col("kind") == kind)


def kind_counts(rec: DataFrame) -> DataFrame:
    """Records per run and kind, and distinct nodes per run."""
    return rec.groupBy(*KEY, "kind").agg(
        F.count("*").alias("records"), F.countDistinct("node").alias("nodes")
    )


def subscription_intervals(rec: DataFrame) -> DataFrame:
    """(run, system, node, topic, start, end): a node is subscribed on [start, end).

    A repeated ``subscribed`` without an ``unsubscribed`` between is the same
    interval; ``end`` is ``NULL`` (forever) when no ``unsubscribed`` follows. At
    equal timestamps an ``unsubscribed`` is taken to come first.
    """
    s = rec.where(F.col("kind").isin("subscribed", "unsubscribed")).select(
        *KEY, "node", "topic", "ts", (F.col("kind") == "subscribed").alias("is_sub")
    )
    w = Window.partitionBy(*KEY, "node", "topic").orderBy("ts", "is_sub")
    after = w.rowsBetween(1, Window.unboundedFollowing)
    s = s.select(
        "*",
        F.lag("is_sub").over(w).alias("prev_sub"),
        F.min(F.when(~F.col("is_sub"), F.col("ts"))).over(after).alias("end"),
    )
    return s.where(F.col("is_sub") & F.coalesce(~F.col("prev_sub"), F.lit(True))).select(
        *KEY, "node", "topic", F.col("ts").alias("start"), "end"
    )


def _events(rec: DataFrame, kind: str, id_col: str) -> DataFrame:
    """One row per event: its topic, time and node (of its earliest record)."""
    first = F.min(F.struct("ts", "topic", "node"))
    return (
        _kind(rec, kind)
        .groupBy(*KEY, id_col)
        .agg(first.alias("f"))
        .select(*KEY, id_col, "f.topic", F.col("f.ts").alias("t"), "f.node")
    )


def _subscribed_at(
    left: DataFrame, iv: DataFrame, *, node_eq: bool, exclude_self: bool
) -> DataFrame:
    """Join rows (run, system, topic, t, node) with the intervals open at ``t``."""
    a, b = left.alias("a"), iv.alias("b")
    cond = [F.col(f"a.{k}") == F.col(f"b.{k}") for k in (*KEY, "topic")]
    cond += [
        F.col("b.start") <= F.col("a.t"),
        F.col("b.end").isNull() | (F.col("a.t") < F.col("b.end")),
    ]
    if node_eq:
        cond.append(F.col("a.node") == F.col("b.node"))
    if exclude_self:
        cond.append(F.col("a.node") != F.col("b.node"))
    return a.join(b, on=cond, how="inner")


def deliveries(rec: DataFrame) -> DataFrame:
    """One row per distinct (run, system, node, event) ``event_delivered``: the
    first delivery's ts, topic, latency and recovered flag, and ``copies``."""
    first = F.min(F.struct("ts", "recovered", "latency", "topic"))
    return (
        _kind(rec, "event_delivered")
        .groupBy(*KEY, "node", "event")
        .agg(first.alias("f"), F.count("*").alias("copies"))
        .select(*KEY, "node", "event", "f.ts", "f.topic", "f.latency", "f.recovered", "copies")
    )


def topic_table(rec: DataFrame, dd: DataFrame, iv: DataFrame, cfg: MeasureConfig) -> DataFrame:
    """Per (run, system, topic): events and subscription coverage.

    Columns: ``subscribers`` (nodes that ever subscribed), ``injected``,
    ``published``, ``deliveries`` (distinct (node, event)), ``duplicates``
    (extra copies), ``recovered`` (distinct deliveries first made by recovery),
    ``expected_injected``, ``expected_published``, ``received`` (deliveries to
    nodes subscribed at the event's publication), ``late`` (deliveries of a
    published event to a node not subscribed at its publication),
    ``unpublished`` (deliveries of events with no ``event_published`` record),
    ``coverage_injected``, ``coverage_published`` (``NULL`` = n/a), ``meta``
    (a meta topic, control traffic: see :func:`_with_meta`).
    """
    inj = _events(rec, "event_injected", "inject_id")
    pub = _events(rec, "event_published", "event")
    excl = cfg.exclude_publisher

    exp_inj = (
        _subscribed_at(inj, iv, node_eq=False, exclude_self=excl)
        .groupBy(*[F.col(f"a.{k}") for k in (*KEY, "topic")])
        .agg(F.count("*").alias("expected_injected"))
    )
    exp_pub = (
        _subscribed_at(pub, iv, node_eq=False, exclude_self=excl)
        .groupBy(*[F.col(f"a.{k}") for k in (*KEY, "topic")])
        .agg(F.count("*").alias("expected_published"))
    )
    # deliveries of published events, at the event's publication time
    d = dd.alias("d").join(
        pub.select(*KEY, "event", F.col("t").alias("t"), F.col("node").alias("publisher")).alias(
            "p"
        ),
        on=[*KEY, "event"],
        how="left",
    )
    d = d.select(*KEY, "event", "topic", "t", "node", "publisher", "copies", "recovered")
    counted = _subscribed_at(
        d.where(F.col("t").isNotNull()), iv, node_eq=True, exclude_self=False
    ).select(*[F.col(f"a.{k}") for k in (*KEY, "node", "event")], F.lit(True).alias("ok"))
    if excl:
        counted = counted.join(
            d.select(*KEY, "node", "event", "publisher"), on=[*KEY, "node", "event"]
        ).where(F.col("node") != F.col("publisher"))
        counted = counted.select(*KEY, "node", "event", "ok")
    d = d.join(counted, on=[*KEY, "node", "event"], how="left")
    dstats = d.groupBy(*KEY, "topic").agg(
        F.count("*").alias("deliveries"),
        F.sum(F.col("copies") - 1).alias("duplicates"),
        F.sum(F.col("recovered").cast("long")).alias("recovered"),
        F.sum(F.col("ok").isNotNull().cast("long")).alias("received"),
        F.sum((F.col("ok").isNull() & F.col("t").isNotNull()).cast("long")).alias("late"),
        F.sum(F.col("t").isNull().cast("long")).alias("unpublished"),
    )
    subs = iv.groupBy(*KEY, "topic").agg(F.countDistinct("node").alias("subscribers"))
    n_inj = inj.groupBy(*KEY, "topic").agg(F.count("*").alias("injected"))
    n_pub = pub.groupBy(*KEY, "topic").agg(F.count("*").alias("published"))
    topics = (
        rec.where(F.col("topic").isNotNull())
        .where(
            F.col("kind").isin(
                "subscribed", "unsubscribed", "event_injected", "event_published", "event_delivered"
            )
        )
        .select(*KEY, "topic")
        .distinct()
    )
    out = topics
    for part in (subs, n_inj, n_pub, exp_inj, exp_pub, dstats):
        out = out.join(part, on=[*KEY, "topic"], how="left")
    longs = [
        "subscribers",
        "injected",
        "published",
        "expected_injected",
        "expected_published",
        "deliveries",
        "received",
        "duplicates",
        "recovered",
        "late",
        "unpublished",
    ]
    out = out.select(*KEY, "topic", *[F.coalesce(F.col(c), F.lit(0)).alias(c) for c in longs])
    return _with_meta(out).select(
        "*",
        _ratio("received", "expected_injected").alias("coverage_injected"),
        _ratio("received", "expected_published").alias("coverage_published"),
    )


def _with_meta(topics: DataFrame) -> DataFrame:
    """Add ``meta``: the topic is the meta topic of another topic of the same run.

    docs/protocol.md §5: creating topic ``X`` publishes its descriptor as an event on
    ``meta-X``. A topic named ``meta-X`` is a meta topic when ``X`` is a topic
    present in the same (run, system); otherwise (``meta-foo`` with no ``foo``)
    it is an ordinary workload topic.
    """
    a = topics.alias("a")
    b = topics.select(*KEY, F.concat(F.lit("meta-"), F.col("topic")).alias("meta_name")).alias("b")
    cond = [F.col(f"a.{k}") == F.col(f"b.{k}") for k in KEY]
    cond.append(F.col("a.topic") == F.col("b.meta_name"))
    return a.join(b, on=cond, how="left").select(
        "a.*", F.col("b.meta_name").isNotNull().alias("meta")
    )


def _ratio(num: str, den: str) -> Column:
    return F.when(F.col(den) > 0, F.col(num) / F.col(den))


def run_totals(topics: DataFrame) -> DataFrame:
    """Per run, the sums of :func:`topic_table` and the total coverages.

    A topic with nothing expected (no subscribers) has undefined coverage and is
    left out of the total coverage: its received count is then 0 too. Meta
    topics (``meta``, control traffic) are left out of every workload sum and
    counted apart: ``meta_topics``, ``meta_events`` (published) and
    ``meta_deliveries``.
    """
    meta = (
        topics.where(F.col("meta"))
        .groupBy(*KEY)
        .agg(
            F.count("*").alias("meta_topics"),
            F.sum("published").alias("meta_events"),
            F.sum("deliveries").alias("meta_deliveries"),
        )
    )
    keys = topics.select(*KEY).distinct()
    topics = topics.where(~F.col("meta"))
    sums = [
        "injected",
        "published",
        "deliveries",
        "received",
        "duplicates",
        "recovered",
        "late",
        "unpublished",
    ]
    recv_inj = F.sum(F.when(F.col("expected_injected") > 0, F.col("received")).otherwise(0))
    recv_pub = F.sum(F.when(F.col("expected_published") > 0, F.col("received")).otherwise(0))
    agg = topics.groupBy(*KEY).agg(
        F.count("*").alias("topics"),
        *[F.sum(c).alias(c) for c in sums],
        F.sum("expected_injected").alias("expected_injected"),
        F.sum("expected_published").alias("expected_published"),
        recv_inj.alias("_ri"),
        recv_pub.alias("_rp"),
    )
    out = keys.join(agg, on=list(KEY), how="left").join(meta, on=list(KEY), how="left")
    zero = ["topics", *sums, "expected_injected", "expected_published", "_ri", "_rp"]
    zero += ["meta_topics", "meta_events", "meta_deliveries"]
    out = out.select(*KEY, *[F.coalesce(F.col(c), F.lit(0)).alias(c) for c in zero])
    return out.select(
        *KEY,
        "topics",
        *sums,
        "expected_injected",
        "expected_published",
        _ratio("_ri", "expected_injected").alias("coverage_injected"),
        _ratio("_rp", "expected_published").alias("coverage_published"),
        "meta_topics",
        "meta_events",
        "meta_deliveries",
    )


def latency_table(dd: DataFrame) -> DataFrame:
    """Delivery latency per (run, system, topic, class): class is ``live``,
    ``recovered`` or ``all``; topic :data:`ALL` aggregates all topics. One row
    per distinct (node, event), the first delivery's latency."""
    d = dd.select(
        *KEY,
        "topic",
        "latency",
        F.when(F.col("recovered"), F.lit("recovered")).otherwise(F.lit("live")).alias("class"),
    )
    stats = [
        F.count("*").alias("count"),
        F.mean("latency").alias("mean"),
        _pct("latency", 0.5).alias("p50"),
        _pct("latency", 0.95).alias("p95"),
        _pct("latency", 0.99).alias("p99"),
        F.max("latency").alias("max"),
    ]
    parts = []
    for topic in (True, False):
        for cls in (True, False):
            keys = [*KEY, "topic" if topic else F.lit(ALL).alias("topic")]
            keys.append("class" if cls else F.lit("all").alias("class"))
            parts.append(d.groupBy(*keys).agg(*stats))
    out = parts[0]
    for p in parts[1:]:
        out = out.unionByName(p)
    return out


def rpc_tables(rec: DataFrame) -> tuple[DataFrame, DataFrame, DataFrame]:
    """(per topic, per node, per-node summary) RPC tables.

    Per topic (topic :data:`ALL` = total, :data:`NO_TOPIC` = RPCs without a
    topic): messages and bytes sent and received. Per node: every node that
    wrote any record in the run, with 0 for none. Summary over the nodes of a
    run: mean, population standard deviation, p95, p99 and max of messages sent
    and received per node, and mean bytes.
    """
    rpc = rec.where(F.col("kind").isin("rpc_sent", "rpc_received")).select(
        *KEY,
        "node",
        F.coalesce("topic", F.lit(NO_TOPIC)).alias("topic"),
        (F.col("kind") == "rpc_sent").alias("sent"),
        "bytes",
    )
    aggs = [
        F.sum(F.col("sent").cast("long")).alias("sent"),
        F.sum((~F.col("sent")).cast("long")).alias("received"),
        F.sum(F.when(F.col("sent"), F.col("bytes")).otherwise(0)).alias("bytes_sent"),
        F.sum(F.when(~F.col("sent"), F.col("bytes")).otherwise(0)).alias("bytes_received"),
    ]
    per_topic = rpc.groupBy(*KEY, "topic").agg(*aggs)
    total = (
        rpc.groupBy(*KEY).agg(*aggs).select(*KEY, F.lit(ALL).alias("topic"), *per_topic.columns[3:])
    )
    by_topic = per_topic.unionByName(total)
    nodes = rec.select(*KEY, "node").distinct()
    per_node = nodes.join(rpc.groupBy(*KEY, "node").agg(*aggs), on=[*KEY, "node"], how="left")
    per_node = per_node.select(
        *KEY,
        "node",
        *[
            F.coalesce(F.col(c), F.lit(0)).alias(c)
            for c in ("sent", "received", "bytes_sent", "bytes_received")
        ],
    )
    summary = per_node.groupBy(*KEY).agg(
        F.count("*").alias("nodes"),
        *[
            x
            for c in ("sent", "received")
            for x in (
                F.mean(c).alias(f"{c}_mean"),
                F.stddev_pop(c).alias(f"{c}_std"),
                _pct(c, 0.95).alias(f"{c}_p95"),
                _pct(c, 0.99).alias(f"{c}_p99"),
                F.max(c).alias(f"{c}_max"),
            )
        ],
        F.mean("bytes_sent").alias("bytes_sent_mean"),
        F.mean("bytes_received").alias("bytes_received_mean"),
    )
    return by_topic, per_node, summary


def resource_tables(rec: DataFrame, cfg: MeasureConfig) -> tuple[DataFrame, DataFrame]:
    """(per node, per run) CPU, memory and network from ``resource_sample``.

    Per (node, process), between consecutive samples: CPU = Δcpu_seconds ÷ Δts
    (CPUs), network rate = Δ(bw_total_in + bw_total_out) ÷ Δts (bytes/s); memory
    = rss_bytes of the sample. A negative difference (process restart) gives no
    value. Samples are averaged per (node, process, bucket of
    ``bucket_seconds``) and summed over the processes of a node: one value per
    (node, bucket). Per node: mean, p95, p99 (and max memory) over its buckets,
    and bytes in/out = Σ over processes of (last − first counter). Per run,
    "per node": mean, p95, p99 over all (node, bucket) values; "cluster": the
    per-bucket sum over nodes, its mean, p95, p99 and max; and total bytes.
    """
    rs = _kind(rec, "resource_sample").select(
        *KEY,
        "node",
        "process",
        "ts",
        "cpu_seconds",
        "rss_bytes",
        (F.col("bw_total_in") + F.col("bw_total_out")).alias("bw"),
        "bw_total_in",
        "bw_total_out",
    )
    w = Window.partitionBy(*KEY, "node", "process").orderBy("ts")
    dt = F.col("ts") - F.lag("ts").over(w)

    def rate(c: str) -> Column:
        delta = F.col(c) - F.lag(c).over(w)
        return F.when((dt > 0) & (delta >= 0), delta / dt)

    rs = rs.select(
        *KEY,
        "node",
        "process",
        "ts",
        F.floor(F.col("ts") / F.lit(cfg.bucket_seconds)).alias("bucket"),
        rate("cpu_seconds").alias("cpu"),
        F.col("rss_bytes").cast("double").alias("mem"),
        rate("bw").alias("net"),
        "bw_total_in",
        "bw_total_out",
    )
    per_proc = rs.groupBy(*KEY, "node", "process", "bucket").agg(
        F.mean("cpu").alias("cpu"), F.mean("mem").alias("mem"), F.mean("net").alias("net")
    )
    series = per_proc.groupBy(*KEY, "node", "bucket").agg(
        F.sum("cpu").alias("cpu"), F.sum("mem").alias("mem"), F.sum("net").alias("net")
    )
    counters = (
        rs.groupBy(*KEY, "node", "process")
        .agg(
            (F.max("bw_total_in") - F.min("bw_total_in")).alias("i"),
            (F.max("bw_total_out") - F.min("bw_total_out")).alias("o"),
        )
        .groupBy(*KEY, "node")
        .agg(F.sum("i").alias("bytes_in"), F.sum("o").alias("bytes_out"))
    )

    def stats(prefix: str, c: str) -> list[Column]:
        return [
            F.mean(c).alias(f"{prefix}_mean"),
            _pct(c, 0.95).alias(f"{prefix}_p95"),
            _pct(c, 0.99).alias(f"{prefix}_p99"),
            F.max(c).alias(f"{prefix}_max"),
        ]

    per_node = (
        series.groupBy(*KEY, "node")
        .agg(*stats("cpu", "cpu"), *stats("mem", "mem"), *stats("net", "net"))
        .join(counters, on=[*KEY, "node"], how="left")
    )
    node_level = series.groupBy(*KEY).agg(
        F.countDistinct("node").alias("nodes"),
        *stats("node_cpu", "cpu"),
        *stats("node_mem", "mem"),
        *stats("node_net", "net"),
    )
    cluster = (
        series.groupBy(*KEY, "bucket")
        .agg(F.sum("cpu").alias("cpu"), F.sum("mem").alias("mem"), F.sum("net").alias("net"))
        .groupBy(*KEY)
        .agg(
            *stats("cluster_cpu", "cpu"), *stats("cluster_mem", "mem"), *stats("cluster_net", "net")
        )
    )
    totals = counters.groupBy(*KEY).agg(
        F.sum("bytes_in").alias("cluster_bytes_in"), F.sum("bytes_out").alias("cluster_bytes_out")
    )
    per_run = node_level.join(cluster, on=list(KEY), how="left").join(
        totals, on=list(KEY), how="left"
    )
    return per_node, per_run
