"""Memory per retained event of one node's protocol core — not a test.

A subscriber's core keeps the history of each topic it follows within its retention
policy (``RetentionPolicy``: 10,000 events per topic by default). What it holds per
retained event is what a long-running sidecar grows by until the policy starts
evicting, times the topics it follows. This benchmark measures it.

Two protocol cores run in process (no network, no Kubo): the author ``A`` of ``T``
topics and a subscriber ``B`` of all of them, joined as A's child through their own
JOIN / JOIN_ACK. Then ``N`` signed events (``--size`` bytes of payload, one string
attribute each unless ``--no-attributes``; signed the way a sidecar signs its own,
with a delegated key and one signature) are fed to B as EVENT RPCs from A, round
robin over the topics, each linking the previous event of its topic. Virtual time
moves ``1 / --rate`` seconds per event, and both cores' timers fire as they fall due
(PINGs reach A and are answered; B's anti-entropy RPCs to A are dropped, A never saw
these events). B's outputs are carried out as a driver would and then forgotten;
its ``StoreBlock(retain)`` and ``ReleaseBlocks`` also go where a sidecar's block
store puts them beside the core: its retained flags (``CIDFlags``: whether each
retained event is its own) and its retention index
(``sidecar._retainindex.RetainIndex``).

Reported: retained events; bytes per retained event as Python allocations
(``tracemalloc``, running from the start; the growth from ``--warmup`` events to the
last, divided by the events retained since) and as process RSS growth
(``/proc/self/status`` VmRSS, the same way; tracemalloc's own bookkeeping inflates
RSS, so ``--no-trace`` measures RSS alone); and where the allocations went
(tracemalloc's top lines by size). The warm-up must fill the bounded caches and
each topic's anti-entropy window (1,088 events a topic by default) to measure what
grows with the history alone: ``--warmup 150000`` for 100 topics.

    .venv/bin/python benchmarks/retained_memory.py                      # 20,000 events, 3 topics
    .venv/bin/python benchmarks/retained_memory.py --events 250000 --warmup 150000 \
        --topics 100 --no-trace
    .venv/bin/python benchmarks/retained_memory.py --events 1000000 --topics 100 --no-trace --json
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pulsarcast_ipfs.core import NodeConfig, PulsarcastNode, RetentionPolicy, TopicHistory
from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.core._codec import Digest, Event, Heads
from pulsarcast_ipfs.core._delegation import DelegateKey, Delegation
from pulsarcast_ipfs.core._descriptors import (
    ATTRIBUTES_VERSION,
    PROTOCOL_VERSION,
    SIGNED_ATTRIBUTES_VERSION,
    SIGNED_VERSION,
    EventDescriptor,
    format_created,
)
from pulsarcast_ipfs.core._digesttable import CIDFlags
from pulsarcast_ipfs.core._io import (
    FetchBlock,
    OperationDone,
    ReleaseBlocks,
    SendRpc,
    SignRequest,
    StoreBlock,
)
from pulsarcast_ipfs.core._signing import Ed25519Signer
from pulsarcast_ipfs.core.testing import make_peer_ids, make_signers
from sidecar._retainindex import RetainIndex

START = 1_767_225_600.0


def rss_bytes() -> int:
    """This process's resident set size now (Linux ``/proc``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


class Pair:
    """Author ``A`` and subscriber ``B``, two cores wired to each other by hand."""

    def __init__(self, *, topics: int, seed: int, policy: RetentionPolicy) -> None:
        self.signers: dict[str, Ed25519Signer] = {s.peer_id: s for s in make_signers(2, seed=seed)}
        self.a_id, self.b_id = list(self.signers)
        config = NodeConfig(require_signatures=True, retention=policy)
        self.now = START
        self.a = PulsarcastNode(
            peer_id=self.a_id, config=config, rng=random.Random(seed), now=self.now
        )
        self.b = PulsarcastNode(
            peer_id=self.b_id, config=config, rng=random.Random(seed + 1), now=self.now
        )
        self.a.set_known_peers(self.now, [self.b_id])
        self.b.set_known_peers(self.now, [self.a_id])
        self.index = RetainIndex()
        self.flags = CIDFlags()
        """The store's own flag per retained event (``sidecar._store``'s ``_retained``)."""
        self.retained_blocks = 0
        self.topic_blocks: dict[CID, bytes] = {}
        """A's topic descriptors (what B fetches to subscribe); events are not kept."""
        self.done: dict[str, OperationDone] = {}
        self.topics: list[CID] = []
        for i in range(topics):
            pending = self.a.create_topic(self.now, f"topic-{i}")
            self.carry_out()
            done = self.done[pending.op] if not isinstance(pending, CID) else None
            cid = done.result if done is not None else pending
            assert isinstance(cid, CID), done
            self.topics.append(cid)
        for cid in self.topics:
            self.b.subscribe(self.now, cid)
        self.carry_out()
        self.advance(5.0)
        for cid in self.topics:
            state = self.b.topic_state(cid)
            if not state.joined or state.parent != self.a_id:
                raise RuntimeError(f"B did not join A's tree of {cid}: {state}")

    def carry_out(self, *, b_to_a_all: bool = True) -> None:
        """Carry out both cores' outputs until neither has any."""
        busy = True
        while busy:
            busy = False
            for me, other, other_id, my_id in (
                (self.a, self.b, self.b_id, self.a_id),
                (self.b, self.a, self.a_id, self.b_id),
            ):
                for out in me.take_outputs():
                    busy = True
                    if isinstance(out, SignRequest):
                        me.signed(self.now, out.request_id, self.signers[my_id].sign(out.data))
                    elif isinstance(out, OperationDone):
                        self.done[out.op] = out
                    elif isinstance(out, SendRpc) and out.peer == other_id:
                        if me is self.b and not b_to_a_all and isinstance(out.rpc, Heads | Digest):
                            continue  # A never saw the events B advertises
                        other.receive_rpc(self.now, my_id, out.rpc, size=len(out.data))
                    elif isinstance(out, FetchBlock):
                        me.block_fetched(self.now, out.cid, self.topic_blocks.get(out.cid))
                    elif me is self.a and isinstance(out, StoreBlock) and out.announce:
                        self.topic_blocks[out.cid] = out.data
                    elif me is self.b and isinstance(out, StoreBlock) and out.retain:
                        self.retained_blocks += 1
                        self.flags[out.cid] = out.own
                        if not out.own:
                            self.index.add(out.cid)
                    elif me is self.b and isinstance(out, ReleaseBlocks):
                        for cid in out.cids:
                            if not self.flags.pop(cid):
                                self.index.remove(cid)

    def advance(self, seconds: float) -> None:
        """Move virtual time on, firing both cores' timers as they fall due."""
        end = self.now + seconds
        while True:
            due = [t for t in (self.a.get_timer(), self.b.get_timer()) if t is not None]
            nxt = min(due) if due else None
            if nxt is None or nxt > end:
                break
            self.now = max(self.now, nxt)
            for node in (self.a, self.b):
                t = node.get_timer()
                if t is not None and t <= self.now:
                    node.handle_timer(self.now)
            self.carry_out(b_to_a_all=False)
        self.now = end

    def retained(self) -> int:
        return sum(self.b.topic_state(t).retained for t in self.topics)


class Feed:
    """Signed events of A, one topic after another, each linking its topic's last."""

    def __init__(self, pair: Pair, *, size: int, attributes: bool, delegated: bool = True) -> None:
        self.pair = pair
        self.size = size
        self.attributes = attributes
        self.delegated = delegated
        signer = pair.signers[pair.a_id]
        self.signer = signer
        if delegated:
            key = DelegateKey(bytes(range(32)))
            expires = int(START + 30 * 86400)
            key = key.with_delegation(
                Delegation(
                    key=key.public_key,
                    expires=expires,
                    signature=signer.sign(key.statement(signer.peer_id, expires)),
                )
            )
            pair.a.use_delegate(pair.now, key)
        self.last: dict[CID, tuple[CID, int]] = {}

    def event(self, i: int, topic: CID) -> bytes:
        """The encoded event ``i`` of ``topic`` (signed)."""
        prev = self.last.get(topic)
        payload = (b"event %d " % i).ljust(self.size, b".")
        draft = EventDescriptor(
            topic=topic,
            author=self.signer.peer_id,
            publisher=self.signer.peer_id,
            parents=(prev[0],) if prev else (),
            clock=prev[1] + 1 if prev else 0,
            payload=payload,
            created=format_created(self.pair.now),
            protocol_version=SIGNED_ATTRIBUTES_VERSION if self.attributes else SIGNED_VERSION,
            attributes={"kind": "abc"[i % 3]} if self.attributes else None,
        )
        steps = self.pair.a._signing.signed_event(draft, topic)
        try:
            steps.send(None)  # type: ignore[arg-type]
        except StopIteration as stop:
            ev: EventDescriptor = stop.value
        else:
            raise RuntimeError("the delegated key did not sign at once")
        self.last[topic] = (ev.cid, ev.clock)
        return ev.encode()


def run_index_only(args: argparse.Namespace) -> dict[str, Any]:
    """``--index-only``: the per-event structures alone, fast enough for a million
    events: each topic's ``TopicHistory`` (add, then enforce, as the core's ``_retain``
    does) and the sidecar's ``RetainIndex``, fed unsigned events built in process (no
    protocol, no signatures, none of the core's bounded caches)."""
    policy = RetentionPolicy(max_events=args.max_events)
    author = make_peer_ids(1, seed=args.seed)[0]
    topics = [CID.dag_cbor_sha256(i.to_bytes(32, "big")) for i in range(args.topics)]
    histories = {t: TopicHistory(policy=policy) for t in topics}
    index = RetainIndex()
    flags = CIDFlags()
    last: dict[CID, tuple[CID, int]] = {}
    now = START
    version = ATTRIBUTES_VERSION if not args.no_attributes else PROTOCOL_VERSION

    def feed(i: int) -> None:
        nonlocal now
        topic = topics[i % len(topics)]
        prev = last.get(topic)
        ev = EventDescriptor(
            topic=topic,
            author=author,
            publisher=author,
            parents=(prev[0],) if prev else (),
            clock=prev[1] + 1 if prev else 0,
            payload=(b"event %d " % i).ljust(args.size, b"."),
            created=format_created(now),
            protocol_version=version,
            attributes={"kind": "abc"[i % 3]} if not args.no_attributes else None,
        )
        cid = ev.cid
        ev.encode()
        last[topic] = (cid, ev.clock)
        h = histories[topic]
        if h.add(cid, ev, now):
            flags[cid] = False
            index.add(cid)
            for gone in h.enforce(now):
                flags.pop(gone)
                index.remove(gone)
        now += 1.0 / args.rate

    return _measure(args, feed, lambda: sum(len(h) for h in histories.values()), index)


def _measure(
    args: argparse.Namespace,
    feed: Callable[[int], None],
    retained: Callable[[], int],
    index: RetainIndex,
) -> dict[str, Any]:
    """Feed events ``0 .. --events``; measure from ``--warmup`` on.

    tracemalloc runs from the start: a block allocated before it started and freed
    after (an evicted cache entry) or grown after (a buffer) would otherwise count
    as an allocation and never as a free."""
    trace = not args.no_trace
    if trace:
        tracemalloc.start(args.frames)
    for i in range(min(args.warmup, args.events)):
        feed(i)
    gc.collect()
    base_retained = retained()
    base_rss = rss_bytes()
    base_snap = tracemalloc.take_snapshot() if trace else None
    base_traced = tracemalloc.get_traced_memory()[0] if trace else 0
    t0 = time.perf_counter()
    for i in range(args.warmup, args.events):
        feed(i)
        if args.progress and i and i % args.progress == 0:
            print(f"  {i:,} events, RSS {rss_bytes() / 2**20:.1f} MiB", file=sys.stderr)
    elapsed = time.perf_counter() - t0
    gc.collect()
    now_retained = retained()
    rss = rss_bytes()
    end_traced = tracemalloc.get_traced_memory()[0] if trace else 0
    grown = now_retained - base_retained
    out: dict[str, Any] = {
        "mode": "index-only" if args.index_only else "core",
        "events": args.events,
        "topics": args.topics,
        "size": args.size,
        "attributes": not args.no_attributes,
        "retained": now_retained,
        "retained_measured": grown,
        "index_links": len(index),
        "rss_base_mib": round(base_rss / 2**20, 1),
        "rss_mib": round(rss / 2**20, 1),
        "rss_per_event": round((rss - base_rss) / grown, 1) if grown else None,
        "seconds": round(elapsed, 1),
        "tracemalloc": trace,
    }
    if trace:
        assert base_snap is not None
        snap = tracemalloc.take_snapshot()
        traced = end_traced - base_traced
        out["traced_per_event"] = round(traced / grown, 1) if grown else None
        out["top_lines"] = [
            {
                "where": f"{Path(s.traceback[0].filename).name}:{s.traceback[0].lineno}",
                "bytes_per_event": round(s.size_diff / grown, 1) if grown else None,
                "blocks": s.count_diff,
            }
            for s in snap.compare_to(base_snap, "lineno")[: args.top]
        ]
        out["by_file"] = [
            {
                "file": "/".join(s.traceback[0].filename.rsplit("/", 2)[-2:]),
                "bytes_per_event": round(s.size_diff / grown, 1) if grown else None,
            }
            for s in snap.compare_to(base_snap, "filename")[: args.top]
        ]
        tracemalloc.stop()
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    policy = RetentionPolicy(max_events=args.max_events)
    pair = Pair(topics=args.topics, seed=args.seed, policy=policy)
    feed = Feed(pair, size=args.size, attributes=not args.no_attributes)
    step = 1.0 / args.rate
    b, a_id = pair.b, pair.a_id

    def feed_one(i: int) -> None:
        topic = pair.topics[i % len(pair.topics)]
        b.receive_rpc(pair.now, a_id, Event(topic=topic, event=feed.event(i, topic)))
        pair.carry_out(b_to_a_all=False)
        pair.advance(step)

    return _measure(args, feed_one, pair.retained, pair.index)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description="Bytes of memory per retained event in a subscriber's protocol core "
        "(signed events fed to one core; tracemalloc and RSS growth).",
        epilog="Example: benchmarks/retained_memory.py --events 200000 --topics 100 --no-trace",
    )
    p.add_argument("--events", type=int, default=20_000, help="events fed (default 20000)")
    p.add_argument("--topics", type=int, default=3, help="topics, round robin (default 3)")
    p.add_argument("--size", type=int, default=1024, help="payload bytes (default 1024)")
    p.add_argument(
        "--max-events",
        type=int,
        default=10_000,
        help="retention: events kept per topic (default 10000, the default policy)",
    )
    p.add_argument("--rate", type=float, default=1000.0, help="virtual events/s (default 1000)")
    p.add_argument(
        "--warmup", type=int, default=2000, help="events fed before the base is taken (2000)"
    )
    p.add_argument("--no-attributes", action="store_true", help="events without attributes")
    p.add_argument("--no-trace", action="store_true", help="RSS only (no tracemalloc)")
    p.add_argument(
        "--index-only",
        action="store_true",
        help="only the histories and the retention index, fed directly (no protocol, "
        "no signatures, no bounded caches): fast enough for 1,000,000 events",
    )
    p.add_argument("--frames", type=int, default=1, help="tracemalloc frames (default 1)")
    p.add_argument("--top", type=int, default=15, help="lines/files listed (default 15)")
    p.add_argument("--progress", type=int, default=0, help="print RSS every this many events")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = p.parse_args(argv)
    if args.events < 1 or args.topics < 1 or args.size < 0 or args.rate <= 0:
        p.error("--events and --topics must be positive, --size >= 0, --rate > 0")
    if args.warmup >= args.events:
        p.error("--warmup must be below --events")
    out = run_index_only(args) if args.index_only else run(args)
    if args.json:
        print(json.dumps(out))
        return 0
    print(
        f"{out['mode']}: {out['events']:,} events of {out['size']} B over {out['topics']} topics: "
        f"{out['retained']:,} retained ({out['retained_measured']:,} since the base), "
        f"{out['seconds']} s"
    )
    print(
        f"RSS {out['rss_base_mib']} -> {out['rss_mib']} MiB: "
        f"{out['rss_per_event']} B per retained event"
        + (" (tracemalloc on: inflated)" if out["tracemalloc"] else "")
    )
    if out["tracemalloc"]:
        print(f"Python allocations: {out['traced_per_event']} B per retained event")
        print("by file:")
        for f in out["by_file"]:
            print(f"  {f['bytes_per_event']:>9} B  {f['file']}")
        print("by line:")
        for t in out["top_lines"]:
            print(f"  {t['bytes_per_event']:>9} B  {t['where']}  ({t['blocks']:+} blocks)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
