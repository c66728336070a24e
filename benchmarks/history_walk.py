"""History walk benchmark — not a test.

One node, the author of a topic, holds N events (default 10,000) published by
itself and received from two concurrent publishers, so the topic's DAG has
branches. It then pages through the whole history, newest first and oldest first,
with ``PulsarcastNode.history`` the way the HTTP API does, and prints events per
second of the walk, of building the history, and the peak memory (Python heap, by
tracemalloc) of the retained history.

    .venv/bin/python benchmarks/history_walk.py                 # 10,000 events
    .venv/bin/python benchmarks/history_walk.py --events 100000 --page 500
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import tracemalloc

from pulsarcast_ipfs.core import (
    Event,
    EventDescriptor,
    NodeConfig,
    PulsarcastNode,
    RetentionPolicy,
    format_created,
    sort_parents,
)
from pulsarcast_ipfs.core.testing import make_peer_ids

T0 = 1_767_225_600.0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--events", type=int, default=10_000)
    p.add_argument("--page", type=int, default=50, help="page size of the walk (default 50)")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args(argv)
    if a.events < 1 or a.page < 1:
        p.error("--events and --page must be positive")
    rng = random.Random(a.seed)
    me, *others = make_peer_ids(3, seed=a.seed)
    config = NodeConfig(retention=RetentionPolicy(max_events=a.events + 1, max_bytes=2**40))
    node = PulsarcastNode(peer_id=me, config=config, rng=random.Random(a.seed), now=T0)
    topic = node.create_topic(T0, "walk")
    assert not isinstance(topic, type(None))
    node.take_outputs()

    # Two other publishers' events arrive over the "network" (as EVENT RPCs from a
    # child), each linking the heads its publisher knew: the DAG branches and merges.
    views: dict[str, list[EventDescriptor]] = {o: [] for o in others}
    tracemalloc.start()
    began = time.perf_counter()
    now = T0
    for i in range(a.events):
        now += 0.001
        who = rng.choice([me, *others])
        if who == me:
            node.publish(now, topic, b"event %d" % i)  # type: ignore[arg-type]
        else:
            seen = views[who]
            ev = EventDescriptor(
                topic=topic,  # type: ignore[arg-type]
                author=who,
                publisher=who,
                parents=sort_parents(e.cid for e in seen),
                clock=1 + max((e.clock for e in seen), default=-1),
                payload=b"event %d" % i,
                created=format_created(now),
            )
            node.receive_rpc(now, who, Event(topic=topic, event=ev.encode()))  # type: ignore[arg-type]
            views[who] = [ev]
        if rng.random() < 0.3:  # a publisher hears of the newest events
            o = rng.choice(others)
            views[o] = [d for _, d in node.history(topic, limit=2).events]  # type: ignore[arg-type]
        node.take_outputs()
    build = time.perf_counter() - began
    _, peak_build = tracemalloc.get_traced_memory()

    results = []
    for order in ("newest", "oldest"):
        tracemalloc.reset_peak()
        before, _ = tracemalloc.get_traced_memory()
        t = time.perf_counter()
        walked, after = 0, None
        while True:
            page = node.history(topic, order=order, after=after, limit=a.page)  # type: ignore[arg-type]
            walked += len(page.events)
            if page.next is None:
                break
            after = page.next
        dt = time.perf_counter() - t
        _, peak = tracemalloc.get_traced_memory()
        results.append((order, walked, dt, peak - before))
    first = node.history(topic, limit=1)  # type: ignore[arg-type]
    print(
        f"events retained: {first.retained}, heads: {len(first.heads)}, complete: {first.complete}"
    )
    print(f"build (publish + receive + retain): {a.events / build:,.0f} events/s")
    print(f"peak Python heap while building: {peak_build / 2**20:.1f} MiB")
    for order, walked, dt, extra in results:
        print(
            f"walk {order} first, pages of {a.page}: {walked:,} events in {dt * 1000:.0f} ms "
            f"= {walked / dt:,.0f} events/s, extra peak memory {extra / 2**10:.0f} KiB"
        )
    return 0 if all(r[1] == a.events for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
