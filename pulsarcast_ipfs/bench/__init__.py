"""``pulsarcast bench``: Pulsarcast against Kubo's gossipsub and floodsub on local clusters.

One workload (the Reddit 2007 files), each system × network condition on a
fresh local cluster, back to back; metric records (``pulsarcast_ipfs/records.py``)
for the Spark report under ``OUT/<system>-<condition>/``. A sweep (several node
counts and/or rates) runs them for every combination, under
``OUT/<system>-<condition>-n<nodes>-r<rate>/``, and finds each system's knee.
See docs/benchmark.md.

```python
cfg = BenchConfig(systems=("gossipsub", "floodsub"), nodes=(10,), rates=(5, 20, 50),
                  events=200, out=Path("runs/b1"))
result = anyio.run(run_bench, cfg)
print(write_summary(cfg.out))  # summary.md: a table per combination, the knees
```
"""

from __future__ import annotations

from pulsarcast_ipfs.bench._config import (
    CONDITIONS,
    DEFAULT_NODES,
    DEFAULT_RATE,
    DEFAULT_SELECTIVITY,
    MAX_BENCH_PAYLOAD,
    MIN_BENCH_PAYLOAD,
    SYSTEMS,
    BenchConfig,
    BenchError,
    Combination,
    Latency,
    parse_latency,
    parse_node_counts,
    parse_payload_sizes,
    parse_rates,
    payload_label,
    rate_label,
)
from pulsarcast_ipfs.bench._filters import (
    SHAPES,
    FilterPlan,
    SubscriptionFilter,
    assign_filters,
    filter_rng,
)
from pulsarcast_ipfs.bench._recorder import RecordWriter, sample_node
from pulsarcast_ipfs.bench._runner import (
    BenchProgress,
    BenchResult,
    RunOutcome,
    machine_info,
    run_bench,
)
from pulsarcast_ipfs.bench._schedule import (
    Schedule,
    ScheduledEvent,
    build_schedule,
    frame_payload,
    load_bench_workload,
    unframe_payload,
)
from pulsarcast_ipfs.bench._summary import (
    KNEE_CONDITION,
    KNEE_P99_SECONDS,
    PUBLISHED,
    Knee,
    RateOutcome,
    RunSummary,
    TopicCoverage,
    filter_table,
    iter_records,
    knee_table,
    knees,
    markdown_table,
    payload_table,
    protocol_table,
    set_document,
    set_report,
    shortfall,
    summarise_run,
    summarise_set,
    sustained,
    write_summary,
)
from pulsarcast_ipfs.bench._systems import (
    KuboPubsubSystem,
    PulsarcastSystem,
    System,
    make_system,
)

__all__ = [
    "CONDITIONS",
    "DEFAULT_NODES",
    "DEFAULT_RATE",
    "DEFAULT_SELECTIVITY",
    "KNEE_CONDITION",
    "KNEE_P99_SECONDS",
    "MAX_BENCH_PAYLOAD",
    "MIN_BENCH_PAYLOAD",
    "PUBLISHED",
    "SHAPES",
    "SYSTEMS",
    "BenchConfig",
    "BenchError",
    "BenchProgress",
    "BenchResult",
    "Combination",
    "FilterPlan",
    "Knee",
    "KuboPubsubSystem",
    "Latency",
    "PulsarcastSystem",
    "RateOutcome",
    "RecordWriter",
    "RunOutcome",
    "RunSummary",
    "Schedule",
    "ScheduledEvent",
    "SubscriptionFilter",
    "System",
    "TopicCoverage",
    "assign_filters",
    "build_schedule",
    "filter_rng",
    "filter_table",
    "frame_payload",
    "iter_records",
    "knee_table",
    "knees",
    "load_bench_workload",
    "machine_info",
    "make_system",
    "markdown_table",
    "parse_latency",
    "parse_node_counts",
    "parse_payload_sizes",
    "parse_rates",
    "payload_label",
    "payload_table",
    "protocol_table",
    "rate_label",
    "run_bench",
    "sample_node",
    "set_document",
    "set_report",
    "shortfall",
    "summarise_run",
    "summarise_set",
    "sustained",
    "unframe_payload",
    "write_summary",
]
