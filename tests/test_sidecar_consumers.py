"""The consumer registry (sidecar/_consumers.py), pure: every call is given ``now``."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from pulsarcast_ipfs.core import MATCH_ALL, parse_filter
from sidecar._consumers import (
    MAX_CONSUMERS,
    Consumer,
    ConsumerConflict,
    ConsumerPolicy,
    ConsumerRegistry,
    TooManyConsumers,
    check_name,
)
from sidecar._state import PersistedState, StateError

T = "bafyreitopic"
U = "bafyreiother"
POLICY = ConsumerPolicy(grace=60.0, retention=3600.0)


def registry() -> ConsumerRegistry:
    n = itertools.count(1)
    return ConsumerRegistry(policy=POLICY, new_id=lambda: f"anon-{next(n)}")


def line(seq: int, topic: str = T, **attributes: Any) -> dict[str, Any]:
    return {"seq": seq, "cid": f"c{seq}", "topic_root": topic, "attributes": attributes}


def test_each_consumer_is_served_exactly_its_own_matches() -> None:
    reg = registry()
    everything, _ = reg.open(0.0, T, filter=None, cursor=0)
    hot, _ = reg.open(0.0, T, filter=parse_filter("ups >= 10"), cursor=0)
    log = [line(1, ups=3), line(2, ups=12), line(3), line(4, U, ups=50), line(5, ups=10)]
    assert [d["seq"] for d in log if everything.wants(d)] == [1, 2, 3, 5]
    assert [d["seq"] for d in log if hot.wants(d)] == [2, 5]


def test_the_node_wants_the_union_and_an_unfiltered_consumer_makes_it_everything() -> None:
    reg = registry()
    assert reg.interest(T) is None  # nobody wants it
    a, _ = reg.open(0.0, T, filter=parse_filter("ups >= 10"), cursor=0)
    b, _ = reg.open(0.0, T, filter=parse_filter('user = "alice"'), cursor=0)
    reg.open(0.0, U, filter=parse_filter("x = 1"), cursor=0)
    assert reg.interest(T) == (parse_filter("ups >= 10"), parse_filter('user = "alice"'))
    # the same filter twice is one member of the union
    reg.open(0.0, T, filter=parse_filter("ups >= 10"), cursor=0)
    assert len(reg.interest(T) or ()) == 2
    # an explicit subscription joins the union
    both = reg.interest(T, explicit=parse_filter("z = 2"))
    assert both is not None and parse_filter("z = 2") in both and len(both) == 3
    assert reg.interest(T, explicit_all=True) == (MATCH_ALL,)
    c, _ = reg.open(0.0, T, filter=None, cursor=0)
    assert reg.interest(T) == (MATCH_ALL,)
    reg.close(c.id)
    reg.close(a.id)
    assert parse_filter("ups >= 10") in (reg.interest(T) or ())  # the third one still has it
    assert reg.close(b.id) is b and reg.close(b.id) is None


def test_an_idle_anonymous_consumer_expires_after_the_grace_not_while_streaming() -> None:
    reg = registry()
    c, _ = reg.open(100.0, T, filter=None, cursor=0)
    assert reg.next_expiry() == 160.0
    assert reg.expire(159.9) == [] and reg.get(c.id) is c
    reg.attach(c)  # a stream opened: never expires while it is open
    assert reg.expire(10_000.0) == [] and reg.next_expiry() is None
    reg.attach(c)
    reg.detach(10_000.0, c)
    assert reg.expire(20_000.0) == []  # one stream still open
    reg.detach(20_000.0, c)
    assert reg.expire(20_059.0) == []
    assert reg.expire(20_060.0) == [c] and reg.get(c.id) is None and len(reg) == 0


def test_a_named_consumer_keeps_its_cursor_and_expires_after_the_retention() -> None:
    reg = registry()
    c, new = reg.open(0.0, T, filter=parse_filter("ups >= 10"), cursor=5, name="reader")
    assert new and c.id == "reader" and c.cursor == 5
    assert reg.advance(c, 9) and not reg.advance(c, 7) and c.cursor == 9  # never goes back
    again, new = reg.open(50.0, T, filter=None, cursor=100, name="reader", fast=True)
    assert again is c and not new
    assert c.cursor == 9 and c.filter is None and c.fast  # filter replaced, cursor kept
    assert reg.expire(50.0 + 3599.0) == []  # past the grace, within the retention
    assert reg.expire(50.0 + 3600.0) == [c]
    with pytest.raises(ConsumerConflict, match="follows topic"):
        reg.open(0.0, T, filter=None, cursor=0, name="x")
        reg.open(0.0, U, filter=None, cursor=0, name="x")


def test_consumers_survive_the_round_trip_through_the_state_file(tmp_path: Any) -> None:
    reg = registry()
    a, _ = reg.open(0.0, T, filter=parse_filter("ups >= 10 and user = 'al'"), cursor=7, name="n1")
    reg.open(0.0, U, filter=None, cursor=3, fast=True)
    state = PersistedState(consumers=reg.to_state())
    back = PersistedState.from_json(state.to_json(), tmp_path / "state.json")
    other = registry()
    other.load(1000.0, back.consumers)
    got = {c.id: c for c in other}
    assert set(got) == {"n1", "anon-1"}
    assert got["n1"].filter == a.filter and got["n1"].cursor == 7 and got["n1"].name == "n1"
    assert got["anon-1"].fast and got["anon-1"].cursor == 3
    # idle from the restart: an application has its whole grace to come back
    assert all(c.idle_since == 1000.0 for c in other) and other.expire(1059.0) == []


@pytest.mark.parametrize(
    ("doc", "says"),
    [
        ([{"id": "anon-1"}], "an id and a topic"),
        ([{"id": "x", "topic": T}], "anonymous id starts with"),
        ([{"id": "anon-1", "topic": T, "filter": "ups >="}], "does not parse"),
        ([{"id": "anon-1", "topic": T, "cursor": -1}], "cursor"),
        ([{"id": "a", "topic": T, "name": "b"}], "id is its name"),
        ({"id": "anon-1"}, "consumers must be a list"),
    ],
)
def test_a_bad_persisted_consumer_is_a_clear_state_error(
    doc: Any, says: str, tmp_path: Any
) -> None:
    with pytest.raises(StateError, match=says):
        PersistedState.from_json({"version": 1, "consumers": doc}, tmp_path / "state.json")


@pytest.mark.parametrize("name", ["", "-x", "a b", "x" * 65, "anon-1", "ü", 3])
def test_bad_names_are_refused(name: Any) -> None:
    with pytest.raises(ValueError, match="bad consumer name"):
        check_name(name)
    assert check_name("orders.v2_reader-1") == "orders.v2_reader-1"


def test_the_number_of_consumers_is_bounded() -> None:
    reg = registry()
    for _ in range(MAX_CONSUMERS):
        reg.open(0.0, T, filter=None, cursor=0)
    with pytest.raises(TooManyConsumers):
        reg.open(0.0, T, filter=None, cursor=0)
    assert Consumer(id="anon-x", topic=T, filter=None).wants(line(1))
