"""The workload parser and its scaling rule (pulsarcast_ipfs.workload)."""

from __future__ import annotations

import collections
import json
from pathlib import Path

import pytest

from pulsarcast_ipfs.workload import (
    Workload,
    WorkloadError,
    load_workload,
    shipped_workload_path,
)


@pytest.fixture(scope="module")
def w25k() -> Workload:
    return load_workload()


def test_shipped_files_and_attribution() -> None:
    path = shipped_workload_path()
    assert path.name == "reddit-2007-25k.jsonl"
    assert shipped_workload_path("reddit-2007-10k.jsonl").is_file()
    attribution = (path.parent / "ATTRIBUTION.md").read_text(encoding="utf-8")
    assert "JGAntunes/pulsarcast-test-harness" in attribution
    assert "João Antunes" in attribution and "MIT" in attribution


def test_parse_25k(w25k: Workload) -> None:
    assert len(w25k.topics) == 23
    assert len(w25k.users) == 100
    assert w25k.total_events == 17_611
    assert sum(len(u.subscriptions) for u in w25k.users) == 762
    top = w25k.topics[0]
    assert (top.name, top.creator, top.total_events) == ("reddit.com", 0, 10_559)
    for t in w25k.topics:
        assert t.total_events == sum(1 for u in w25k.users for e in u.events if e.topic == t.name)


def _write(tmp_path: Path, lines: list[object]) -> Path:
    p = tmp_path / "w.jsonl"
    p.write_text(
        "\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n",
        encoding="utf-8",
    )
    return p


TOPIC = {"type": "topic", "node": "node-1", "name": "a", "author": "x", "totalNumberEvents": 1}
USER = {
    "type": "user",
    "node": "node-1",
    "name": "x",
    "subscriptions": ["a"],
    "events": [{"internalId": 0, "topic": "a", "ups": 1, "downs": 0, "controversiality": 0}],
}


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ([TOPIC, "{not json"], r"w\.jsonl:2: not valid JSON"),
        ([TOPIC, [1]], r"w\.jsonl:2: a line must be a JSON object"),
        ([TOPIC, {**USER, "type": "comment"}], r"w\.jsonl:2: unknown record type 'comment'"),
        ([TOPIC, {**USER, "node": "n1"}], r"w\.jsonl:2: 'node' must be"),
        ([TOPIC, {**USER, "subscriptions": ["zzz"]}], r"w\.jsonl:2: subscription to unknown"),
        ([{**TOPIC, "totalNumberEvents": "3"}, USER], r"w\.jsonl:1: field 'totalNumberEvents'"),
        ([TOPIC, TOPIC, USER], r"w\.jsonl:2: duplicate topic 'a'"),
        ([TOPIC, USER, USER], r"w\.jsonl:3: node-1 already has a user \(line 2\)"),
        (
            [TOPIC, {**USER, "events": [{"internalId": True, "topic": "a"}]}],
            r"w\.jsonl:2: event #0: field 'internalId'",
        ),
        ([TOPIC, {**USER, "node": "node-2"}], r"not numbered densely"),
        ([TOPIC], r"no user records"),
    ],
)
def test_strict_errors(tmp_path: Path, lines: list[object], message: str) -> None:
    with pytest.raises(WorkloadError, match=message):
        load_workload(_write(tmp_path, lines))


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="cannot read workload"):
        load_workload(tmp_path / "nope.jsonl")


def test_small_network_maps_user_k_to_node_k_mod_n(w25k: Workload) -> None:
    s = w25k.scale(nodes=10, seed=3)
    assert len(s.publications) == 17_611
    for p in s.publications:
        user = next(u for u in w25k.users if u.name == p.user and p.event in u.events)
        assert p.node == user.index % 10
    # node 3 holds users 3, 13, ..., 93: the union of their subscriptions
    union = {t for u in w25k.users[3::10] for t in u.subscriptions}
    assert set(s.subscriptions[3]) == union
    assert [t.creator for t in s.topics] == [t.creator % 10 for t in w25k.topics]


def test_large_network_preserves_distributions(w25k: Workload) -> None:
    s = w25k.scale(nodes=1000, events=17_611, seed=1)
    # every node has the profile of user i mod 100
    for i in (0, 123, 999):
        assert set(s.subscriptions[i]) == set(w25k.users[i % 100].subscriptions)
    # subscribers per topic scale by 10
    for t in w25k.topics:
        orig = sum(1 for u in w25k.users if t.name in u.subscriptions)
        assert len(s.subscribers(t.name)) == 10 * orig
    # with E = L every original event is published once, in internalId order, by a replica
    ids = [p.event.internal_id for p in s.publications]
    assert ids == sorted(ids) and len(set(ids)) == 17_611
    owner = {e.internal_id: u.index for u in w25k.users for e in u.events}
    assert all(p.node % 100 == owner[p.event.internal_id] for p in s.publications)
    # a user's events are spread over its replicas
    per_node = collections.Counter(
        p.node for p in s.publications if owner[p.event.internal_id] == 0
    )
    assert len(per_node) == 10 and max(per_node.values()) - min(per_node.values()) <= 1


def test_event_count_and_topic_selection(w25k: Workload) -> None:
    s = w25k.scale(nodes=1000, topics=5, events=3000, seed=1)
    assert [t.name for t in s.topics] == [
        "reddit.com",
        "politics",
        "programming",
        "gaming",
        "science",
    ]
    assert len(s.publications) == 3000
    counts = collections.Counter(p.topic for p in s.publications)
    kept = {t.name: t.total_events for t in w25k.topics if t.name in counts}
    total = sum(kept.values())
    for name, n in counts.items():
        assert abs(n / 3000 - kept[name] / total) < 0.02
    assert all(set(subs) <= set(counts) | {"gaming"} for subs in s.subscriptions)
    assert len({p.inject_id for p in s.publications}) == 3000
    big = w25k.scale(nodes=50, events=40_000, seed=1)
    assert len(big.publications) == 40_000


def test_communities_split_the_population_and_the_topics(w25k: Workload) -> None:
    one = w25k.scale(nodes=1000, events=3000, seed=1)
    s = w25k.scale(nodes=1000, events=3000, seed=1, communities=5)
    assert len(s.topics) == 5 * 23
    assert s.topics[0].name == "reddit.com/0" and s.topics[23].name == "reddit.com/1"
    for c in range(5):
        for t, orig in zip(s.topics[23 * c : 23 * (c + 1)], w25k.topics, strict=True):
            assert t.name == f"{orig.name}/{c}"
            # created by the creator's replica in community c
            assert t.creator == orig.creator + 100 * c
            assert (t.creator // 100) % 5 == c
            # each community holds 2 replicas of every user: a fifth of the subscribers
            assert len(s.subscribers(t.name)) == len(one.subscribers(orig.name)) // 5
    # node i subscribes to its profile's topics in its own community
    for i in (0, 123, 999):
        c = (i // 100) % 5
        assert set(s.subscriptions[i]) == {f"{t}/{c}" for t in one.subscriptions[i]}
    # same events, same publishers; each goes to its publisher's community
    assert [p.node for p in s.publications] == [p.node for p in one.publications]
    for p, q in zip(s.publications, one.publications, strict=True):
        assert p.topic == f"{q.topic}/{(p.node // 100) % 5}"
        assert p.topic in s.subscriptions[p.node] or q.topic not in one.subscriptions[q.node]
    counts = collections.Counter(p.topic for p in s.publications)
    assert all(t.events == counts[t.name] for t in s.topics)
    assert sum(t.events for t in s.topics) == 3000
    # the default is one community, without renaming
    assert w25k.scale(nodes=1000, events=3000, seed=1, communities=1) == one


def test_scaling_is_deterministic_in_the_seed(w25k: Workload) -> None:
    a = w25k.scale(nodes=300, events=2000, seed=7)
    b = w25k.scale(nodes=300, events=2000, seed=7)
    c = w25k.scale(nodes=300, events=2000, seed=8)
    assert a == b
    assert [p.node for p in a.publications] != [p.node for p in c.publications]
    assert [p.event for p in a.publications] == [p.event for p in c.publications]


def test_payloads(w25k: Workload) -> None:
    s = w25k.scale(nodes=100, events=500, seed=1)
    sizes = [len(p.payload(1)) for p in s.publications]
    assert min(sizes) >= 200 and max(sizes) <= 600 and len(set(sizes)) > 50
    p = s.publications[17]
    assert p.payload(1) == p.payload(1) != p.payload(2)
    assert json.loads(p.payload(1).split(b" ", 1)[0])["inject"] == p.inject_id


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"nodes": 0}, "nodes must be"),
        ({"nodes": 5, "topics": 24}, "topics must be between 1 and 23"),
        ({"nodes": 5, "events": -1}, "events must be"),
        ({"nodes": 500, "communities": 0}, "communities must be a positive integer"),
        ({"nodes": 499, "communities": 5}, "5 communities of 100 users need at least 500"),
    ],
)
def test_scale_errors(w25k: Workload, kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(WorkloadError, match=message):
        w25k.scale(**kwargs)
