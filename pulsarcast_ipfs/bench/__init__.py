"""``pulsarcast bench``: Pulsarcast against Kubo's gossipsub and floodsub on local clusters.

One workload (the Reddit 2007 files), each system × network condition on a
fresh local cluster, back to back; metric records (``pulsarcast_ipfs/records.py``)
for the Spark report under ``OUT/<system>-<condition>/``. See docs/benchmark.md.

```python
cfg = BenchConfig(systems=("gossipsub", "floodsub"), nodes=10, rate=20, events=200,
                  out=Path("runs/b1"))
result = anyio.run(run_bench, cfg)
print(markdown_table(summarise_set(cfg.out)))
```
"""

from __future__ import annotations

from pulsarcast_ipfs.bench._config import (
    CONDITIONS,
    SYSTEMS,
    BenchConfig,
    BenchError,
    Latency,
    parse_latency,
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
    PUBLISHED,
    RunSummary,
    TopicCoverage,
    iter_records,
    markdown_table,
    protocol_table,
    summarise_run,
    summarise_set,
)
from pulsarcast_ipfs.bench._systems import (
    KuboPubsubSystem,
    PulsarcastSystem,
    System,
    make_system,
)

__all__ = [
    "CONDITIONS",
    "PUBLISHED",
    "SYSTEMS",
    "BenchConfig",
    "BenchError",
    "BenchProgress",
    "BenchResult",
    "KuboPubsubSystem",
    "Latency",
    "PulsarcastSystem",
    "RecordWriter",
    "RunOutcome",
    "RunSummary",
    "Schedule",
    "ScheduledEvent",
    "System",
    "TopicCoverage",
    "build_schedule",
    "frame_payload",
    "iter_records",
    "load_bench_workload",
    "machine_info",
    "make_system",
    "markdown_table",
    "parse_latency",
    "protocol_table",
    "run_bench",
    "sample_node",
    "summarise_run",
    "summarise_set",
    "unframe_payload",
]
