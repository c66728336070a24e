"""The runner waits for every subscriber and publisher to join before publishing,
and counts every publish call that fails (quick: a scripted system, no cluster).

The real-cluster side is ``test_bench_run.py``'s Pulsarcast run (``join_seconds``,
the ``joining`` progress and ``publish_failures`` in its ``run.json``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import httpx
import pytest

from pulsarcast_ipfs.bench import (
    BenchConfig,
    BenchError,
    BenchProgress,
    PulsarcastSystem,
    Schedule,
    ScheduledEvent,
    System,
    _runner,
    build_schedule,
    load_bench_workload,
    markdown_table,
    run_bench,
    summarise_run,
)
from pulsarcast_ipfs.bench._ready import topic_waiting, wait_until_ready
from pulsarcast_ipfs.cluster import LocalCluster
from pulsarcast_ipfs.records import validate_record

pytestmark = pytest.mark.anyio


def _schedule(nodes: int = 3, events: int = 6) -> Schedule:
    return build_schedule(load_bench_workload("25k"), nodes=nodes, rate=100.0, events=events)


# the readiness of one node in one topic ------------------------------------------


def test_topic_waiting_reads_the_tree_position() -> None:
    joined = {"subscribed": True, "role": "subscriber", "parent": "P", "acting_root": False}
    assert topic_waiting(joined, subscriber=True) is None
    root = {"subscribed": True, "role": "root", "parent": None, "acting_root": False}
    assert topic_waiting(root, subscriber=True) is None
    assert topic_waiting(None, subscriber=True) == "not in the tree"
    assert topic_waiting({**joined, "parent": None}, subscriber=True) == "subscriber, no parent"
    assert topic_waiting({**joined, "subscribed": False}, subscriber=True) == (
        "subscriber, not subscribed"
    )
    assert topic_waiting({**root, "acting_root": True}, subscriber=True) == (
        "acting root (the root is unreachable)"
    )
    # a creator that publishes without subscribing is ready as the root
    assert topic_waiting({**root, "subscribed": False}, subscriber=False) is None


def test_participants_are_subscribers_and_publishers() -> None:
    s = _schedule()
    parts = s.participants()
    for i, topics in enumerate(s.subscriptions):
        assert all(parts[i][t] is True for t in topics)
    assert all(e.topic in parts[e.node] for e in s.events)
    # a publisher that does not subscribe (only possible for a topic's creator) is listed
    lone = Schedule(
        nodes=2,
        rate=1.0,
        topics=s.topics,
        subscriptions=((), ("a",)),
        events=(ScheduledEvent(seq=0, node=0, topic="a", inject_id="0-1", at=0.0, body=b""),),
    )
    assert lone.participants() == {0: {"a": False}, 1: {"a": True}}


# the wait itself ----------------------------------------------------------------


async def test_wait_returns_once_nothing_waits_and_reports_progress() -> None:
    left = [["node1 in a (relay, no parent)", "node2 in a (not in the tree)"], ["node2 in a"], []]
    seen: list[tuple[int, int]] = []

    async def pending() -> Sequence[str]:
        return left.pop(0)

    took = await wait_until_ready(
        pending, total=5, limit=10.0, progress=lambda r, t: seen.append((r, t)), interval=0.01
    )
    assert seen == [(3, 5), (4, 5), (5, 5)] and not left
    assert 0 <= took < 5


async def test_wait_times_out_naming_what_still_waits() -> None:
    waiting = [f"node{i} in t (relay, no parent)" for i in range(25)]

    async def pending() -> Sequence[str]:
        return waiting

    with pytest.raises(BenchError) as err:
        await wait_until_ready(pending, total=30, limit=0.05, progress=lambda r, t: None)
    text = str(err.value)
    assert "25 of 30" in text and "after 0.05 s (--join-timeout)" in text
    assert "node0 in t (relay, no parent)" in text and "node19 in t" in text
    assert "node20 in t" not in text and "+5 more" in text


async def test_pulsarcast_waiting_reads_each_nodes_status() -> None:
    """``PulsarcastSystem.waiting`` against a fake sidecar status (an HTTP transport
    answering ``GET /v1/status``): what it lists is exactly the pairs not joined."""
    s = _schedule()
    parts = s.participants()
    system = PulsarcastSystem(
        ordered=False, nodes=3, run="t", run_dir=Path("unused"), latency=None, sample_interval=1
    )
    system.topic_cids = {t.name: f"cid-{t.name}" for t in s.topics}
    creator = {t.name: t.creator for t in s.topics}
    unjoined = {(1, next(iter(parts[1])))}

    def status(index: int) -> dict[str, Any]:
        topics = []
        for name in parts[index]:
            if (index, name) in unjoined:
                st = {"role": "relay", "parent": None}
            elif creator[name] == index:
                st = {"role": "root", "parent": None}
            else:
                st = {"role": "subscriber", "parent": "peer"}
            topics.append(
                {**st, "root_cid": f"cid-{name}", "subscribed": True, "acting_root": False}
            )
        return {"topics": topics}

    def client(index: int, broken: bool = False) -> httpx.AsyncClient:
        def answer(request: httpx.Request) -> httpx.Response:
            assert request.url.path == "/v1/status"
            return httpx.Response(503 if broken else 200, json=status(index))

        return httpx.AsyncClient(base_url="http://node", transport=httpx.MockTransport(answer))

    system._http = [client(i) for i in range(3)]
    name = next(iter(parts[1]))
    assert await system.waiting(s) == [f"node1 in {name} (relay, no parent)"]
    unjoined.clear()
    assert await system.waiting(s) == []
    system._http[2] = client(2, broken=True)  # a node that cannot say is not ready
    assert await system.waiting(s) == [f"node2 in {t} (status: HTTP 503)" for t in parts[2]]
    for c in system._http:
        await c.aclose()


# the runner with a scripted system ------------------------------------------------


class Scripted(System):
    """A system without processes: ``waiting`` lists every pair until ``ready_after``
    looks (never with ``None``); ``_publish`` refuses the events in ``refuse``."""

    name = "pulsarcast"

    def __init__(self, *, ready_after: int | None, refuse: set[str], **kw: Any) -> None:
        super().__init__(**kw)
        self.ready_after = ready_after
        self.refuse = refuse
        self.looks = 0
        self.published_at_look: list[int] = []

    async def _start(self) -> None:
        pass

    @property
    def local_cluster(self) -> LocalCluster:
        raise AssertionError("no cluster")

    @property
    def kubo_nodes(self) -> Any:
        return [SimpleNamespace(peer_id=f"peer{i}", pid=os.getpid()) for i in range(self.nodes)]

    async def kubo_version(self) -> str:
        return "none"

    async def create_topics(self, schedule: Schedule) -> None:
        pass

    async def subscribe(self, schedule: Schedule) -> None:
        pass

    async def waiting(self, schedule: Schedule) -> list[str]:
        self.looks += 1
        if self.ready_after is not None and self.looks > self.ready_after:
            return []
        return [
            f"node{i} in {t} (relay, no parent)"
            for i, ts in schedule.participants().items()
            for t in ts
        ]

    async def _publish(self, ev: ScheduledEvent) -> None:
        self.published_at_look.append(self.looks)
        if ev.inject_id in self.refuse:
            self._publish_failed(ev, "HTTP 404 unknown_topic", "unknown topic")


class Joins(BenchProgress):
    def __init__(self) -> None:
        self.joins: list[tuple[int, int]] = []

    def joining(self, ready: int, total: int) -> None:
        self.joins.append((ready, total))


class Harness:
    """The runner with :class:`Scripted` systems (made from ``script``) and no samples."""

    def __init__(self) -> None:
        self.script: dict[str, Any] = {"ready_after": 1, "refuse": set()}
        self.made: list[Scripted] = []

    def make(self, name: str, **kw: Any) -> Scripted:
        del name, kw["group_capacity"], kw["filters"]
        self.made.append(Scripted(**self.script, **kw))
        return self.made[-1]


@pytest.fixture
def harness(monkeypatch: pytest.MonkeyPatch) -> Harness:
    h = Harness()

    async def no_samples(system: System) -> None:
        del system

    monkeypatch.setattr(_runner, "make_system", h.make)
    monkeypatch.setattr(_runner, "_sample_all", no_samples)
    return h


def _cfg(tmp_path: Path, **kw: Any) -> BenchConfig:
    return BenchConfig(
        systems=("pulsarcast",),
        nodes=(3,),
        rates=(100.0,),
        events=6,
        grace=0.0,
        settle=0.0,
        out=tmp_path / "b",
        run="ready",
        **kw,
    )


async def test_no_publish_before_every_node_joined(tmp_path: Path, harness: Harness) -> None:
    s = _schedule()
    refused = {s.events[1].inject_id, s.events[4].inject_id}
    harness.script["refuse"] = refused
    joins = Joins()
    result = await run_bench(_cfg(tmp_path), progress=joins)
    (system,) = harness.made
    assert result.ok, result.runs
    pairs = sum(len(ts) for ts in s.participants().values())
    assert joins.joins == [(0, pairs), (pairs, pairs)]
    # every publication came after the look that found nothing waiting
    assert system.published_at_look == [2] * 6
    run_dir = result.runs[0].run_dir
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["join_seconds"] >= 0
    # the two refused publish calls: counted by reason, recorded, summarised
    assert meta["publish_failures"] == {"HTTP 404 unknown_topic": 2}
    assert meta["errors"] == {"publish": 2}
    dropped = []
    for f in run_dir.glob("node-*.jsonl"):
        for line in f.read_text().splitlines():
            rec = json.loads(line)
            validate_record(rec)
            if rec["kind"] == "event_dropped":
                dropped.append(rec["event"])
    assert sorted(dropped) == sorted(refused)
    summary = summarise_run(run_dir)
    assert summary.publish_failures == {"HTTP 404 unknown_topic": 2}
    assert (
        "* pulsarcast / normal: 2 publish calls failed or were refused (injected, never "
        "published): 2 HTTP 404 unknown_topic" in markdown_table([summary])
    )


async def test_join_timeout_fails_the_run_naming_the_nodes(
    tmp_path: Path, harness: Harness
) -> None:
    harness.script["ready_after"] = None
    with anyio.fail_after(30):
        result = await run_bench(_cfg(tmp_path, join_timeout=0.2))
    (system,) = harness.made
    (run,) = result.runs
    assert run.status == "failed" and system.published_at_look == []
    assert run.first_error is not None and "had not joined" in run.first_error
    assert "node0 in " in run.first_error and "(relay, no parent)" in run.first_error
    meta = json.loads((run.run_dir / "run.json").read_text())
    assert meta["status"] == "failed" and meta["first_error"] == run.first_error
    assert meta["publications_completed"] == 0


def test_old_run_sets_report_their_failure_count(tmp_path: Path) -> None:
    """A ``run.json`` from before ``publish_failures`` still shows its failed publishes."""
    d = tmp_path / "pulsarcast-normal"
    d.mkdir()
    (d / "run.json").write_text(
        json.dumps({"system": "pulsarcast", "condition": "normal", "errors": {"publish": 9}})
    )
    s = summarise_run(d)
    assert s.publish_failures == {"(reason not recorded)": 9}
    assert "9 publish calls failed or were refused" in markdown_table([s])
