"""Metric records (docs/protocol.md §7, schema in ``pulsarcast_ipfs/records.py``).

Records go, one JSON line each, to ``<metrics-dir>/<run>-<peer>.jsonl``, rotated
(renamed with a numeric suffix) at ``max_bytes``, and counted for ``/metrics``
(:mod:`._prometheus`). A sampler appends a ``resource_sample`` record for the
sidecar process and, when its pid is known, Kubo, with Kubo's ``stats/bw`` totals and
the Pulsarcast protocol's share.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import IO, Any

import psutil

from pulsarcast_ipfs.records import MetricRecord, RecordKind, RecordLines

from ._prometheus import SidecarStats

__all__ = ["MetricsWriter", "resource_records"]

log = logging.getLogger("pulsarcast.sidecar.metrics")


class MetricsWriter:
    """Appends validated metric records (and counts them for ``/metrics``)."""

    def __init__(
        self,
        directory: Path,
        *,
        run: str,
        system: str,
        max_bytes: int = 64 * 1024 * 1024,
        stats: SidecarStats | None = None,
    ) -> None:
        """``stats`` counts every record written, for ``/metrics``."""
        self.dir = directory
        self.run = run
        self.system = system
        self.max_bytes = max_bytes
        self.stats = stats
        self._file: IO[str] | None = None
        self._path: Path | None = None
        self._size = 0
        self._lines = RecordLines(run=run, system=system)
        """``to_json`` of each record, validated once per shape (same bytes)."""

    def open(self, peer_id: str) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self._path = self.dir / f"{self.run}-{peer_id}.jsonl"
        self._file = open(self._path, "a", encoding="utf-8")
        self._size = self._path.stat().st_size

    @property
    def path(self) -> Path | None:
        return self._path

    def write(self, record: MetricRecord) -> None:
        if self.stats is not None:
            self.stats.record(record)
        if self._file is None:
            return
        try:
            line = self._lines.line(record) + "\n"
        except ValueError as exc:  # a record off the schema is a bug: say so, keep going
            log.error("invalid metric record %s: %s", record, exc)
            return
        self._file.write(line)
        self._size += len(line)
        if self._size >= self.max_bytes:
            self._rotate()

    def flush(self) -> None:
        if self._file is not None:
            self._file.flush()

    def _rotate(self) -> None:
        assert self._file is not None and self._path is not None
        self._file.close()
        n = 1
        while self._path.with_suffix(f".jsonl.{n}").exists():
            n += 1
        os.replace(self._path, self._path.with_suffix(f".jsonl.{n}"))
        self._file = open(self._path, "a", encoding="utf-8")
        self._size = 0

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def resource_records(
    *, now: float, node: str, kubo_pid: int | None, bw: dict[str, Any] | None
) -> list[MetricRecord]:
    """``resource_sample`` records of this process and (if known) Kubo."""
    recs: list[MetricRecord] = []
    targets: list[tuple[str, int]] = [("sidecar", os.getpid())]
    if kubo_pid:
        targets.append(("kubo", kubo_pid))
    for name, pid in targets:
        try:
            p = psutil.Process(pid)
            cpu = p.cpu_times()
            fields: dict[str, Any] = {
                "process": name,
                "cpu_seconds": float(cpu.user + cpu.system),
                "rss_bytes": int(p.memory_info().rss),
            }
        except psutil.Error:
            continue
        if name == "kubo" and bw is not None:
            fields.update(bw)
        recs.append(MetricRecord(kind=RecordKind.RESOURCE_SAMPLE, ts=now, node=node, fields=fields))
    return recs
