"""Scrape time and size of ``GET /metrics`` with many topics — not a test.

A real :class:`sidecar.Driver` with its HTTP API on a free loopback port, beside the
in-process fake Kubo of :mod:`benchmarks.driver_bench` (no daemon): it creates
``--topics`` topics, publishes ``--events`` events in each (so every per-topic family,
the delivery-latency and publish-call histograms included, has its series), then
scrapes ``/metrics`` ``--scrapes`` times over HTTP, as Prometheus does, and reports
the exposition's size, its families and samples, and the scrape time (median, p95,
max) with the time the driver takes to build it (``Driver.metrics_text``) apart.

    .venv/bin/python -m benchmarks.metrics_scrape --topics 20
"""

from __future__ import annotations

import argparse
import functools
import socket
import tempfile
import time
from pathlib import Path

import anyio
import httpx

from benchmarks import driver_bench as bench
from pulsarcast_ipfs.core.testing import make_signers
from pulsarcast_ipfs.stats import median, percentile
from pulsarcast_ipfs.testing import FAKE_KUBO_URL, FakeKubo, Scrape
from sidecar import Driver, SidecarConfig, serve_api


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def measure(*, topics: int, events: int, scrapes: int, metrics_topics: int) -> None:
    kubo = FakeKubo(make_signers(1, seed=3)[0])
    peers = bench.FakePeers(kubo.signer.peer_id, kubo)
    with tempfile.TemporaryDirectory() as state_dir:
        config = SidecarConfig(
            kubo_api=FAKE_KUBO_URL,
            api=f"127.0.0.1:{_port()}",
            state_dir=Path(state_dir),
            metrics_topics=metrics_topics,
        )
        driver = Driver(
            config,
            kubo=kubo.client(),
            transport_factory=functools.partial(bench.FakeTransport, peers=peers),
        )
        async with anyio.create_task_group() as tg:
            await tg.start(functools.partial(driver.run, services=[serve_api]))
            base = f"http://{config.api}"
            async with httpx.AsyncClient(base_url=base, trust_env=False, timeout=30) as api:
                for t in range(topics):
                    r = await api.post("/v1/topics", json={"name": f"topic-{t:02d}"})
                    r.raise_for_status()
                    cid = r.json()["cid"]
                    for n in range(events):
                        r = await api.post(
                            f"/v1/topics/{cid}/publish", json={"ack": "local", "text": str(n)}
                        )
                        r.raise_for_status()
                await api.get("/metrics")  # warm
                wall: list[float] = []
                size = 0
                text = ""
                for _ in range(scrapes):
                    t0 = time.perf_counter()
                    r = await api.get("/metrics")
                    wall.append(time.perf_counter() - t0)
                    text, size = r.text, len(r.content)
                build: list[float] = []
                for _ in range(scrapes):
                    t0 = time.perf_counter()
                    driver.metrics_text()
                    build.append(time.perf_counter() - t0)
            driver.stop()
    scrape = Scrape.parse(text)
    samples = sum(len(f.samples) for f in scrape.families.values())
    labelled = scrape.label_values("pulsarcast_events_published_total", "topic")
    print(
        f"topics {topics} (+ their meta topics), {events} events each, "
        f"metrics_topics {metrics_topics}: {len(labelled)} topic label values"
    )
    print(f"/metrics: {size} bytes, {len(scrape.families)} families, {samples} samples")
    ms = [w * 1000 for w in wall]
    bms = [b * 1000 for b in build]
    print(
        f"scrape over HTTP ({scrapes}x): median {_ms(median(ms)):.2f} ms, "
        f"p95 {_ms(percentile(ms, 0.95)):.2f} ms, max {max(ms):.2f} ms"
    )
    print(
        f"of which building it (Driver.metrics_text): median {_ms(median(bms)):.2f} ms, "
        f"p95 {_ms(percentile(bms, 0.95)):.2f} ms"
    )


def _ms(value: float | None) -> float:
    assert value is not None
    return value


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--topics", type=int, default=20, help="topics created (default 20)")
    p.add_argument("--events", type=int, default=10, help="events published in each (10)")
    p.add_argument("--scrapes", type=int, default=200, help="scrapes timed (default 200)")
    p.add_argument("--metrics-topics", type=int, default=32, help="the sidecar's label bound (32)")
    a = p.parse_args()
    anyio.run(
        functools.partial(
            measure,
            topics=a.topics,
            events=a.events,
            scrapes=a.scrapes,
            metrics_topics=a.metrics_topics,
        )
    )


if __name__ == "__main__":
    main()
