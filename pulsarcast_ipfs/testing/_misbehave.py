"""Relays that lie, as a send filter: what a misbehaving node does with its sends.

One rule for the simulator's attackers (:class:`pulsarcast_ipfs.sim.Attacker`) and
for a sidecar started with the test-only ``--misbehave`` option (docs/sidecar.md
"Misbehaving on purpose"). The node runs the real core and does everything an
honest node does (subscribes, JOINs, takes children, answers PINGs, passes MEMBERS
and SUMMARY on); only some of the RPCs it would send are dropped or held:

- ``blackhole``: every EVENT and GROUP_EVENT is dropped;
- ``silent``: also every DIGEST, HEADS and fast-group message, so that anti-entropy
  with its parent and its children sees nothing missing;
- ``censor``: the EVENTs (and GROUP_EVENTs) of one publisher are dropped;
- ``delay``: EVENTs and GROUP_EVENTs are held ``delay`` seconds (a slow drip).

One more is no relay's lie but a planted bug, for the checker's own test
(``pulsarcast check``, docs/faults.md "The checker"):

- ``lose``: the ``nth`` event this node delivers is dropped on the floor — counted
  as delivered (never repaired) but neither logged nor handed to the application.
  Its sends are honest.

:func:`verdict` is pure: the caller drops, holds or sends.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Final, Literal

from pulsarcast_ipfs.core import (
    Digest,
    Event,
    GroupAck,
    GroupAssign,
    GroupEvent,
    GroupJoin,
    GroupLeave,
    Heads,
    decode_descriptor,
)

__all__ = [
    "ALLOW_ENV",
    "MISBEHAVIOURS",
    "Misbehaviour",
    "MisbehaviourError",
    "Verdict",
    "parse_misbehaviour",
    "verdict",
]

ALLOW_ENV: Final = "PULSARCAST_ALLOW_MISBEHAVE"
"""The environment variable (set to ``1``) without which a sidecar refuses
``--misbehave``: a test-only option, never on by accident."""

MISBEHAVIOURS: Final = ("blackhole", "silent", "censor", "delay", "lose")

Verdict = Literal["send", "drop", "hold"]

_SILENT_OPS: Final = (
    Event,
    GroupEvent,
    Digest,
    Heads,
    GroupJoin,
    GroupAck,
    GroupAssign,
    GroupLeave,
)


class MisbehaviourError(ValueError):
    """An invalid misbehaviour spec (the message is one line)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Misbehaviour:
    """What a misbehaving node does with its sends (see the module docstring)."""

    kind: Literal["blackhole", "silent", "censor", "delay", "lose"]
    delay: float = 0.0
    """``delay``: seconds each EVENT is held."""
    nth: int = 0
    """``lose``: which delivery (from 1) is dropped."""
    censored: str | None = None
    """``censor``: the publisher (peer ID) whose EVENTs are dropped."""

    def __post_init__(self) -> None:
        if self.kind not in MISBEHAVIOURS:
            raise MisbehaviourError(
                f"unknown misbehaviour {self.kind!r} (one of {', '.join(MISBEHAVIOURS)})"
            )
        if self.kind == "delay" and not (self.delay > 0 and math.isfinite(self.delay)):
            raise MisbehaviourError("delay=D needs a positive number of seconds, e.g. delay=5")
        if self.kind == "lose" and self.nth < 1:
            raise MisbehaviourError("lose=N needs a delivery number from 1, e.g. lose=10")

    def __str__(self) -> str:
        if self.kind == "delay":
            return f"delay={self.delay:g}"
        if self.kind == "censor":
            return f"censor={self.censored}"
        if self.kind == "lose":
            return f"lose={self.nth}"
        return self.kind


_SPEC: Final = re.compile(r"^\s*(blackhole|silent|censor|delay|lose)\s*(?:=\s*(\S+))?\s*$")


def parse_misbehaviour(text: str) -> Misbehaviour:
    """``blackhole`` | ``silent`` | ``censor=PEER`` | ``delay=SECONDS`` | ``lose=N``."""
    m = _SPEC.match(text)
    if m is None:
        raise MisbehaviourError(
            f"invalid misbehaviour {text!r} "
            "(one of blackhole, silent, censor=PEER, delay=SECONDS, lose=N)"
        )
    kind, arg = m.group(1), m.group(2)
    if kind == "delay":
        try:
            seconds = float((arg or "").removesuffix("s"))
        except ValueError:
            raise MisbehaviourError(
                f"delay=D needs a number of seconds, e.g. delay=5, got {arg!r}"
            ) from None
        return Misbehaviour(kind="delay", delay=seconds)
    if kind == "lose":
        try:
            nth = int(arg or "")
        except ValueError:
            raise MisbehaviourError(
                f"lose=N needs a delivery number, e.g. lose=10, got {arg!r}"
            ) from None
        return Misbehaviour(kind="lose", nth=nth)
    if kind == "censor":
        if not arg:
            raise MisbehaviourError("censor=PEER needs the publisher's peer ID")
        return Misbehaviour(kind="censor", censored=arg)
    if arg is not None:
        raise MisbehaviourError(f"{kind} takes no value")
    return Misbehaviour(kind=kind)  # type: ignore[arg-type]


def verdict(spec: Misbehaviour, rpc: object) -> Verdict:
    """What a node misbehaving as ``spec`` does with ``rpc`` it would send."""
    kind = spec.kind
    if kind == "lose":  # a planted loss at delivery, not a send filter
        return "send"
    if kind == "silent":
        return "drop" if isinstance(rpc, _SILENT_OPS) else "send"
    if not isinstance(rpc, Event | GroupEvent):
        return "send"
    if kind == "blackhole":
        return "drop"
    if kind == "delay":
        return "hold"
    try:  # censor
        ev = decode_descriptor(rpc.event)
    except Exception:
        return "send"
    return "drop" if getattr(ev, "publisher", None) == spec.censored else "send"
