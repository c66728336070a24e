"""The systems under test, behind one interface so that one runner drives them all.

A :class:`System` is an async context manager: entering starts a fresh local
cluster (and, for the ``latency`` condition, Toxiproxy with the latency toxic on
every node's inbound connections), leaving tears every process down. In between
the runner calls :meth:`System.create_topics`, :meth:`System.subscribe` and
:meth:`System.publish` for each scheduled event.

Counting rule, the same for every system: a node subscribed to a topic is
expected to deliver every event of the topic, *including the events it
published itself* (the Spark report's default; Kubo's pubsub hands a node's own
messages to its local subscribers and the Pulsarcast sidecar delivers a local
subscriber's own events too). Publishes are serialised per node (one in flight
per node): Kubo ≥ 0.40 checks pubsub sequence numbers and drops out-of-order
messages, and doing the same for Pulsarcast keeps the systems comparable.
"""

from __future__ import annotations

import abc
import base64
import contextlib
import functools
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final, Self

import anyio
import httpx
from anyio.abc import TaskStatus

from pulsarcast_ipfs._lifecycle import AsyncClosing
from pulsarcast_ipfs.bench._config import BenchError, Latency
from pulsarcast_ipfs.bench._filters import FilterPlan
from pulsarcast_ipfs.bench._ready import topic_waiting
from pulsarcast_ipfs.bench._recorder import RecordWriter
from pulsarcast_ipfs.bench._retry import (
    subscription_timed_out,
    with_connect_retries,
    with_retries,
)
from pulsarcast_ipfs.bench._schedule import (
    Schedule,
    ScheduledEvent,
    frame_payload,
    unframe_payload,
)
from pulsarcast_ipfs.cluster import (
    ClusterConfig,
    ClusterNode,
    LocalCluster,
    LocalSidecarCluster,
    ToxiproxyAPI,
)
from pulsarcast_ipfs.kubo import KuboClient, KuboError
from pulsarcast_ipfs.records import RecordKind

__all__ = ["KuboPubsubSystem", "PulsarcastSystem", "System", "make_system"]

Say = Callable[[str], None]

COMMON_PROTOCOLS: tuple[str, ...] = (
    "/ipfs/kad/1.0.0",
    "/ipfs/lan/kad/1.0.0",
    "/ipfs/bitswap/1.2.0",
    "/ipfs/id/1.0.0",
)
GOSSIPSUB_PROTOCOLS: tuple[str, ...] = (
    "/meshsub/1.0.0",
    "/meshsub/1.1.0",
    "/meshsub/1.2.0",
    "/meshsub/1.3.0",
)
FLOODSUB_PROTOCOLS: tuple[str, ...] = ("/floodsub/1.0.0",)
PULSARCAST_PROTOCOLS: tuple[str, ...] = (
    "/x/pulsarcast/2.12.0",
    "/x/pulsarcast/2.8.0",
    "/x/pulsarcast/2.6.0",
    "/x/pulsarcast/2.5.0",
    "/x/pulsarcast/2.4.0",
    "/x/pulsarcast/2.3.0",
    "/x/pulsarcast/2.2.0",
    "/x/pulsarcast/1.0.0",
)
"""The tree stream protocol (wire 2.7: the meta-topic descriptor in JOIN_ACK), and
the earlier ones, for older run sets."""


class System(AsyncClosing, abc.ABC):
    """One system on one fresh cluster (see the module docstring)."""

    name: str
    dissemination_protocols: tuple[str, ...] = ()
    """The libp2p protocols that carry this system's events (``stats/bw`` per protocol)."""

    def __init__(
        self,
        *,
        nodes: int,
        run: str,
        run_dir: Path,
        latency: Latency | None,
        sample_interval: float,
        say: Say | None = None,
        ack: int = 0,
    ) -> None:
        self.nodes = nodes
        self.run = run
        self.ack = ack
        """The acknowledgement level of every publish (Pulsarcast systems; 0: ``local``)."""
        self.run_dir = run_dir
        self.latency = latency
        self.sample_interval = sample_interval
        self.say: Say = say or (lambda _m: None)
        self.writers: list[RecordWriter] = []
        self.errors: dict[str, int] = {}
        self.first_error: str | None = None
        self.publish_failures: dict[str, int] = {}
        self.publish_calls: list[float] = []
        """Seconds of each publish call answered with success (Pulsarcast systems)."""
        self.not_acknowledged = 0
        """Publish calls answered ``not_acknowledged`` (the event exists)."""
        """Publish calls that failed or were refused, by reason (``HTTP 404
        unknown_topic``, ``ConnectTimeout``, ``KuboError`` …): each is also an
        ``event_dropped`` record of its node and goes into ``run.json``."""
        self.retries: dict[str, int] = {}
        """Calls tried again (:mod:`._retry`), by call and reason: a publish whose
        connection could not be made (``publish ConnectTimeout``), a subscription that
        timed out (``subscribe Timeout``); into ``run.json``."""
        self._locks: list[anyio.Lock] = []
        self._stack = contextlib.AsyncExitStack()
        self._tg: anyio.abc.TaskGroup | None = None
        """Background tasks (subscription streams); closed first on exit, unshielded,
        because a task group's cancel scope must be left in the order it was entered."""

    @property
    def protocols(self) -> tuple[str, ...]:
        return self.dissemination_protocols + COMMON_PROTOCOLS

    # life cycle -------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        try:
            await self._start()
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self.writers = [
                RecordWriter(
                    self.run_dir / f"node-{i}.jsonl",
                    run=self.run,
                    system=self.name,
                    node=n.peer_id,
                )
                for i, n in enumerate(self.kubo_nodes)
            ]
            self._stack.push_async_callback(self._close_writers)
            self._locks = [anyio.Lock() for _ in range(self.nodes)]
            if self.latency is not None:
                self.say(f"latency toxic {self.latency} on every node's inbound data")
                await self._apply_latency(self.latency)
        except BaseException:
            await self.aclose()
            raise
        return self

    async def _apply_latency(self, latency: Latency) -> None:
        """Delay every byte any node receives by ``latency`` (± jitter), once.

        A connection dialed into node B passes B's proxy: the ``upstream`` toxic
        delays what B receives on it, the ``downstream`` toxic what the dialer
        receives. With both on every proxy, each packet arriving at any node has
        crossed one latency toxic, whichever side dialed (the evaluation added
        500 ms ± 300 ms "to every incoming TCP packet").
        """
        api = ToxiproxyAPI(self.local_cluster.toxiproxy_url)
        for node in self.kubo_nodes:
            for stream in ("upstream", "downstream"):
                await api.set_toxic(
                    node.proxy_name,
                    f"bench_latency_{stream}",
                    "latency",
                    stream,
                    latency=latency.ms,
                    jitter=latency.jitter,
                )

    async def _close_task_group(self) -> None:
        tg, self._tg = self._tg, None
        if tg is not None:
            tg.cancel_scope.cancel()
            await tg.__aexit__(None, None, None)

    async def aclose(self) -> None:
        """The background tasks first, then the teardowns on ``self._stack`` (shielded)."""
        try:
            await self._close_task_group()
        finally:
            with anyio.CancelScope(shield=True):
                await self._stack.aclose()

    async def _close_writers(self) -> None:
        for w in self.writers:
            w.close()

    def _error(self, what: str, exc: BaseException) -> None:
        self.errors[what] = self.errors.get(what, 0) + 1
        if self.first_error is None:
            self.first_error = f"{what}: {exc}"

    def _retried(self, what: str) -> None:
        self.retries[what] = self.retries.get(what, 0) + 1

    def _publish_retried(self, reason: str) -> None:
        self._retried(f"publish {reason}")

    def publish_call_summary(self) -> dict[str, Any]:
        """For ``run.json``: the publish calls' durations (p50, p99, seconds) and how
        many were answered ``not_acknowledged`` (Pulsarcast systems; else nothing)."""
        calls = sorted(self.publish_calls)
        if not calls and not self.not_acknowledged:
            return {}

        def q(p: float) -> float | None:
            return calls[min(len(calls) - 1, int(p * len(calls)))] if calls else None

        return {
            "publish_call": {"count": len(calls), "p50_s": q(0.5), "p99_s": q(0.99)},
            "not_acknowledged": self.not_acknowledged,
        }

    def _publish_failed(self, ev: ScheduledEvent, reason: str, detail: str) -> None:
        """Count a publish call that failed (``reason``: a short, countable cause) and
        record it as its node's ``event_dropped``: never a silent loss."""
        self.publish_failures[reason] = self.publish_failures.get(reason, 0) + 1
        self._error("publish", RuntimeError(f"{ev.inject_id} at node{ev.node}: {detail}"))
        self.writers[ev.node].write(
            RecordKind.EVENT_DROPPED,
            {
                "topic": ev.topic,
                "event": ev.inject_id,
                "reason": f"publish failed: {reason}: {detail}"[:300],
            },
        )

    @abc.abstractmethod
    async def _start(self) -> None:
        """Start the cluster; register its teardown on ``self._stack``."""

    @property
    @abc.abstractmethod
    def local_cluster(self) -> LocalCluster:
        """The Kubo cluster."""

    @property
    def kubo_nodes(self) -> Sequence[ClusterNode]:
        """The Kubo daemons, by node index."""
        return self.local_cluster.nodes

    def other_processes(self, index: int) -> dict[str, int]:
        """Processes beside Kubo on node ``index`` (name → pid), for resource samples."""
        del index
        return {}

    @abc.abstractmethod
    async def create_topics(self, schedule: Schedule) -> None:
        """Create every topic at its creator node."""

    @abc.abstractmethod
    async def subscribe(self, schedule: Schedule) -> None:
        """Subscribe every node to its topics; return once all subscriptions are open."""

    async def waiting(self, schedule: Schedule) -> list[str]:
        """What is not yet ready to take part in the schedule, one text per node and
        topic (``_ready.py``); empty when every subscriber and publisher is. Kubo's
        pubsub: nothing (a ``pubsub/sub`` that answered is ready)."""
        del schedule
        return []

    async def publish(self, ev: ScheduledEvent) -> None:
        """Publish one event at its node (one publish in flight per node)."""
        async with self._locks[ev.node]:
            await self._publish(ev)

    @abc.abstractmethod
    async def _publish(self, ev: ScheduledEvent) -> None: ...

    async def kubo_version(self) -> str:
        async with self.kubo_nodes[0].client() as kubo:
            return (await kubo.version()).version


class KuboPubsubSystem(System):
    """``gossipsub`` / ``floodsub``: Kubo's own pubsub through its RPC API.

    The runner records everything: ``subscribed`` when ``pubsub/sub`` answers,
    ``event_injected`` and ``event_published`` around a successful ``pubsub/pub``
    (Kubo publishes directly: published = injected when the call succeeds),
    ``event_delivered`` for each message a subscription stream yields. The event
    id is the ``inject_id`` carried in the payload header; latency is the receive
    time minus the ``created`` time in that header (one machine, one clock).
    """

    def __init__(self, router: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.name = router
        self.dissemination_protocols = (
            GOSSIPSUB_PROTOCOLS if router == "gossipsub" else FLOODSUB_PROTOCOLS
        )
        self.cluster = LocalCluster(
            config=ClusterConfig(
                nodes=self.nodes,
                toxiproxy=self.latency is not None,
                pubsub_router=router,
            )
        )
        self._clients: list[KuboClient] = []

    @property
    def local_cluster(self) -> LocalCluster:
        return self.cluster

    async def _start(self) -> None:
        self._stack.push_async_callback(self.cluster.stop)
        await self.cluster.start(progress=self.say)
        for node in self.cluster.nodes:
            self._clients.append(await self._stack.enter_async_context(node.client(timeout=60.0)))
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()

    async def create_topics(self, schedule: Schedule) -> None:
        """Kubo pubsub topics need no creation (a topic exists once subscribed)."""

    async def subscribe(self, schedule: Schedule) -> None:
        assert self._tg is not None
        for i, topics in enumerate(schedule.subscriptions):
            for topic in topics:
                await self._tg.start(self._subscription, i, topic)

    async def _subscription(
        self, index: int, topic: str, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        w = self.writers[index]
        started = False
        try:
            async with self._clients[index].pubsub_sub(topic) as sub:
                w.write(RecordKind.SUBSCRIBED, {"topic": topic, "topic_cid": None})
                task_status.started()
                started = True
                async for msg in sub:
                    now = time.time()
                    try:
                        inject_id, created = unframe_payload(msg.data)
                    except BenchError as exc:
                        w.write(
                            RecordKind.EVENT_DROPPED,
                            {"topic": topic, "reason": str(exc)[:200], "peer": msg.from_peer},
                        )
                        continue
                    w.write(
                        RecordKind.EVENT_DELIVERED,
                        {
                            "topic": topic,
                            "topic_cid": None,
                            "event": inject_id,
                            "latency": max(0.0, now - created),
                            "recovered": False,
                            "inject_id": inject_id,
                        },
                        ts=now,
                    )
        except KuboError as exc:
            if not started:
                raise BenchError(f"node{index}: pubsub/sub {topic!r} failed: {exc}") from exc
            self._error("subscription", exc)

    async def _publish(self, ev: ScheduledEvent) -> None:
        w = self.writers[ev.node]
        created = time.time()
        data = frame_payload(ev.inject_id, created, ev.body, ev.size)
        w.write(
            RecordKind.EVENT_INJECTED,
            {"topic": ev.topic, "topic_cid": None, "inject_id": ev.inject_id, "size": len(data)},
            ts=created,
        )
        client = self._clients[ev.node]
        try:
            await with_connect_retries(
                lambda: client.pubsub_pub(ev.topic, data), retried=self._publish_retried
            )
        except KuboError as exc:
            self._publish_failed(ev, type(exc).__name__, str(exc))
            return
        peer = self.cluster[ev.node].peer_id
        w.write(
            RecordKind.EVENT_PUBLISHED,
            {
                "topic": ev.topic,
                "topic_cid": None,
                "event": ev.inject_id,
                "inject_id": ev.inject_id,
                "author": peer,
                "publisher": peer,
                "size": len(data),
                "via": "direct",
            },
            ts=created,
        )


class PulsarcastSystem(System):
    """``pulsarcast`` / ``pulsarcast-ordered`` on Kubo + sidecar pairs.

    The sidecars write their own metric records (``subscribed``,
    ``event_injected``, ``event_published``, ``event_delivered``, RPCs, trees,
    samples) into ``<run dir>/sidecar/``, with ``run`` and ``system`` set by the
    runner; the runner adds the resource samples of both processes of each node.
    ``ordered``: each topic allows only its creator to publish and lets everyone
    request to publish (one ordered chain per topic). ``fast`` (``pulsarcast-fast``):
    every subscription asks for fast groups; each sidecar runs with
    ``--group-capacity``. ``filters`` (``pulsarcast-filtered``): every subscription
    carries its filter from the plan, and the subscriber's node delivers only the
    matching events; tree filtering (``NodeConfig.tree_filters``, on by default)
    sends each event down only into the subtrees that want it. Only
    ``pulsarcast-filtered``'s publishes carry the event's attributes: the other
    systems' applications filter on the
    payload, which holds the same record, and attributes would only add bytes to
    every descriptor (the unfiltered run sets compare bytes with gossipsub's).
    """

    dissemination_protocols = PULSARCAST_PROTOCOLS

    def __init__(
        self,
        *,
        ordered: bool,
        fast: bool = False,
        group_capacity: int = 16,
        filters: FilterPlan | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.ordered = ordered
        self.fast = fast
        self.filters = filters
        self.name = "pulsarcast-ordered" if ordered else "pulsarcast"
        if fast:
            self.name = "pulsarcast-fast"
        if filters is not None:
            self.name = "pulsarcast-filtered"
        group_args = ["--group-capacity", str(group_capacity)] if fast else []
        self.sc = LocalSidecarCluster(
            nodes=self.nodes,
            run=self.run,
            extra_args=[
                "--system",
                self.name,
                "--metrics-dir",
                str((self.run_dir / "sidecar").resolve()),
                "--resource-interval",
                str(self.sample_interval),
                "--log-level",
                "warning",
                # The sidecar's own default (the test harness refreshes every
                # second, to converge fast): a benchmark runs what a user runs.
                "--routing-interval",
                "5",
                *group_args,
            ],
        )
        if self.latency is not None:
            # Same cluster, with a Toxiproxy proxy in front of every node.
            self.sc.cluster = LocalCluster(
                config=ClusterConfig(
                    nodes=self.nodes, toxiproxy=True, base_dir=self.sc.base_dir / "kubo"
                )
            )
        self.topic_cids: dict[str, str] = {}
        self._http: list[httpx.AsyncClient] = []

    @property
    def local_cluster(self) -> LocalCluster:
        return self.sc.cluster

    def other_processes(self, index: int) -> dict[str, int]:
        sc = self.sc.sidecars.get(index)
        return {"sidecar": sc.pid} if sc is not None and sc.pid else {}

    async def _teardown(self) -> None:
        """Stop the sidecars all at once (SIGTERM, then SIGKILL after 10 s), then the rest:
        ``LocalSidecarCluster.stop`` alone stops them one after the other."""

        async def stop_one(index: int) -> None:
            with contextlib.suppress(Exception):
                await self.sc.stop_sidecar(index)

        try:
            async with anyio.create_task_group() as tg:
                for i in list(self.sc.sidecars):
                    tg.start_soon(stop_one, i)
        finally:
            await self.sc.stop()

    async def _retention_report(self) -> None:
        """What each node keeps of each topic at the end (the retention
        policy's pinned bytes per topic), into ``retention.json``."""
        rows: list[dict[str, Any]] = []
        for i, http in enumerate(self._http):
            with contextlib.suppress(httpx.HTTPError, ValueError, KeyError):
                status = (await http.get("/v1/status")).json()
                for t in status["topics"]:
                    if t.get("retained"):
                        rows.append(
                            {
                                "node": i,
                                "topic": t["name"],
                                "events": t["retained"],
                                "bytes": t["retained_bytes"],
                            }
                        )
        (self.run_dir / "retention.json").write_text(json.dumps(rows, indent=1) + "\n")
        await self._forwards_report()
        if rows:
            sizes = sorted(r["bytes"] for r in rows)
            self.say(
                f"retained history: {len(rows)} (node, topic) pairs, pinned bytes per topic "
                f"median {sizes[len(sizes) // 2] / 1024:.1f} KiB, max {sizes[-1] / 1024:.1f} KiB, "
                f"total {sum(sizes) / 2**20:.2f} MiB"
            )

    async def _forwards_report(self) -> None:
        """Filters in the tree: EVENTs sent down, sends pruned and false
        positives, summed over the nodes' ``/metrics``, into ``forwards.json``, with
        the tree RPC bytes sent by message (``sent_bytes``: where the bytes go)."""
        totals = dict.fromkeys(FORWARD_COUNTS, 0)
        sent: dict[str, int] = {}
        nodes = 0
        for http in self._http:
            with contextlib.suppress(httpx.HTTPError, ValueError):
                text = (await http.get("/metrics")).text
                found = parse_forward_counts(text)
                if found is not None:
                    nodes += 1
                    for k, v in found.items():
                        totals[k] += v
                for op, n in parse_sent_bytes(text).items():
                    sent[op] = sent.get(op, 0) + n
        if not nodes:
            return
        by_size = dict(sorted(sent.items(), key=lambda kv: -kv[1]))
        (self.run_dir / "forwards.json").write_text(
            json.dumps({"nodes": nodes, **totals, "sent_bytes": by_size}, indent=1) + "\n"
        )
        down = totals["down"]
        share = f" ({totals['false_positive'] / down:.1%} of those sent down)" if down else ""
        self.say(
            f"tree filters: {down:,} EVENTs sent down, {totals['pruned']:,} sends pruned, "
            f"{totals['false_positive']:,} false positives{share}"
        )

    async def _start(self) -> None:
        self._stack.push_async_callback(self._teardown)
        self.say(f"starting {self.nodes} Kubo daemons and sidecars")
        await self.sc.start()
        for i in range(self.nodes):
            self._http.append(
                await self._stack.enter_async_context(
                    httpx.AsyncClient(
                        base_url=self.sc[i].api_url,
                        trust_env=False,
                        timeout=httpx.Timeout(120.0, connect=10.0),
                        # A fresh connection per publish: a pooled one that the server
                        # closes as idle just as a request goes out fails with
                        # ReadError, and a publish cannot be retried blindly.
                        limits=httpx.Limits(max_keepalive_connections=0),
                    )
                )
            )
        # Runs first on exit (LIFO), while the sidecars and their HTTP clients are up.
        self._stack.push_async_callback(self._retention_report_safely)

    async def _retention_report_safely(self) -> None:
        try:
            await self._retention_report()
        except Exception as exc:  # a report, never a reason to fail the run's teardown
            self.say(f"retention report failed: {exc!r}")

    async def _topic_statuses(self, index: int) -> dict[str, dict[str, Any]] | str:
        """Node ``index``'s ``GET /v1/status`` topics by root CID, or why it failed."""
        try:
            resp = await self._http[index].get("/v1/status", timeout=10.0)
            if resp.status_code != 200:
                return f"status: HTTP {resp.status_code}"
            topics = resp.json()["topics"]
            return {str(t["root_cid"]): t for t in topics}
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            return f"status failed: {exc!r}"

    async def waiting(self, schedule: Schedule) -> list[str]:
        """Every (node, topic) of :meth:`Schedule.participants` whose node has not
        joined the topic's tree (:func:`topic_waiting`), from each node's status."""
        found: dict[int, list[str]] = {}
        limiter = anyio.CapacityLimiter(8)

        async def one(index: int, topics: dict[str, bool]) -> None:
            async with limiter:
                statuses = await self._topic_statuses(index)
            out = found.setdefault(index, [])
            for name, subscriber in topics.items():
                why = (
                    statuses
                    if isinstance(statuses, str)
                    else topic_waiting(statuses.get(self.topic_cids[name]), subscriber=subscriber)
                )
                if why is not None:
                    out.append(f"node{index} in {name} ({why})")

        async with anyio.create_task_group() as tg:
            for i, topics in schedule.participants().items():
                tg.start_soon(one, i, topics)
        return [w for i in sorted(found) for w in found[i]]

    async def create_topics(self, schedule: Schedule) -> None:
        from pulsarcast_ipfs.sdk import AsyncClient, ClientConfig, SdkError

        for t in schedule.topics:
            creator = self.sc.cluster[t.creator].peer_id
            async with AsyncClient(
                config=ClientConfig(api=self.sc[t.creator].api_url, timeout=120.0)
            ) as pc:
                try:
                    if self.ordered:
                        topic = await pc.create_topic(
                            t.name, allowed_publishers=[creator], request_to_publish=True
                        )
                    else:
                        topic = await pc.create_topic(t.name)
                except SdkError as exc:
                    raise BenchError(
                        f"creating topic {t.name!r} at node{t.creator}: {exc}"
                    ) from exc
            self.topic_cids[t.name] = topic.root_cid

    async def subscribe(self, schedule: Schedule) -> None:
        from pulsarcast_ipfs.sdk import AsyncClient, ClientConfig, SdkError

        async def one(index: int, topics: tuple[str, ...]) -> None:
            async with AsyncClient(
                config=ClientConfig(api=self.sc[index].api_url, timeout=120.0)
            ) as pc:
                for name in topics:
                    where = None if self.filters is None else self.filters.filter_for(index, name)
                    call = functools.partial(
                        pc.subscribe, self.topic_cids[name], fast=self.fast, filter=where
                    )
                    try:
                        await with_retries(
                            call,
                            retry_on=subscription_timed_out,
                            retried=lambda why: self._retried(f"subscribe {why}"),
                        )
                    except SdkError as exc:
                        raise BenchError(f"node{index} subscribing to {name!r}: {exc}") from exc

        limiter = anyio.CapacityLimiter(4)

        async def limited(index: int, topics: tuple[str, ...]) -> None:
            async with limiter:
                await one(index, topics)

        async with anyio.create_task_group() as tg:
            for i, topics in enumerate(schedule.subscriptions):
                tg.start_soon(limited, i, topics)

    async def _publish(self, ev: ScheduledEvent) -> None:
        """Publish through the sidecar's HTTP API with the run's ``inject_id``.

        The runner also records ``event_injected`` itself, before the call, with the
        same ``inject_id`` as the sidecar's own record (the report and the summary
        keep the earliest record per ``inject_id``): a call that never reaches the
        sidecar (connection reset by an overloaded sidecar) still counts as injected.
        """
        created = time.time()
        data = frame_payload(ev.inject_id, created, ev.body, ev.size)
        self.writers[ev.node].write(
            RecordKind.EVENT_INJECTED,
            {"topic": ev.topic, "inject_id": ev.inject_id, "size": len(data)},
            ts=created,
        )
        body: dict[str, Any] = {
            "payload": base64.b64encode(data).decode("ascii"),
            "inject_id": ev.inject_id,
            "ack": self.ack or "local",
        }
        if ev.attributes and self.filters is not None:
            body["attributes"] = dict(ev.attributes)
        path = f"/v1/topics/{self.topic_cids[ev.topic]}/publish"
        http = self._http[ev.node]
        t0 = time.perf_counter()
        try:
            resp = await with_connect_retries(
                lambda: http.post(path, json=body), retried=self._publish_retried
            )
        except httpx.HTTPError as exc:  # never reached the sidecar, or no answer
            self._publish_failed(ev, type(exc).__name__, repr(exc))
            return
        if resp.status_code == 504 and _error_code(resp) == "not_acknowledged":
            # The event exists and is offered on: not a failed publish.
            self.not_acknowledged += 1
            return
        if resp.status_code < 300:
            self.publish_calls.append(time.perf_counter() - t0)
        if resp.status_code >= 300:  # refused: the API's error code says why
            self._publish_failed(
                ev, f"HTTP {resp.status_code} {_error_code(resp)}", resp.text[:200]
            )


def _error_code(resp: httpx.Response) -> str:
    """The sidecar API's error code of a refusal (docs/http-api.md), or ``?``."""
    try:
        code = resp.json()["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return "?"
    return code if isinstance(code, str) else "?"


FORWARD_COUNTS: Final = ("down", "pruned", "false_positive")
"""The sidecar's ``pulsarcast_forwards_<name>_total`` counters."""


def parse_forward_counts(metrics: str) -> dict[str, int] | None:
    """The forward counters in a sidecar's Prometheus text (None: it has none)."""
    out: dict[str, int] = {}
    for line in metrics.splitlines():
        for name in FORWARD_COUNTS:
            key = f"pulsarcast_forwards_{name}_total "
            if line.startswith(key):
                out[name] = int(float(line[len(key) :]))
    return out if len(out) == len(FORWARD_COUNTS) else None


_SENT_PREFIX: Final = 'pulsarcast_rpc_bytes_total{direction="sent",op="'


def parse_sent_bytes(metrics: str) -> dict[str, int]:
    """Tree RPC bytes sent, by message (``DIGEST``, ``EVENT``, …), in a sidecar's
    Prometheus text."""
    out: dict[str, int] = {}
    for line in metrics.splitlines():
        if line.startswith(_SENT_PREFIX):
            op, _, value = line[len(_SENT_PREFIX) :].partition('"} ')
            with contextlib.suppress(ValueError):
                out[op] = int(float(value))
    return out


def make_system(
    name: str,
    *,
    nodes: int,
    run: str,
    run_dir: Path,
    latency: Latency | None,
    sample_interval: float,
    say: Say | None = None,
    group_capacity: int = 16,
    filters: FilterPlan | None = None,
    ack: int = 0,
) -> System:
    """The :class:`System` named ``name`` (one of :data:`SYSTEMS`); ``filters`` is
    what ``pulsarcast-filtered`` subscribes with (the other systems take none: their
    application filters, which the summary accounts for)."""
    kw: dict[str, Any] = {
        "nodes": nodes,
        "run": run,
        "run_dir": run_dir,
        "latency": latency,
        "sample_interval": sample_interval,
        "say": say,
    }
    if name in ("gossipsub", "floodsub"):
        return KuboPubsubSystem(name, **kw)
    kw["ack"] = ack
    if name in ("pulsarcast", "pulsarcast-ordered"):
        return PulsarcastSystem(ordered=name == "pulsarcast-ordered", **kw)
    if name == "pulsarcast-fast":
        return PulsarcastSystem(ordered=False, fast=True, group_capacity=group_capacity, **kw)
    if name == "pulsarcast-filtered":
        if filters is None:
            raise BenchError("pulsarcast-filtered needs the run's filters")
        return PulsarcastSystem(ordered=False, filters=filters, **kw)
    raise BenchError(f"unknown system {name!r}")
