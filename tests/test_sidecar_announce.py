"""Bounded topic announcers (docs/sidecar.md "Providing", ``sidecar/_announce.py``).

The choice is checked on its own (every member computing it from the same list,
k of them say yes) and in the driver's housekeeping (``Driver.announce_topics``)
with the core's view replaced by a crafted ``TopicState``: what it announces, when
it waits for a member list, and that it follows the list as members come and go.
The same list is what ``Driver.warm_members`` connects to ahead of need (last test).
"""

from __future__ import annotations

import hashlib
import random
from pathlib import Path
from typing import Any

import pytest

from pulsarcast_ipfs.core import TopicState, compute_cid
from sidecar import Driver, load_config
from sidecar._announce import MEMBERS_WAIT, announcers, should_announce

TOPIC = compute_cid(b"a topic descriptor")
AUTHOR = "12D3KooWAuthor"


def _peers(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [f"12D3KooW{rng.getrandbits(160):040x}" for _ in range(n)]


@pytest.mark.parametrize(("n", "k"), [(20, 8), (20, 3), (5, 8), (64, 8), (9, 1)])
def test_every_member_decides_alone_and_exactly_k_announce(n: int, k: int) -> None:
    members = [AUTHOR, *_peers(n - 1, seed=n * 100 + k)]
    yes = [
        p
        for p in members
        if should_announce(topic=TOPIC, me=p, author=AUTHOR, members=members, k=k)
    ]
    assert AUTHOR in yes  # the author always announces
    assert len(yes) == 1 + min(k, n - 1)
    assert set(yes) - {AUTHOR} == set(announcers(TOPIC, members, AUTHOR, k))


def test_the_closest_peer_ids_to_the_topic_are_chosen() -> None:
    """Differential: the choice against the XOR distances computed here."""
    members = _peers(30, seed=7)
    topic_digest = int.from_bytes(hashlib.sha256(b"a topic descriptor").digest(), "big")

    def distance(p: str) -> int:
        return topic_digest ^ int.from_bytes(hashlib.sha256(p.encode()).digest(), "big")

    assert announcers(TOPIC, members, AUTHOR, 5) == sorted(members, key=distance)[:5]
    other = compute_cid(b"another topic")
    assert announcers(other, members, AUTHOR, 5) != announcers(TOPIC, members, AUTHOR, 5)


def test_no_list_is_undecided_k_zero_is_everyone_and_outsiders_rank_themselves() -> None:
    members = _peers(20, seed=3)
    me = "12D3KooWNotListed"
    assert should_announce(topic=TOPIC, me=me, author=AUTHOR, members=(), k=8) is None
    assert should_announce(topic=TOPIC, me=AUTHOR, author=AUTHOR, members=(), k=8) is True
    assert should_announce(topic=TOPIC, me=me, author=AUTHOR, members=members, k=0) is True
    ranked = announcers(TOPIC, [*members, me], AUTHOR, 8)
    got = should_announce(topic=TOPIC, me=me, author=AUTHOR, members=members, k=8)
    assert got is (me in ranked)


def test_only_holders_of_the_whole_history_announce_and_are_ranked() -> None:
    """A subscriber whose filters prune keeps part of the history: it never announces
    (``k = 0`` included), and the members listed as partial are not ranked, so the
    next closest holders announce in their place, every node deciding alone."""
    members = [AUTHOR, *_peers(20, seed=9)]
    closest = announcers(TOPIC, members, AUTHOR, 5)
    partial = closest[:2]
    yes = [
        p
        for p in members
        if p not in partial
        and should_announce(topic=TOPIC, me=p, author=AUTHOR, members=members, k=3, partial=partial)
    ]
    assert set(yes) == {AUTHOR, *closest[2:5]}
    for p in partial:
        for k in (0, 3):
            assert (
                should_announce(topic=TOPIC, me=p, author=AUTHOR, members=members, k=k, whole=False)
                is False
            )
    # no list yet: a partial holder knows at once; the author always announces
    alone = should_announce(topic=TOPIC, me="x", author=AUTHOR, members=(), k=3, whole=False)
    assert alone is False
    assert should_announce(topic=TOPIC, me=AUTHOR, author=AUTHOR, members=(), k=3, whole=False)


class _Tasks:
    """Stands in for the driver's task group: records what it would start."""

    def __init__(self) -> None:
        self.started: list[tuple[Any, ...]] = []

    def start_soon(self, fn: Any, *args: Any, **kwargs: Any) -> None:
        self.started.append((fn.__name__, *args))


def _driver(tmp_path: Path, members: list[str], **flags: Any) -> tuple[Driver, _Tasks, list[float]]:
    now = [1000.0]
    d = Driver(
        load_config(env={}, flags={"state_dir": str(tmp_path), **flags}), clock=lambda: now[0]
    )
    d.peer_id = members[1] if len(members) > 1 else "12D3KooWMe"
    tasks = _Tasks()
    d._tg = tasks  # type: ignore[assignment]
    d.state.state.subscriptions[str(TOPIC)] = now[0]
    return d, tasks, now


def _state(members: list[str], *, whole: bool = True) -> TopicState:
    return TopicState(
        topic_cid=TOPIC,
        latest_cid=TOPIC,
        name="t",
        author=AUTHOR,
        role="child",
        parent=AUTHOR,
        children=(),
        subscribed=True,
        joined=True,
        acting_root=False,
        heads=(),
        members=tuple(members),
        whole_history=whole,
    )


def test_the_driver_announces_only_as_one_of_the_k_closest_and_follows_the_list(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    members = [AUTHOR, *_peers(19, seed=11)]
    chosen = announcers(TOPIC, members, AUTHOR, 3)
    fourth = announcers(TOPIC, members, AUTHOR, 4)[3]
    d, tasks, now = _driver(tmp_path, members, topic_announcers=3)
    view = {"members": members}
    monkeypatch.setattr(d, "topic_state", lambda cid: _state(view["members"]))

    d.peer_id = fourth
    d.announce_topics()
    assert tasks.started == [] and TOPIC not in d.announcer.announced
    assert list(d.announcer.not_announcing) == [
        TOPIC
    ]  # the gauge pulsarcast_topics_left_to_announcers

    # Two of the three closest leave the tree: the fourth is now among the 3 closest.
    view["members"] = [p for p in members if p not in chosen[:2]]
    now[0] += 2
    d.announce_topics()
    assert tasks.started == [("_pin_topic", TOPIC)] and TOPIC in d.announcer.announced
    assert d.announcer.not_announcing == {}
    # and a chosen one announces at once
    d2, tasks2, _ = _driver(tmp_path / "2", members, topic_announcers=3)
    monkeypatch.setattr(d2, "topic_state", lambda cid: _state(members))
    d2.peer_id = chosen[0]
    d2.announce_topics()
    assert tasks2.started == [("_pin_topic", TOPIC)] and TOPIC in d2.announcer.announced


def test_the_driver_does_not_announce_a_partial_history(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Among the closest, with no list, with ``--topic-announcers 0``: a node that
    keeps only the events its filters match announces nothing, and says so (gauge)."""
    members = [AUTHOR, *_peers(19, seed=11)]
    for k, listed in ((3, members), (3, []), (0, members)):
        d, tasks, now = _driver(tmp_path / f"{k}-{len(listed)}", members, topic_announcers=k)
        d.peer_id = announcers(TOPIC, members, AUTHOR, 1)[0]
        monkeypatch.setattr(d, "topic_state", lambda cid, m=listed: _state(m, whole=False))
        for _ in range(3):
            d.announce_topics()
            now[0] += MEMBERS_WAIT
        assert tasks.started == [] and TOPIC not in d.announcer.announced
        assert list(d.announcer.not_announcing) == [TOPIC]


def test_without_a_member_list_the_driver_waits_then_announces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d, tasks, now = _driver(tmp_path, [])
    monkeypatch.setattr(d, "topic_state", lambda cid: _state([]))
    d.announce_topics()
    now[0] += MEMBERS_WAIT - 1
    d.announce_topics()
    assert tasks.started == []
    now[0] += 1
    d.announce_topics()
    assert tasks.started == [("_pin_topic", TOPIC)]
    d.announce_topics()  # announced: not again before the 12-hour refresh
    assert len(tasks.started) == 1


def test_topic_announcers_is_configurable_and_checked(tmp_path: Path) -> None:
    from sidecar import ConfigError
    from sidecar.__main__ import config_from_args

    assert load_config(env={}).topic_announcers == 4
    assert config_from_args(["--topic-announcers", "0"]).topic_announcers == 0
    assert load_config(env={"PULSARCAST_TOPIC_ANNOUNCERS": "3"}).topic_announcers == 3
    with pytest.raises(ConfigError, match="topic_announcers: between 0 and 64"):
        load_config(env={"PULSARCAST_TOPIC_ANNOUNCERS": "65"})


class _Connections:
    """Stands in for the transport: which peers the driver connects to."""

    def __init__(self, open_already: list[str]) -> None:
        self.open = list(open_already)

    @property
    def neighbours(self) -> list[str]:
        return list(self.open)

    def connect(self, peer: str) -> bool:
        if peer in self.open:
            return False
        self.open.append(peer)
        return True


def test_the_driver_connects_to_the_root_list_ahead_of_need_within_a_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Driver.warm_members``: every member of each topic's root list but itself,
    once, and no more than ``WARM_MAX`` connections in all."""
    from sidecar._driver import WARM_MAX

    members = [AUTHOR, *_peers(9, seed=5)]
    d, _, _ = _driver(tmp_path, members)
    conns = _Connections([AUTHOR])  # the tree parent: connected already
    d.transport = conns  # type: ignore[assignment]
    monkeypatch.setattr(d, "topic_states", lambda: [_state(members), _state([])])
    d.warm_members()
    assert sorted(conns.open) == sorted(p for p in members if p != d.peer_id)
    d.warm_members()  # nothing new
    assert len(conns.open) == len(members) - 1

    big = [AUTHOR, *_peers(80, seed=6)]
    d2, _, _ = _driver(tmp_path / "2", big)
    conns2 = _Connections([])
    d2.transport = conns2  # type: ignore[assignment]
    monkeypatch.setattr(d2, "topic_states", lambda: [_state(big)])
    d2.warm_members()
    assert len(conns2.open) == WARM_MAX and d2.peer_id not in conns2.open
