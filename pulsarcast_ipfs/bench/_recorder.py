"""Per-node metric record files and resource samples written by the runner.

Records follow ``pulsarcast_ipfs/records.py`` (docs/protocol.md §7): one JSON line per
happening, validated by :meth:`MetricRecord.to_json`, in
``RUN_DIR/<system>-<condition>/node-<i>.jsonl``. The runner writes every record
of the Kubo baselines (subscribed, injected, published, delivered) and, for all
systems, ``resource_sample`` records of each node's processes: CPU seconds and
RSS from ``psutil``, and for Kubo its ``stats/bw`` totals and per-protocol
counters (``bw_protocols``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import psutil

from pulsarcast_ipfs.kubo import KuboClient, KuboError
from pulsarcast_ipfs.records import MetricRecord, RecordKind

__all__ = ["RecordWriter", "sample_node"]


class RecordWriter:
    """Appends validated records of one node to one JSON-lines file."""

    def __init__(self, path: Path, *, run: str, system: str, node: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.run = run
        self.system = system
        self.node = node
        self.count = 0
        self._file: IO[str] | None = open(path, "a", encoding="utf-8")

    def write(self, kind: RecordKind, fields: Mapping[str, Any], ts: float | None = None) -> None:
        """Append one record (``ts`` defaults to now)."""
        if self._file is None:
            return
        rec = MetricRecord(
            kind=kind, ts=time.time() if ts is None else ts, node=self.node, fields=fields
        )
        self._file.write(rec.to_json(run=self.run, system=self.system) + "\n")
        self.count += 1

    def flush(self) -> None:
        if self._file is not None:
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _process_fields(pid: int) -> dict[str, Any] | None:
    try:
        p = psutil.Process(pid)
        with p.oneshot():
            cpu = p.cpu_times()
            rss = p.memory_info().rss
    except psutil.Error:
        return None
    return {"cpu_seconds": float(cpu.user + cpu.system), "rss_bytes": int(rss)}


async def sample_node(
    writer: RecordWriter,
    *,
    kubo: KuboClient,
    kubo_pid: int,
    protocols: Sequence[str],
    others: Mapping[str, int] | None = None,
) -> None:
    """Write ``resource_sample`` records for this node's Kubo (with ``stats/bw``)
    and its other processes (``others``: process name → pid). A process that is
    gone or a Kubo that does not answer gives a record without those fields."""
    now = time.time()
    fields: dict[str, Any] = {"process": "kubo"}
    fields.update(_process_fields(kubo_pid) or {})
    try:
        total = await kubo.stats_bw()
        fields["bw_total_in"] = total.total_in
        fields["bw_total_out"] = total.total_out
        per: dict[str, dict[str, int]] = {}
        for proto in protocols:
            bw = await kubo.stats_bw(protocol=proto)
            per[proto] = {"in": bw.total_in, "out": bw.total_out}
        fields["bw_protocols"] = per
    except KuboError:
        pass
    writer.write(RecordKind.RESOURCE_SAMPLE, fields, ts=now)
    for name, pid in (others or {}).items():
        extra = _process_fields(pid)
        if extra is not None:
            writer.write(RecordKind.RESOURCE_SAMPLE, {"process": name, **extra}, ts=now)
