"""Relays that lie on purpose: the send filter shared by the simulator's attackers and
a sidecar's test-only ``--misbehave`` (``pulsarcast_ipfs.testing._misbehave``), and
the sidecar refusing the option unless it is explicitly allowed."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from pulsarcast_ipfs.core import (
    Digest,
    Event,
    EventDescriptor,
    Heads,
    Ping,
    TopicDescriptor,
    format_created,
)
from pulsarcast_ipfs.core.testing import make_peer_ids
from pulsarcast_ipfs.testing._misbehave import (
    ALLOW_ENV,
    Misbehaviour,
    MisbehaviourError,
    parse_misbehaviour,
    verdict,
)
from sidecar import Driver
from sidecar._config import ConfigError, load_config

P = make_peer_ids(3, seed=30)
TOPIC = TopicDescriptor.new(name="t", author=P[0], now=1_767_225_600.0)


def _event(publisher: str) -> Event:
    ev = EventDescriptor(
        topic=TOPIC.cid,
        author=P[0],
        publisher=publisher,
        payload=b"x",
        created=format_created(1_767_225_601.0),
    )
    return Event(topic=TOPIC.cid, event=ev.encode())


def test_specs_parse_and_bad_ones_are_one_line_errors() -> None:
    assert parse_misbehaviour("silent") == Misbehaviour(kind="silent")
    assert parse_misbehaviour(" blackhole ") == Misbehaviour(kind="blackhole")
    assert parse_misbehaviour("delay=2.5") == Misbehaviour(kind="delay", delay=2.5)
    assert parse_misbehaviour("delay=5s").delay == 5.0
    assert parse_misbehaviour(f"censor={P[1]}").censored == P[1]
    assert parse_misbehaviour("lose=10") == Misbehaviour(kind="lose", nth=10)
    assert str(parse_misbehaviour("lose=10")) == "lose=10"
    for bad in (
        "loud",
        "silent=3",
        "delay",
        "delay=0",
        "delay=-1",
        "delay=soon",
        "censor",
        "lose",
        "lose=0",
        "lose=x",
    ):
        with pytest.raises(MisbehaviourError) as info:
            parse_misbehaviour(bad)
        assert "\n" not in str(info.value)


def test_what_each_misbehaviour_drops_holds_or_sends() -> None:
    ev1, ev2 = _event(P[1]), _event(P[2])
    digest = Digest(topic=TOPIC.cid, lo=0.0, hi=1.0, count=0, sum=0)
    heads = Heads(topic=TOPIC.cid, heads=())
    ping = Ping(nonce=1)
    table = {
        "blackhole": ("drop", "drop", "send", "send", "send"),
        "silent": ("drop", "drop", "drop", "drop", "send"),
        "delay=3": ("hold", "hold", "send", "send", "send"),
        f"censor={P[1]}": ("drop", "send", "send", "send", "send"),
        "lose=1": ("send", "send", "send", "send", "send"),  # drops at delivery, not here
    }
    for spec, want in table.items():
        rule = parse_misbehaviour(spec)
        got = tuple(verdict(rule, rpc) for rpc in (ev1, ev2, digest, heads, ping))
        assert got == want, spec


def test_the_sidecar_refuses_misbehave_unless_allowed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ALLOW_ENV, raising=False)
    flags = {"state_dir": str(tmp_path), "misbehave": "silent"}
    with pytest.raises(ConfigError, match=re.escape(f"refused unless {ALLOW_ENV}=1")):
        load_config(env={}, flags=flags)
    with pytest.raises(ConfigError, match="refused unless"):  # from the environment too
        load_config(env={"PULSARCAST_MISBEHAVE": "blackhole"}, flags={"state_dir": str(tmp_path)})
    monkeypatch.setenv(ALLOW_ENV, "yes")  # only 1 allows it
    with pytest.raises(ConfigError, match="refused unless"):
        load_config(env={}, flags=flags)
    monkeypatch.setenv(ALLOW_ENV, "1")
    with pytest.raises(ConfigError, match="misbehave: invalid misbehaviour 'loud'"):
        load_config(env={}, flags={**flags, "misbehave": "loud"})
    cfg = load_config(env={}, flags=flags)
    assert cfg.misbehaviour == Misbehaviour(kind="silent")
    assert Driver(cfg)._misbehaviour == Misbehaviour(kind="silent")
    honest = load_config(env={}, flags={"state_dir": str(tmp_path)})
    assert honest.misbehave == "" and honest.misbehaviour is None


def test_witnesses_reach_the_core_and_are_bounded(tmp_path: Path) -> None:
    cfg = load_config(env={"PULSARCAST_WITNESSES": "0"}, flags={"state_dir": str(tmp_path)})
    assert Driver(cfg).node_config.witnesses == 0
    default = load_config(env={}, flags={"state_dir": str(tmp_path)})
    assert Driver(default).node_config.witnesses == 2
    with pytest.raises(ConfigError, match="witnesses: between 0 and 8"):
        load_config(env={}, flags={"state_dir": str(tmp_path), "witnesses": 9})


def test_penalty_ttl_reaches_the_core_and_is_bounded(tmp_path: Path) -> None:
    flags = {"state_dir": str(tmp_path)}
    cfg = load_config(env={"PULSARCAST_PENALTY_TTL": "30"}, flags=flags)
    assert Driver(cfg).node_config.penalty_ttl == 30.0
    assert Driver(load_config(env={}, flags=flags)).node_config.penalty_ttl == 600.0
    for bad in ("0", "86401"):
        with pytest.raises(ConfigError, match="penalty_ttl: between 1 and 86400 s"):
            load_config(env={}, flags={**flags, "penalty_ttl": bad})
    with pytest.raises(ConfigError, match="PULSARCAST_PENALTY_TTL"):
        load_config(env={"PULSARCAST_PENALTY_TTL": "long"}, flags=flags)


def test_the_cli_refusal_is_one_line(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    r = subprocess.run(
        [sys.executable, "-m", "sidecar", "--state-dir", str(tmp_path), "--misbehave", "silent"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode != 0
    assert r.stderr.strip().splitlines() == [
        f"pulsarcast-sidecar: misbehave: a test-only option, refused unless {ALLOW_ENV}=1 is set"
    ]
