"""``pulsarcast sim --byzantine P% --attack KIND`` (docs/simulator.md "Attacks"): option
errors, and small seeded runs where attackers sit in the trees."""

from __future__ import annotations

import pytest

from pulsarcast_ipfs.cli import main
from pulsarcast_ipfs.sim import AttackSpec, SimConfig, SpecError, parse_attack, run_simulation


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--attack", "bogus", "--byzantine", "10%"], "invalid attack 'bogus'"),
        (["--byzantine", "10%"], "--byzantine needs --attack"),
        (["--attack", "silent"], "--attack silent needs --byzantine"),
        (["--attack", "delay", "--byzantine", "5%"], "delay=D needs a duration"),
        (["--attack", "sybil=many"], "sybil=N needs a count"),
        (["--attack", "silent=3", "--byzantine", "5%"], "--attack silent takes no value"),
        (["--byzantine", "100%", "--attack", "silent"], "below 100%"),
        (["--witnesses", "9"], "--witnesses must be between 0 and 8"),
    ],
)
def test_bad_attack_options_exit_2(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str], tmp_path: object
) -> None:
    code = main(["sim", "--nodes", "10", "--out", str(tmp_path), *args])
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_parse_attack() -> None:
    assert parse_attack("delay=5s") == AttackSpec(kind="delay", delay=5.0)
    assert parse_attack(" sybil = 40 ") == AttackSpec(kind="sybil", sybils=40)
    assert str(parse_attack("censor")) == "censor"
    with pytest.raises(SpecError):
        AttackSpec(kind="sybil", sybils=0)


def _run(**kw: object) -> dict[str, object]:
    base: dict[str, object] = dict(
        nodes=80, topics=3, events=120, loss=0.05, grace=60.0, flat_fanout=4, rpc_records=False
    )
    base.update(kw)
    return run_simulation(SimConfig(**base)).to_dict()  # type: ignore[arg-type]


def test_silent_relays_cut_nobody_off_and_clean_runs_penalise_nobody() -> None:
    """Silent relays (10 %) in trees with relays: every honest subscriber gets every
    event, and the relays are left; the same network with no attackers penalises no
    one; with witnesses off the silent relays do cut subtrees off (the planted check)."""
    attacked = _run(byzantine=0.1, attack=AttackSpec(kind="silent"))
    assert attacked["attackers"] == 8
    assert attacked["below_attacker_deliveries"], "no attacker had children: a vacuous run"
    assert attacked["coverage_live"] == 1.0
    assert attacked["penalties_withheld"]
    clean = _run()
    assert clean["coverage_live"] == 1.0
    assert (clean["penalties_withheld"], clean["penalties_silent_child"]) == (0, 0)
    off = _run(byzantine=0.1, attack=AttackSpec(kind="silent"), witnesses=0)
    assert off["coverage_live"] < 1.0 and off["penalties_withheld"] == 0


def test_sybils_on_few_networks_take_bounded_root_slots_and_lose_them() -> None:
    """As many Sybil identities as honest nodes, on four networks, subscribe first and
    stay silent: every honest subscriber gets every event, the roots refused most
    Sybils as colocated, and by the end no root has a Sybil child."""
    sybils = AttackSpec(kind="sybil", sybils=40)
    got = _run(nodes=40, topics=2, events=160, rate=2.0, flat_fanout=64, attack=sybils)
    assert got["attackers"] == 40
    assert got["coverage_live"] == 1.0
    assert got["joins_refused_colocated"]
    assert got["penalties_silent_child"]
    assert got["root_slots_attackers"] == 0
    assert got["root_slots_cleared_after"] is not None
    assert 0 <= got["root_slots_cleared_after"] <= 120
