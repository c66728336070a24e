"""Moving code between the core's modules changes no behaviour.

A few seeded CoreNet scenarios exercise every kind of input (topics, sub-topics,
updates, subscribe/unsubscribe, publish and request to publish, readers, loss,
crashes and restarts, lagging links, signatures); the sha256 of everything the
nodes emitted (metric records, deliveries, RPC frames sent, blocks stored) must
equal the digests stored here, which were made on the commit before the split of
``PulsarcastNode`` into modules. A change that is meant to alter behaviour updates
them, and says so.

The scenarios run in two child processes with different ``PYTHONHASHSEED``s: the
core must not let the order of a set of peer IDs or CIDs (salted per process)
reach its outputs. It did, in three places; fixing them changed the ``busy`` and
``orphan`` digests once (the digests before the fix, under hash seed 0, were still
met by the split code with the fix taken out).

CoreNet moved onto the core's network driver (core/_netdriver.py) with the
digests unchanged; then it took the simulator's timer arming (one heap entry per
arming, superseded ones skipped), which fires timers due at the same instant in
the order they were last armed rather than first: that changed ``busy`` and
``signed`` once more. Then CoreNet took the one peer-ID generator of the core
(``make_peer_ids`` / ``make_signers``, the simulator's Ed25519 identities): new
peer IDs are new keyspace positions, so new trees, and all three digests changed
(with the earlier generators injected, this code still gives the earlier three).
Then a parent's lag limit became relative to its link's shortest round
trip: ``busy``, whose links are slowed, changed once more; and flat trees (a
node below a child of the root moves up; JOIN's new ``up`` field is in every JOIN
frame) changed all three; and a parent's LEAVE to a child it drops as
unreachable (crashes) changed ``busy``. Then tree filters went on by
default: every JOIN carries its summary, MEMBERS the members' summaries, so all
three changed; with ``tree_filters`` off the code of that commit still gives the
previous three. Then the MEMBERS list a node passes to a new child of its own
carried the members' summaries too: ``busy`` and ``orphan`` changed (with that
one change taken out, the code gave the previous two). Then a move away
from a lagging parent became one try, and a stale edge gets one LEAVE per
``ping_interval``: ``busy`` changed. Then (wire 2.6) a root sends a child that holds
its previous MEMBERS list only what changed: ``busy`` and ``orphan`` changed (with
deltas never chosen, the code of that commit gives the previous two). Then (wire
2.7) a subscriber's JOIN asks for the meta-topic descriptor and the JOIN_ACK carries
it, the bitswap fetch waiting meanwhile: all three changed (with the JOIN never
asking and the fetch not waiting, the code of that commit gives the previous three).
Then a DIGEST whose window the neighbour's own DIGEST has compared equal is not
repeated: ``busy`` and ``signed`` changed (without that check, the code of that
commit gives the previous two). Then a MEMBERS list from the peer a node is joining,
come before its JOIN_ACK (CoreNet's links do not keep order), is kept: ``busy``
changed (with the old check, the code of that commit gives the previous one).
Then (wire 2.8, docs/protocol-notes.md "Relays that lie") a node below a relay watches
witnesses (WATCH, announcements in HEADS, parent scores) and a parent drops children
silent in anti-entropy: ``busy`` and ``orphan`` changed (with ``witnesses=0`` and
``silent_child_after=0`` the code of that commit gives the previous two). Then (wire
2.10) a parent probes a child not heard from in six heads rounds with an empty HEADS,
which the child answers, and a publisher with no member list from its parent pushes
to the author directly: all three changed (the idle topics, metadata topics among
them, carry probes now); then an empty HEADS stopped sending history and deltas
(it says nothing of either window): busy and orphan changed. Then (wire 2.11) a
witness announces a watcher's own event back to it, and a publisher pushes an own
event no witness announced again: busy and orphan changed (with the announcement
to the sender left out and the check off, the code of that commit gives the
previous two); then a witness dropped as silent may be chosen again after a minute:
busy changed (with the drop for good, the code of that commit gives the previous one).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pulsarcast_ipfs.core.testing import CoreNet
from pulsarcast_ipfs.testing import GOLDEN_SCENARIOS


def _digest(net: CoreNet) -> str:
    h = hashlib.sha256()
    for peer in net.peers:
        log = net.logs[peer]
        h.update(peer.encode())
        for r in log.records:
            h.update(r.to_json(run="identity", system="pulsarcast").encode())
        for topic, event, recovered in log.delivered:
            h.update(bytes(topic) + bytes(event) + (b"r" if recovered else b"-"))
        for sent in log.sent:
            h.update(sent.peer.encode() + sent.data)
        for stored in log.stored:
            h.update(bytes(stored.cid) + (b"o" if stored.own else b"-"))
        for cid in log.released:
            h.update(bytes(cid))
    h.update(f"{net.now!r} {net.messages} {net.lost} {net.fetches}".encode())
    return h.hexdigest()


# Made on the commit before the split, then (busy, orphan) once more when the
# hash-seed-dependent orders were fixed, then (busy, signed) when CoreNet took the
# driver's timer arming, then all three with the one peer-ID generator, then busy
# with the relative lag limit, then all three with flat trees, then busy with the
# LEAVE to a dropped child, then all three with tree filters on by default, then
# busy and orphan when a deep child's MEMBERS list carried the summaries, then
# busy with one-try lag moves and damped stale-edge LEAVEs, then busy and orphan
# with MEMBERS deltas, then busy and orphan with witnesses, then all three with
# idle probes, then busy and orphan with own events announced back, then busy with
# witnesses chosen again (module docstring).
GOLDEN = {
    "busy": "c7a284fc9715458c3356fb7ffb3e0bfd94a771bef9146a6586079615be4f9c77",
    "signed": "a76d442d110b3cc5cf8d74883ab5e60394f495492d1d931a61b24fd4222c51bb",
    "orphan": "786e2a92c4bfb5c8ea1af30fb82ca5199852850d43407feb32ab08fbbe2335df",
}


def _digests() -> dict[str, str]:
    return {name: _digest(run()) for name, run in sorted(GOLDEN_SCENARIOS.items())}


def _digests_with_hash_seed(seed: str) -> dict[str, str]:
    root = Path(__file__).resolve().parent.parent
    env = dict(os.environ, PYTHONHASHSEED=seed)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH")) if p)
    out = subprocess.run(
        [sys.executable, __file__], env=env, cwd=root, capture_output=True, check=True, timeout=120
    )
    result: dict[str, str] = json.loads(out.stdout)
    return result


@pytest.fixture(scope="module")
def digests() -> tuple[dict[str, str], dict[str, str]]:
    return _digests_with_hash_seed("0"), _digests_with_hash_seed("1")


@pytest.mark.parametrize("name", sorted(GOLDEN_SCENARIOS))
def test_scenario_records_are_byte_identical(
    digests: tuple[dict[str, str], dict[str, str]], name: str
) -> None:
    assert digests[0][name] == digests[1][name] == GOLDEN[name]


if __name__ == "__main__":
    print(json.dumps(_digests()))
