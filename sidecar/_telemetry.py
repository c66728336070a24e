"""What the sidecar measures of itself: its metric records and ``/metrics``.

:class:`Telemetry` owns the records' file (:class:`._metrics.MetricsWriter`), what
only ``/metrics`` counts (:class:`._prometheus.SidecarStats`), the Prometheus
registry that builds every gauge on a scrape (:func:`._prometheus.registry_for`,
reading the driver through :class:`._prometheus.Scraped`), the pages of
``GET /v1/records`` and the resource sampler. The driver writes each record the
core emits through :meth:`Telemetry.write` and otherwise leaves all of it here.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from pulsarcast_ipfs.kubo import KuboClient, KuboError
from pulsarcast_ipfs.records import MetricRecord

from ._metrics import MetricsWriter, resource_records
from ._prometheus import Scraped, SidecarStats, exposition, registry_for
from ._record_pages import RecordPage, read_page
from ._transport import PROTOCOL

__all__ = ["Telemetry"]


class Telemetry:
    """One sidecar's metric records, ``/metrics`` and resource samples."""

    def __init__(
        self,
        *,
        source: Scraped,
        clock: Callable[[], float],
        metrics_path: Path,
        run: str,
        system: str,
        topic_limit: int,
        kubo_pid: int | None,
        resource_interval: float,
    ) -> None:
        self.stats = SidecarStats(topic_limit=topic_limit)
        """What only ``/metrics`` counts (:mod:`._prometheus`)."""
        self.registry = registry_for(source, self.stats)
        """This sidecar's own Prometheus registry (never the process-wide one)."""
        self.writer = MetricsWriter(metrics_path, run=run, system=system, stats=self.stats)
        self._clock = clock
        self._kubo_pid = kubo_pid
        self._resource_interval = resource_interval
        self._peer_id = ""

    def open(self, peer_id: str) -> None:
        """Open the records' file of this run and peer."""
        self._peer_id = peer_id
        self.writer.open(peer_id)

    def write(self, rec: MetricRecord) -> None:
        """Write one record (and count it for ``/metrics``)."""
        self.writer.write(rec)

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()

    def metrics_text(self) -> bytes:
        """``GET /metrics``: every family of :data:`._prometheus.FAMILIES`, built now."""
        return exposition(self.registry)

    def record_page(self, cursor: tuple[int, int] | None, limit: int) -> RecordPage | None:
        """``GET /v1/records``: a page of this run's metric records after ``cursor``
        (:mod:`._record_pages`), with every record written until now; ``None`` before
        the records' file is open. Raises :class:`._record_pages.CursorError`."""
        path = self.writer.path
        if path is None:
            return None
        self.writer.flush()
        return read_page(path, cursor, limit)

    @property
    def samples_resources(self) -> bool:
        return self._resource_interval > 0

    async def resource_loop(self, kubo: KuboClient) -> None:
        """A ``resource_sample`` record of the sidecar and Kubo (with Kubo's
        ``stats/bw`` totals and the protocol's share) every ``resource_interval``."""
        while True:
            bw: dict[str, Any] | None = None
            try:
                total = await kubo.stats_bw()
                proto = await kubo.stats_bw(protocol=PROTOCOL)
                bw = {
                    "bw_total_in": total.total_in,
                    "bw_total_out": total.total_out,
                    "bw_protocols": {PROTOCOL: {"in": proto.total_in, "out": proto.total_out}},
                }
            except KuboError:
                pass
            for rec in resource_records(
                now=self._clock(), node=self._peer_id, kubo_pid=self._kubo_pid, bw=bw
            ):
                self.writer.write(rec)
            await anyio.sleep(self._resource_interval)
