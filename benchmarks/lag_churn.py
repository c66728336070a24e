"""Tree churn under machine-wide delays (50-node runs) — not a test.

On a machine where every process waits for a core (50 Kubo daemons and 50 sidecars
on 2 cores), every tree parent answers late now and then. This runs a CoreNet of N
nodes and T topics (about half the nodes subscribe to each), lets the trees settle,
then delays every message by up to ``--stall`` seconds more (``stall * U³``, U
uniform: mostly short, sometimes long) while a random member publishes 5 events per
second, then lets it settle again, and prints the JOIN, LEAVE and MEMBERS frames
sent from the moment the delays began: the control-plane churn the delays caused.

    PYTHONPATH=. .venv/bin/python benchmarks/lag_churn.py --stall 2
    PYTHONPATH=. .venv/bin/python benchmarks/lag_churn.py --stall 2 --flat-fanout 0 --bucket-size 2
"""

from __future__ import annotations

import argparse
import json
import random

from pulsarcast_ipfs.core import Join, Leave, Members, NodeConfig
from pulsarcast_ipfs.core.testing import CoreNet

KINDS = (Join, Leave, Members)


def churn(
    *,
    stall: float,
    nodes: int = 50,
    topics: int = 3,
    seconds: float = 60.0,
    flat_fanout: int = 64,
    bucket_size: int | None = None,
    seed: int = 1,
) -> dict[str, int]:
    cfg = NodeConfig(flat_fanout=flat_fanout)
    kw = {} if bucket_size is None else {"bucket_size": bucket_size}
    net = CoreNet(nodes, seed=seed, config=cfg, **kw)  # type: ignore[arg-type]
    rng = random.Random(seed)
    trees = []
    for t in range(topics):
        author = net.peers[t]
        trees.append(net.call(author, "create_topic", f"t{t}"))
    net.run_for(0.5)
    members: dict[object, list[str]] = {}
    for t, topic in enumerate(trees):
        members[topic] = [net.peers[t]]
        for p in net.peers[topics:]:
            if rng.random() < 0.5:
                net.call(p, "subscribe", topic)
                members[topic].append(p)
    net.run_for(20)

    def sent() -> dict[str, int]:
        return {
            k.__name__: sum(isinstance(s.rpc, k) for p in net.peers for s in net.logs[p].sent)
            for k in KINDS
        }

    before = sent()
    net.extra_delay = lambda a, b: stall * rng.random() ** 3
    for i in range(int(seconds * 5)):
        topic = trees[i % topics]
        net.call(rng.choice(members[topic]), "publish", topic, b"x")
        net.run_for(0.2)
    net.extra_delay = None
    net.run_for(20)
    after = sent()
    return {k: after[k] - before[k] for k in after}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stall", type=float, default=2.0, help="largest extra delay, s (2)")
    ap.add_argument("--nodes", type=int, default=50)
    ap.add_argument("--topics", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=60.0, help="delayed period (60)")
    ap.add_argument("--flat-fanout", type=int, default=64, help="0: flat trees off (64)")
    ap.add_argument("--bucket-size", type=int, default=None, help="routing k (all peers)")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    out = churn(**vars(a))  # the flags are churn()'s keywords
    print(json.dumps({"config": vars(a), "frames_sent": out}))


if __name__ == "__main__":
    main()
