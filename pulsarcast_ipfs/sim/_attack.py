"""Byzantine nodes in the simulator: relays that lie (docs/simulator.md "Attacks").

An attacker runs the real core and does everything an honest node does — it
subscribes, JOINs, takes children, answers PINGs, sends PINGs, passes MEMBERS and
SUMMARY on — but filters what it sends (the rule a sidecar started with the
test-only ``--misbehave`` applies too: :mod:`pulsarcast_ipfs.testing._misbehave`):

- ``blackhole``: drops every EVENT and GROUP_EVENT it would send;
- ``silent``: also drops DIGEST, HEADS and every fast-group message, so that
  anti-entropy with its parent and its children sees nothing missing;
- ``delay=D``: sends EVENTs (and GROUP_EVENTs) ``D`` seconds late (a slow drip);
- ``censor``: drops the EVENTs of one publisher (the workload's busiest);
- ``sybil=N``: ``N`` extra identities, attackers all, that subscribe to every topic
  before the honest nodes do (so they take the slots near the root) and behave
  as silent relays. They share ``SYBIL_NETWORKS`` networks (identities are free,
  addresses are not); every other node has a network of its own
  (:func:`sim_subnets`, the nodes' ``set_peer_subnets``).

Attackers publish nothing (their publish calls are not made) and are not counted
as subscribers: coverage is that of the honest nodes.
"""

from __future__ import annotations

import heapq
import re
from dataclasses import dataclass
from typing import Any, Final, Literal

from pulsarcast_ipfs.core import PulsarcastNode, SendRpc
from pulsarcast_ipfs.sim._spec import SpecError, parse_duration
from pulsarcast_ipfs.testing._misbehave import Misbehaviour, verdict

__all__ = ["ATTACKS", "SYBIL_NETWORKS", "AttackSpec", "Attacker", "parse_attack", "sim_subnets"]

ATTACKS: Final = ("blackhole", "silent", "delay", "censor", "sybil")


@dataclass(frozen=True, slots=True, kw_only=True)
class AttackSpec:
    """What the attackers do (``--attack``)."""

    kind: Literal["blackhole", "silent", "delay", "censor", "sybil"]
    delay: float = 0.0
    """``delay``: seconds each EVENT is held."""
    sybils: int = 0
    """``sybil``: extra attacker identities."""

    def __post_init__(self) -> None:
        if self.kind not in ATTACKS:
            raise SpecError(f"unknown attack {self.kind!r} (one of {', '.join(ATTACKS)})")
        if self.kind == "delay" and not self.delay > 0:
            raise SpecError("--attack delay=D needs a positive duration, e.g. delay=5s")
        if self.kind == "sybil" and self.sybils < 1:
            raise SpecError("--attack sybil=N needs N >= 1 identities")

    def __str__(self) -> str:
        if self.kind == "delay":
            return f"delay={self.delay:g}s"
        if self.kind == "sybil":
            return f"sybil={self.sybils}"
        return self.kind


_ATTACK: Final = re.compile(r"^\s*(blackhole|silent|censor|delay|sybil)\s*(?:=\s*(\S+))?\s*$")


def parse_attack(text: str) -> AttackSpec:
    """``blackhole`` | ``silent`` | ``censor`` | ``delay=5s`` | ``sybil=1000``."""
    m = _ATTACK.match(text)
    if m is None:
        raise SpecError(
            f"invalid attack {text!r} (one of blackhole, silent, censor, delay=D, sybil=N)"
        )
    kind, arg = m.group(1), m.group(2)
    if kind == "delay":
        if arg is None:
            raise SpecError("--attack delay=D needs a duration, e.g. delay=5s")
        return AttackSpec(kind="delay", delay=parse_duration(arg))
    if kind == "sybil":
        if arg is None or not arg.isdigit():
            raise SpecError("--attack sybil=N needs a count, e.g. sybil=1000")
        return AttackSpec(kind="sybil", sybils=int(arg))
    if arg is not None:
        raise SpecError(f"--attack {kind} takes no value")
    return AttackSpec(kind=kind)  # type: ignore[arg-type]


SYBIL_NETWORKS: Final = 4
"""The /24 networks the Sybil identities of ``sybil=N`` share."""


def sim_subnets(peer_ids: list[str], honest: int) -> dict[str, str]:
    """Colocation keys of a run's nodes: the first ``honest`` (the workload's nodes)
    each on a /24 of its own, the Sybil identities after them on ``SYBIL_NETWORKS``."""
    nets: dict[str, str] = {}
    for i, peer in enumerate(peer_ids):
        if i < honest:
            nets[peer] = f"ip4:{11 + (i >> 16)}.{(i >> 8) & 255}.{i & 255}.0/24"
        else:
            nets[peer] = f"ip4:198.18.{(i - honest) % SYBIL_NETWORKS}.0/24"
    return nets


class Attacker:
    """A real :class:`PulsarcastNode` whose sends are filtered by an attack (see the
    module docstring). Everything but ``take_outputs`` and the timers is the node's."""

    def __init__(self, node: PulsarcastNode, spec: AttackSpec, *, censored: str | None) -> None:
        self._node = node
        self._spec = spec
        kind = "silent" if spec.kind == "sybil" else spec.kind
        self._rule = Misbehaviour(kind=kind, delay=spec.delay, censored=censored)
        """The send filter, shared with a misbehaving sidecar (``testing._misbehave``)."""
        self._held: list[tuple[float, int, Any]] = []
        self._seq = 0
        self._now = float("-inf")
        self.dropped = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._node, name)

    def _verdict(self, out: Any) -> str:
        return "send" if not isinstance(out, SendRpc) else verdict(self._rule, out.rpc)

    def take_outputs(self) -> list[Any]:
        outs = self._node.take_outputs()
        spec = self._spec
        kept: list[Any] = []
        for out in outs:
            v = self._verdict(out)
            if v == "hold":
                self._seq += 1
                heapq.heappush(self._held, (self._now + spec.delay, self._seq, out))
            elif v == "send":
                kept.append(out)
            else:
                self.dropped += 1
        while self._held and self._held[0][0] <= self._now:
            kept.append(heapq.heappop(self._held)[2])
        return kept

    # The driver passes ``now`` with every input; the attacker remembers it to time
    # its held sends.

    def get_timer(self) -> float | None:
        t = self._node.get_timer()
        if self._held:
            due = self._held[0][0]
            return due if t is None or due < t else t
        return t

    def handle_timer(self, now: float) -> None:
        self._now = now
        t = self._node.get_timer()
        if t is not None and t <= now:
            self._node.handle_timer(now)

    def receive_rpc(self, now: float, peer: str, rpc: Any, *, size: int | None = None) -> None:
        self._now = now
        self._node.receive_rpc(now, peer, rpc, size=size)

    def block_fetched(self, now: float, cid: Any, data: bytes | None) -> None:
        self._now = now
        self._node.block_fetched(now, cid, data)

    def peer_unreachable(self, now: float, peer: str) -> None:
        self._now = now
        self._node.peer_unreachable(now, peer)

    def set_known_peers(self, now: float, peers: Any) -> None:
        self._now = now
        self._node.set_known_peers(now, peers)
