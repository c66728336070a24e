"""Incremental run statistics: coverage, duplicates, latency, RPCs, trees, order.

Theory of operation
-------------------
The runner streams every record to a file and feeds this accumulator, which
keeps only what the summary needs, in memory bounded by
``O(events × nodes / 8)`` bits plus ``O(nodes × topics)``:

- per publish call ``j`` (the workload's publication sequence number, known to
  the core as ``inject_id``): its topic, the *expected* set — a bitmap of the
  nodes that were live and subscribed to the topic when the call was made
  (shared, copy-on-write, between calls with the same membership) — and a
  bitmap of the nodes whose application received it;
- a latency histogram at 0.1 ms resolution (exact maximum kept apart);
- RPCs sent per node; each (node, topic)'s current tree place (role, parent,
  number of children), from ``tree_changed`` records;
- per (node, topic) the count and a rolling hash of the delivered sequence, to
  tell whether every subscriber saw the same order as the publisher.

Coverage against *published* events is Σ over published events of
(expected nodes that received it) ÷ Σ |expected|; against *injected* events
the denominator runs over every publish call. *Live* coverage restricts both
sides to the nodes alive at the end of the run: the "every live subscriber
eventually receives every published event" criterion.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from pulsarcast_ipfs.core import AttributeValue, Filter, matches
from pulsarcast_ipfs.measures import Latency, coverage, latency_of_counts, percentile
from pulsarcast_ipfs.records import MetricRecord, RecordKind

__all__ = ["RunStats", "SimSummary"]

_HASH_MOD = (1 << 61) - 1


@dataclass(frozen=True, slots=True, kw_only=True)
class SimSummary:
    """The figures of one simulation run (also written as ``summary.json``)."""

    nodes: int
    topics: int
    seed: int
    virtual_seconds: float
    wall_seconds: float
    heap_events: int
    events_injected: int
    events_skipped: int
    """Publish calls not made because the publishing node was down."""
    events_refused: int
    events_published: int
    deliveries: int
    """Event deliveries to applications (workload topics, first time per node)."""
    duplicates: int
    """Deliveries of an event a node's application had already received."""
    recovered: int
    expected_published: int
    delivered_published: int
    coverage_published: float
    coverage_injected: float
    live_expected: int
    live_delivered: int
    coverage_live: float
    missing_live: int
    latency_p50: float | None
    latency_p95: float | None
    latency_p99: float | None
    latency_max: float | None
    rpcs_total: int
    rpcs_per_node_mean: float
    rpcs_per_node_p95: float
    rpcs_per_node_max: int
    messages_lost: int
    tree_depth_max: int
    tree_depth_mean: float
    fanout_max: int
    log2_nodes: float
    order_checked: int
    """Live (node, topic) pairs that received every published event of the topic."""
    order_same: int
    """…of which saw exactly the publisher's order."""
    chain_breaks: int
    """Published events whose parents are not exactly the topic's previously published event."""
    crashed: int
    restarted: int
    crashed_roots: int
    filtered_subscriptions: int = 0
    """Subscriptions with a filter: their expected sets hold only the events
    the filter matches."""
    unwanted: int = 0
    """Deliveries of an event the subscription's filter does not match (must be 0)."""
    forwards_down: int = 0
    """(tree_filters) EVENTs sent down to a child."""
    forwards_false_positive: int = 0
    """(tree_filters) Events received from a parent (or a first hop) that nobody in the
    receiver's subtree wanted (its summary was merged wider)."""
    forwards_pruned: int = 0
    """(tree_filters) Sends pruned: to a child or a member whose summary did not match."""
    redelivered: int = 0
    """Re-deliveries, after a restart, of events the node's application had received
    before its crash: the restarted core cannot know them; the sidecar's delivery log
    suppresses them (not duplicates)."""
    deliveries_by_path: dict[str, int] = field(default_factory=dict)
    """Fast subscriptions (``--fast``): deliveries by the path of the first copy,
    ``group`` (from the publisher), ``helper``, ``tree``; empty without them."""
    attackers: int = 0
    """Attacking nodes (``--byzantine``, ``--attack``): not counted as subscribers, so
    every coverage figure above is that of the honest nodes."""
    byzantine_calls: int = 0
    """Publish calls of attackers, not made (attackers publish nothing)."""
    below_attacker_deliveries: int = 0
    """Deliveries to an honest node with an attacker among its tree ancestors then."""
    below_attacker_p50: float | None = None
    below_attacker_p99: float | None = None
    below_attacker_max: float | None = None
    """Latency (event created to delivery) of those deliveries."""
    penalties_withheld: int = 0
    """Parents left for withholding announced events (``peer_penalised``)."""
    penalties_silent_child: int = 0
    """Children dropped for joining no anti-entropy."""
    false_penalties: int = 0
    """Of those, penalties of honest peers by honest peers (a clean run must have
    none; an attacker runs the real core too, and drops the probes of its children)."""
    joins_refused_colocated: int = 0
    """(attacks) JOINs refused because the joiner's network held ``subnet_children``
    children of that tree already (docs/protocol-notes.md "Sybil joins")."""
    joins_dropped_flood: int = 0
    """(attacks) JOINs dropped over their network's JOIN bucket."""
    root_slots_attackers: int = 0
    """(attacks) Attackers among the topic roots' children at the end."""
    root_slots_cleared_after: float | None = None
    """(attacks) Over the topics whose roots had attacker children: the latest time,
    from the start of publication, at which the last of them was dropped (None: none
    had any; ``-1``: some root still has one)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_TICKS = 10_000
"""Latency histogram buckets per second (0.1 ms)."""


def _latency(hist: Mapping[int, int], total: int, top: float | None) -> Latency:
    """The measures' latency figures (nearest rank) of a 0.1 ms histogram."""
    lat = latency_of_counts(hist, _TICKS, top)
    assert lat.count == total, "histogram total mismatch"
    return lat


def _coverage(received: int, expected: int) -> float:
    """:func:`~pulsarcast_ipfs.measures.coverage`, 1.0 when nothing was expected: the
    simulator's coverage is its acceptance criterion, and nothing expected is nothing
    missed (docs/metrics.md)."""
    c = coverage(received, expected)
    return 1.0 if c is None else c


def _popcount(b: bytes | bytearray) -> int:
    return int.from_bytes(b, "little").bit_count()


class RunStats:
    """Accumulates the summary of a run from its outputs (see module docstring)."""

    def __init__(self, *, peer_ids: Sequence[str], topics: Sequence[str], calls: int) -> None:
        self.n = len(peer_ids)
        self.nbytes = (self.n + 7) // 8
        self.index = {p: i for i, p in enumerate(peer_ids)}
        self.topic_index = {t: i for i, t in enumerate(topics)}
        self.n_topics = len(topics)
        # membership: live & subscribed, per workload topic
        self._members = [bytearray(self.nbytes) for _ in topics]
        self._snapshot: list[bytes | None] = [None] * len(topics)
        self.alive = bytearray(b"\xff" * self.nbytes)
        # per publish call
        self.call_topic = [-1] * calls
        self.call_expected: list[bytes | None] = [None] * calls
        self.call_published = bytearray(calls)
        self.call_delivered: list[bytearray | None] = [None] * calls
        self.event_call: dict[str, int] = {}
        self.injected = 0
        self.paths: dict[str, int] = {}
        self.skipped = 0
        self.refused = 0
        self.published = 0
        self.deliveries = 0
        self.duplicates = 0
        self.redelivered = 0
        # restarted node -> calls delivered by its current incarnation
        self._incarnation: dict[int, set[int]] = {}
        self.recovered = 0
        self.other_deliveries = 0
        self.latency_hist: dict[int, int] = {}
        self.latency_count = 0
        self.latency_max: float | None = None
        self.rpcs = [0] * self.n
        self.lost = 0
        # trees: topic name -> node -> (role, parent index | None, children)
        self.trees: dict[str, dict[int, tuple[str, int | None, int]]] = {}
        self.fanout_max = 0
        # order
        self.seq_state: dict[int, tuple[int, int]] = {}
        self.pub_seq: list[tuple[int, int]] = [(0, 0)] * len(topics)
        self.last_published: list[str | None] = [None] * len(topics)
        self.chain_breaks = 0
        self.crashed = 0
        self.restarted = 0
        self.crashed_roots = 0
        # filters: topic -> node -> filter; the attributes of each call
        self.filters: list[dict[int, Filter]] = [{} for _ in topics]
        self.call_attrs: dict[int, Mapping[str, AttributeValue]] = {}
        self.unwanted = 0
        self.forwards_down = 0
        self.forwards_false_positive = 0
        self.forwards_pruned = 0
        # attacks (docs/simulator.md "Attacks")
        self.byzantine: frozenset[int] = frozenset()
        self.byzantine_calls = 0
        self.joins_refused: dict[str, int] = {}
        self.below_hist: dict[int, int] = {}
        self.below_count = 0
        self.below_max: float | None = None
        self.penalties: dict[str, int] = {}
        self.false_penalties = 0
        self.roots: dict[str, int] = {}
        self.root_attackers: dict[str, int] = {}
        self.root_cleared: dict[str, float | None] = {}
        self.publication_start = 0.0

    def set_byzantine(self, nodes: frozenset[int]) -> None:
        """These nodes attack: never subscribers, their deliveries not counted."""
        self.byzantine = nodes

    def _below_attacker(self, node: int, topic: str) -> bool:
        tree = self.trees.get(topic)
        if tree is None:
            return False
        entry = tree.get(node)
        for _ in range(32):
            if entry is None:
                return False
            parent = entry[1]
            if parent is None:
                return False
            if parent in self.byzantine:
                return True
            entry = tree.get(parent)
        return False

    # -- membership -------------------------------------------------------------------

    def _set_bit(self, b: bytearray, i: int, value: bool) -> None:
        if value:
            b[i >> 3] |= 1 << (i & 7)
        else:
            b[i >> 3] &= ~(1 << (i & 7)) & 0xFF

    def set_subscribed(self, node: int, topic: str, value: bool) -> None:
        t = self.topic_index.get(topic)
        if t is None or node in self.byzantine:
            return
        self._set_bit(self._members[t], node, value)
        self._snapshot[t] = None

    def set_alive(self, node: int, value: bool, topics: Sequence[str]) -> None:
        """A node crashed (or restarted): it leaves (or rejoins) the expected sets."""
        self._set_bit(self.alive, node, value)
        if not value:
            for t in range(self.n_topics):
                self._set_bit(self._members[t], node, False)
                self._snapshot[t] = None
        else:
            self._incarnation[node] = set()
            for name in topics:
                self.set_subscribed(node, name, True)

    def set_filter(self, node: int, topic: str, where: Filter) -> None:
        """``node``'s subscription to ``topic`` has a filter: it expects only matches."""
        t = self.topic_index.get(topic)
        if t is not None:
            self.filters[t][node] = where

    def _expected(self, t: int) -> bytes:
        snap = self._snapshot[t]
        if snap is None:
            snap = self._snapshot[t] = bytes(self._members[t])
        return snap

    # -- publish calls ----------------------------------------------------------------

    def on_call(
        self, j: int, topic: str, attributes: Mapping[str, AttributeValue] | None = None
    ) -> None:
        """The runner is about to make publish call ``j`` on a live node (with the
        event's ``attributes``): the expected set leaves out the subscribers whose
        filter does not match them."""
        t = self.topic_index[topic]
        self.call_topic[j] = t
        expected = self._expected(t)
        filters = self.filters[t]
        if filters:
            self.call_attrs[j] = attributes or {}
            refused = [n for n, f in filters.items() if not matches(f, attributes)]
            if refused:
                masked = bytearray(expected)
                for n in refused:
                    self._set_bit(masked, n, False)
                expected = bytes(masked)
        self.call_expected[j] = expected

    def on_record(self, rec: MetricRecord) -> None:
        kind = rec.kind
        f = rec.fields
        if kind is RecordKind.EVENT_DELIVERED:
            if self.byzantine:
                node = self.index.get(rec.node)
                if node in self.byzantine:
                    return
                lat = f.get("latency")
                topic = f.get("topic")
                if (
                    node is not None
                    and isinstance(topic, str)
                    and isinstance(lat, int | float)
                    and self._below_attacker(node, topic)
                ):
                    k = round(lat * _TICKS)
                    self.below_hist[k] = self.below_hist.get(k, 0) + 1
                    self.below_count += 1
                    if self.below_max is None or lat > self.below_max:
                        self.below_max = float(lat)
            path = f.get("path")
            if isinstance(path, str):
                self.paths[path] = self.paths.get(path, 0) + 1
            lat = f.get("latency")
            if isinstance(lat, int | float):
                key = round(lat * _TICKS)
                self.latency_hist[key] = self.latency_hist.get(key, 0) + 1
                self.latency_count += 1
                if self.latency_max is None or lat > self.latency_max:
                    self.latency_max = float(lat)
        elif kind is RecordKind.EVENT_PUBLISHED:
            self._on_published(rec)
        elif kind is RecordKind.EVENT_INJECTED:
            self.injected += 1
        elif kind is RecordKind.TREE_CHANGED:
            self._on_tree(rec)
        elif kind is RecordKind.EVENT_DROPPED:
            reason = f.get("reason")
            if reason == "colocated" or reason == "join_flood":
                self.joins_refused[reason] = self.joins_refused.get(reason, 0) + 1
        elif kind is RecordKind.PEER_PENALISED:
            reason = str(f.get("reason"))
            self.penalties[reason] = self.penalties.get(reason, 0) + 1
            if (
                self.index.get(str(f.get("peer"))) not in self.byzantine
                and self.index.get(rec.node) not in self.byzantine
            ):
                # An honest peer penalised by an honest one (an attacker runs the
                # real core too, and drops its own children's probes' answers).
                self.false_penalties += 1
        elif kind is RecordKind.SUBSCRIBED:
            node = self.index.get(rec.node)
            if node is not None and isinstance(f.get("topic"), str):
                self.set_subscribed(node, f["topic"], True)
        elif kind is RecordKind.UNSUBSCRIBED:
            node = self.index.get(rec.node)
            if node is not None and isinstance(f.get("topic"), str):
                self.set_subscribed(node, f["topic"], False)

    def _on_published(self, rec: MetricRecord) -> None:
        f = rec.fields
        inject = f.get("inject_id")
        event = f.get("event")
        if not isinstance(inject, str) or not isinstance(event, str):
            return
        head = inject.split("-", 1)[0]
        if not head.isdigit() or int(head) >= len(self.call_topic):
            return
        j = int(head)
        t = self.call_topic[j]
        if t < 0:
            return
        if self.call_published[j]:
            # the same call published twice would be a protocol bug: count as a chain break
            self.chain_breaks += 1
            return
        self.call_published[j] = 1
        self.call_delivered[j] = bytearray(self.nbytes)
        self.event_call[event] = j
        self.published += 1
        parents = f.get("parents")
        last = self.last_published[t]
        if parents != ([last] if last is not None else []) and last is not None:
            self.chain_breaks += 1
        self.last_published[t] = event
        count, h = self.pub_seq[t]
        self.pub_seq[t] = (count + 1, (h * 1_000_003 + j + 1) % _HASH_MOD)

    def _on_tree(self, rec: MetricRecord) -> None:
        f = rec.fields
        node = self.index.get(rec.node)
        topic = f.get("topic")
        if node is None or not isinstance(topic, str):
            return
        children = f.get("children")
        nchildren = len(children) if isinstance(children, list) else 0
        if nchildren > self.fanout_max:
            self.fanout_max = nchildren
        parent = f.get("parent")
        pidx = self.index.get(parent) if isinstance(parent, str) else None
        role = str(f.get("role"))
        if self.byzantine and self.roots.get(topic) == node and isinstance(children, list):
            bad = sum(1 for c in children if self.index.get(c) in self.byzantine)
            before = self.root_attackers.get(topic, 0)
            self.root_attackers[topic] = bad
            if bad == 0 and before > 0:
                self.root_cleared[topic] = rec.ts - self.publication_start
            elif bad > 0:
                self.root_cleared[topic] = None
        tree = self.trees.setdefault(topic, {})
        if role == "none":
            tree.pop(node, None)
        else:
            tree[node] = (role, pidx, nchildren)

    def on_deliver(self, node: int, event_cid: str, recovered: bool) -> None:
        j = self.event_call.get(event_cid)
        if j is None:
            self.other_deliveries += 1
            return
        delivered = self.call_delivered[j]
        assert delivered is not None
        byte, bit = node >> 3, 1 << (node & 7)
        fresh = self._incarnation.get(node)
        if fresh is not None:
            if j in fresh:
                self.duplicates += 1
                return
            fresh.add(j)
            if delivered[byte] & bit:
                self.redelivered += 1  # delivered before the crash: the log suppresses it
                return
        if delivered[byte] & bit:
            self.duplicates += 1
            return
        delivered[byte] |= bit
        self.deliveries += 1
        where = self.filters[self.call_topic[j]].get(node)
        if where is not None and not matches(where, self.call_attrs.get(j)):
            self.unwanted += 1
        if recovered:
            self.recovered += 1
        key = node * self.n_topics + self.call_topic[j]
        count, h = self.seq_state.get(key, (0, 0))
        self.seq_state[key] = (count + 1, (h * 1_000_003 + j + 1) % _HASH_MOD)

    # -- the end ----------------------------------------------------------------------

    def tree_depths(self) -> list[int]:
        """Depth of every tree member below its root, over the workload topics' trees."""
        depths: list[int] = []
        for name in self.topic_index:
            tree = self.trees.get(name, {})
            memo: dict[int, int] = {}
            for start in tree:
                if start in memo:
                    continue
                path: list[int] = []
                on_path: set[int] = set()
                cur: int | None = start
                while cur is not None and cur in tree and cur not in memo and cur not in on_path:
                    path.append(cur)
                    on_path.add(cur)
                    cur = tree[cur][1]
                # a root (parent None), a detached top (dangling parent) or a cycle: depth 0
                base = memo[cur] + 1 if cur is not None and cur in memo else 0
                for p in reversed(path):
                    memo[p] = base
                    base += 1
            depths.extend(memo[n] for n in tree)
        return depths

    def summary(
        self,
        *,
        seed: int,
        virtual_seconds: float,
        wall_seconds: float,
        heap_events: int,
    ) -> SimSummary:
        alive = int.from_bytes(self.alive, "little")
        exp_pub = del_pub = exp_all = live_exp = live_del = 0
        for j, t in enumerate(self.call_topic):
            if t < 0:
                continue
            expected_b = self.call_expected[j]
            assert expected_b is not None
            expected = int.from_bytes(expected_b, "little")
            n_exp = expected.bit_count()
            exp_all += n_exp
            if not self.call_published[j]:
                continue
            delivered_b = self.call_delivered[j]
            assert delivered_b is not None
            delivered = int.from_bytes(delivered_b, "little")
            exp_pub += n_exp
            del_pub += (expected & delivered).bit_count()
            live = expected & alive
            live_exp += live.bit_count()
            live_del += (live & delivered).bit_count()
        rpcs = sorted(self.rpcs)
        lat = _latency(self.latency_hist, self.latency_count, self.latency_max)
        depths = self.tree_depths()
        checked = same = 0
        for key, state in self.seq_state.items():
            node, t = divmod(key, self.n_topics)
            if not (alive >> node) & 1:
                continue
            if state[0] == self.pub_seq[t][0]:
                checked += 1
                same += state == self.pub_seq[t]
        return SimSummary(
            deliveries_by_path=dict(sorted(self.paths.items())),
            nodes=self.n,
            topics=self.n_topics,
            seed=seed,
            virtual_seconds=virtual_seconds,
            wall_seconds=wall_seconds,
            heap_events=heap_events,
            events_injected=self.injected,
            events_skipped=self.skipped,
            events_refused=self.refused,
            events_published=self.published,
            deliveries=self.deliveries,
            duplicates=self.duplicates,
            redelivered=self.redelivered,
            recovered=self.recovered,
            expected_published=exp_pub,
            delivered_published=del_pub,
            coverage_published=_coverage(del_pub, exp_pub),
            coverage_injected=_coverage(del_pub, exp_all),
            live_expected=live_exp,
            live_delivered=live_del,
            coverage_live=_coverage(live_del, live_exp),
            missing_live=live_exp - live_del,
            latency_p50=lat.p50,
            latency_p95=lat.p95,
            latency_p99=lat.p99,
            latency_max=lat.max,
            rpcs_total=sum(rpcs),
            rpcs_per_node_mean=sum(rpcs) / len(rpcs) if rpcs else 0.0,
            rpcs_per_node_p95=float(percentile(rpcs, 0.95) or 0),
            rpcs_per_node_max=rpcs[-1] if rpcs else 0,
            messages_lost=self.lost,
            tree_depth_max=max(depths, default=0),
            tree_depth_mean=sum(depths) / len(depths) if depths else 0.0,
            fanout_max=self.fanout_max,
            log2_nodes=math.log2(self.n) if self.n else 0.0,
            order_checked=checked,
            order_same=same,
            chain_breaks=self.chain_breaks,
            crashed=self.crashed,
            restarted=self.restarted,
            crashed_roots=self.crashed_roots,
            filtered_subscriptions=sum(len(f) for f in self.filters),
            unwanted=self.unwanted,
            forwards_down=self.forwards_down,
            forwards_false_positive=self.forwards_false_positive,
            forwards_pruned=self.forwards_pruned,
            **self._attack_summary(),
        )

    def _attack_summary(self) -> dict[str, Any]:
        if not self.byzantine:
            return {
                "penalties_withheld": self.penalties.get("withheld", 0),
                "penalties_silent_child": self.penalties.get("silent_child", 0),
                "false_penalties": self.false_penalties,
            }
        cleared: float | None = None
        if self.root_cleared:
            times = list(self.root_cleared.values())
            cleared = (
                -1.0 if any(t is None for t in times) else max(t for t in times if t is not None)
            )
        below = _latency(self.below_hist, self.below_count, self.below_max)
        return {
            "attackers": len(self.byzantine),
            "byzantine_calls": self.byzantine_calls,
            "below_attacker_deliveries": self.below_count,
            "below_attacker_p50": below.p50,
            "below_attacker_p99": below.p99,
            "below_attacker_max": below.max,
            "penalties_withheld": self.penalties.get("withheld", 0),
            "penalties_silent_child": self.penalties.get("silent_child", 0),
            "false_penalties": self.false_penalties,
            "joins_refused_colocated": self.joins_refused.get("colocated", 0),
            "joins_dropped_flood": self.joins_refused.get("join_flood", 0),
            "root_slots_attackers": sum(self.root_attackers.values()),
            "root_slots_cleared_after": cleared,
        }

    def missing_report(self, limit: int = 20) -> list[tuple[int, int, list[int]]]:
        """Up to ``limit`` published calls some live expected node missed: (call, topic, nodes)."""
        alive = int.from_bytes(self.alive, "little")
        out: list[tuple[int, int, list[int]]] = []
        for j, t in enumerate(self.call_topic):
            if t < 0 or not self.call_published[j]:
                continue
            expected_b, delivered_b = self.call_expected[j], self.call_delivered[j]
            assert expected_b is not None and delivered_b is not None
            miss = (
                int.from_bytes(expected_b, "little")
                & alive
                & ~int.from_bytes(delivered_b, "little")
            )
            if miss:
                nodes = [i for i in range(self.n) if (miss >> i) & 1]
                out.append((j, t, nodes))
                if len(out) >= limit:
                    break
        return out

    def diagnose(self, node: int, topic: int) -> dict[str, Any]:
        """Where ``node`` sits in ``topic``'s tree at the end (for reports on missed events)."""
        tree = self.trees.get(list(self.topic_index)[topic], {})
        place = tree.get(node)
        alive = bytes(self.alive)
        if place is None:
            return {"node": node, "in_tree": False}
        role, parent, children = place
        return {
            "node": node,
            "in_tree": True,
            "role": role,
            "parent": parent,
            "parent_alive": None
            if parent is None
            else bool(alive[parent >> 3] >> (parent & 7) & 1),
            "parent_in_tree": None if parent is None else parent in tree,
            "children": children,
        }
