"""PeerLinks (core/_links.py): last heard, round trips and lag, with no network."""

from __future__ import annotations

import pytest

from pulsarcast_ipfs.core._links import PeerLinks

P = "parent"


def test_a_pong_within_the_links_own_delay_is_no_lag_and_a_later_one_is() -> None:
    links = PeerLinks(slow_parent_after=1.0, suspect_ttl=30.0)
    links.sent(0.0, P, 1)
    assert links.due == 1.0
    assert links.pong(0.5, P, 1) is False  # a 0.5 s link
    assert links.rtt(P) == 0.5 and links.lag_limit(P) == 2.0 and links.due is None
    links.sent(10.0, P, 2)
    assert links.pong(11.9, P, 2) is False  # 1.9 s: late for 1.0 s, not for this link
    assert links.rtt(P) == pytest.approx(0.875 * 0.5 + 0.125 * 1.9)
    links.sent(20.0, P, 3)
    assert links.pong(22.1, P, 3) is True  # beyond the limit: lagging
    assert links.pong(22.2, P, 99) is None  # answers no PING of ours


def test_an_unanswered_ping_is_probed_once_then_lag() -> None:
    links = PeerLinks(slow_parent_after=1.0, suspect_ttl=30.0)
    links.sent(0.0, P, 1)
    assert links.overdue(0.5) == []
    assert links.overdue(1.0) == [(P, True)]  # probe (a lost message is not lag)
    links.sent(1.0, P, 2)
    links.rearm()
    assert links.due == 2.0
    assert links.overdue(2.0) == [(P, False)]  # the probe unanswered too
    links.stop_waiting(P)
    links.rearm()
    assert links.due is None


def test_a_late_event_probes_at_most_once_per_lag_limit() -> None:
    links = PeerLinks(slow_parent_after=1.0, suspect_ttl=30.0)
    links.sent(0.0, P, 1)
    assert links.pong(0.04, P, 1) is False
    patience = links.probe(5.0, P)
    assert patience == pytest.approx(0.25)  # four round trips, at least 0.25 s
    links.sent(5.0, P, 2)
    links.probe_sent(5.0, P, patience)
    assert links.due == pytest.approx(5.25)
    assert links.probe(5.1, P) is None  # one is out
    assert links.pong(5.1, P, 2) is False
    assert links.probe(5.5, P) is None  # less than a lag limit since the last
    assert links.probe(6.2, P) is not None


def test_silence_counts_from_first_sight_and_old_peers_are_forgotten() -> None:
    links = PeerLinks(slow_parent_after=1.0, suspect_ttl=30.0)
    assert links.silent_for(10.0, "child") == 0.0
    assert links.silent_for(25.0, "child") == 15.0
    links.heard(30.0, "child")
    assert links.silent_for(31.0, "child") == 1.0
    links.sent(0.0, P, 1)
    links.keep_parents(set())
    links.keep_heard(())
    assert links.last_heard("child") is None and links.overdue(100.0) == []


def test_a_suspect_is_one_until_its_time_runs_out() -> None:
    links = PeerLinks(slow_parent_after=1.0, suspect_ttl=10.0)
    assert not links.any_suspect and not links.is_suspect(0.0, P)
    links.suspect(0.0, P)
    assert links.any_suspect and links.is_suspect(9.9, P)
    assert not links.is_suspect(10.0, P) and not links.any_suspect  # expired: forgotten
