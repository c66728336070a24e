"""The checker's verdict: what every live subscriber read, against what was sent.

Pure (no I/O): :func:`analyse` takes the publish calls (:class:`PublishCall`) and
what each live subscriber persisted (:class:`NodeRead`: its delivery log and the
topic's retained history) and counts, per acknowledgement level — the level the
API honoured, ``local`` when it has none — the anomalies of a Jepsen queue
checker:

- **lost**: an acknowledged event missing from a live subscriber's delivery log.
  At ``local`` a publisher destroyed for good (process, repo and state) may take
  events it acknowledged with it: ``local`` promises only the publisher's own
  node. Those — acknowledged at ``local`` by a publisher destroyed later, and
  delivered at no live subscriber — are counted apart (``lost_excused``); every
  other loss is a violation (an event one live subscriber has, another must get);
- **duplicated**: an event (a sent value) delivered more than once at one node;
- **unexpected**: a delivery of a value that was never sent, or of a second event
  for a call whose event is known (attributed to no level when its value is
  unknown);
- **causal**: a delivery before one of its parents (the parent delivered later at
  the same node); a parent never delivered there is counted as ``orphans``, not a
  violation (it is a loss of the parent, if anything).

Calls whose outcome is ``failed`` or ``unknown`` (timeout, cut connection, not
acknowledged in time) are followed: delivered at every live subscriber, at some,
or nowhere. ``history_missing`` counts acknowledged events missing from a live
subscriber's retained history (a figure, not a violation: retention may drop them).
"""

from __future__ import annotations

import base64
import binascii
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from pulsarcast_ipfs.stats import percentile

__all__ = [
    "KEY_PREFIX",
    "CheckReport",
    "LevelReport",
    "NodeRead",
    "Outcome",
    "PublishCall",
    "analyse",
    "payload_key",
]

KEY_PREFIX: Final = "chk/"
"""Every payload the checker publishes is ``chk/RUN/NODE/N``: one value per call."""

Outcome = Literal["acknowledged", "failed", "unknown"]


@dataclass(slots=True, kw_only=True)
class PublishCall:
    """One publish call and what became of it."""

    key: str
    """The payload (a unique value)."""
    node: int
    level: str
    """The acknowledgement level asked for: ``local``, ``1``, ``2``…"""
    effective: str = "local"
    """The level the API honoured (``local`` when it answered without holders)."""
    outcome: Outcome = "unknown"
    cid: str | None = None
    holders: tuple[str, ...] = ()
    detail: str = ""
    started: float = 0.0
    ended: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "node": self.node,
            "level": self.level,
            "effective": self.effective,
            "outcome": self.outcome,
            "cid": self.cid,
            "holders": list(self.holders),
            "detail": self.detail,
            "started": self.started,
            "ended": self.ended,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeRead:
    """What one live subscriber persisted: its delivery log (in log order) and the
    topic's retained history, as the HTTP API gives them (Event objects)."""

    deliveries: tuple[Mapping[str, Any], ...]
    history: tuple[Mapping[str, Any], ...] = ()


def payload_key(event: Mapping[str, Any]) -> str | None:
    """The checker's value in an Event object's payload (None: not one of ours)."""
    try:
        text = base64.b64decode(str(event.get("payload", "")), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return None
    return text if text.startswith(KEY_PREFIX) else None


def _fates() -> dict[str, int]:
    return {"everywhere": 0, "somewhere": 0, "nowhere": 0}


@dataclass(slots=True, kw_only=True)
class LevelReport:
    """The anomalies of one acknowledgement level."""

    level: str
    calls: dict[str, int] = field(default_factory=dict)
    """Outcome → calls."""
    lost: list[dict[str, Any]] = field(default_factory=list)
    """Acknowledged events missing at a live subscriber: key, cid, publisher, missing_at."""
    lost_excused: int = 0
    duplicated: list[dict[str, Any]] = field(default_factory=list)
    unexpected: list[dict[str, Any]] = field(default_factory=list)
    causal: list[dict[str, Any]] = field(default_factory=list)
    orphans: int = 0
    history_missing: int = 0
    unknown_fate: dict[str, int] = field(default_factory=_fates)
    failed_fate: dict[str, int] = field(default_factory=_fates)
    ack_latency_p50: float | None = None
    ack_latency_p99: float | None = None

    @property
    def violations(self) -> int:
        return len(self.lost) + len(self.duplicated) + len(self.unexpected) + len(self.causal)

    def to_json(self) -> dict[str, Any]:
        return {
            "level": self.level,
            "calls": self.calls,
            "lost": len(self.lost),
            "lost_excused": self.lost_excused,
            "duplicated": len(self.duplicated),
            "unexpected": len(self.unexpected),
            "causal": len(self.causal),
            "orphans": self.orphans,
            "history_missing": self.history_missing,
            "unknown_fate": self.unknown_fate,
            "failed_fate": self.failed_fate,
            "ack_latency_p50_s": self.ack_latency_p50,
            "ack_latency_p99_s": self.ack_latency_p99,
            "lost_events": self.lost,
            "duplicated_events": self.duplicated,
            "unexpected_events": self.unexpected,
            "causal_violations": self.causal,
        }


NO_LEVEL: Final = "-"
"""The row of anomalies no call explains (a value never sent)."""


@dataclass(slots=True, kw_only=True)
class CheckReport:
    """Per level (and :data:`NO_LEVEL`) the anomalies; ``violations`` in all."""

    levels: dict[str, LevelReport]
    subscribers: tuple[int, ...]

    @property
    def violations(self) -> int:
        return sum(r.violations for r in self.levels.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "subscribers": list(self.subscribers),
            "violations": self.violations,
            "levels": {k: r.to_json() for k, r in self.levels.items()},
        }

    def table(self) -> str:
        """The readable table: one row per level."""
        head = (
            f"{'ack':>5} {'acked':>6} {'failed':>6} {'unknown':>7} {'lost':>5} {'excused':>7} "
            f"{'dup':>4} {'unexp':>5} {'causal':>6} {'orphan':>6} "
            f"{'unknown: all/some/none':>22} {'ack p50 s':>9}"
        )
        lines = [head]
        for name, r in self.levels.items():
            fate = r.unknown_fate
            p50 = f"{r.ack_latency_p50:.3f}" if r.ack_latency_p50 is not None else "n/a"
            lines.append(
                f"{name:>5} {r.calls.get('acknowledged', 0):>6} {r.calls.get('failed', 0):>6} "
                f"{r.calls.get('unknown', 0):>7} {len(r.lost):>5} {r.lost_excused:>7} "
                f"{len(r.duplicated):>4} {len(r.unexpected):>5} {len(r.causal):>6} "
                f"{r.orphans:>6} "
                f"{fate['everywhere']:>8}/{fate['somewhere']}/{fate['nowhere']:<6} {p50:>9}"
            )
        return "\n".join(lines)


def analyse(
    calls: Sequence[PublishCall],
    reads: Mapping[int, NodeRead],
    *,
    destroyed: Mapping[int, float] | None = None,
) -> CheckReport:
    """Count the anomalies of :mod:`this module <pulsarcast_ipfs.check._analysis>`;
    ``reads`` has one entry per live subscriber, ``destroyed`` names the publishers
    destroyed for good (node → time)."""
    destroyed = destroyed or {}
    by_key = {c.key: c for c in calls}
    levels: dict[str, LevelReport] = {}

    def level(name: str) -> LevelReport:
        if name not in levels:
            levels[name] = LevelReport(level=name)
        return levels[name]

    for c in calls:
        rep = level(c.effective)
        rep.calls[c.outcome] = rep.calls.get(c.outcome, 0) + 1
    for rep in levels.values():
        acked = sorted(
            c.ended - c.started
            for c in calls
            if c.effective == rep.level and c.outcome == "acknowledged"
        )
        rep.ack_latency_p50 = percentile(acked, 0.5)
        rep.ack_latency_p99 = percentile(acked, 0.99)

    delivered: dict[int, Counter[str]] = {}
    for node, read in sorted(reads.items()):
        counts: Counter[str] = Counter()
        position: dict[str, int] = {}
        for pos, d in enumerate(read.deliveries):
            cid = str(d.get("cid"))
            key = payload_key(d)
            call = by_key.get(key) if key is not None else None
            if call is None or (call.cid is not None and call.cid != cid):
                level(call.effective if call else NO_LEVEL).unexpected.append(
                    {"node": node, "cid": cid, "key": key}
                )
                continue
            counts[key] += 1  # type: ignore[index]
            position.setdefault(cid, pos)
        delivered[node] = counts
        for key, times in sorted(counts.items()):
            if times > 1:
                level(by_key[key].effective).duplicated.append(
                    {"node": node, "key": key, "times": times}
                )
        for pos, d in enumerate(read.deliveries):
            key = payload_key(d)
            call = by_key.get(key) if key is not None else None
            if call is None:
                continue
            for parent in d.get("parents") or ():
                at = position.get(str(parent))
                if at is None:
                    level(call.effective).orphans += 1
                elif at > pos:
                    level(call.effective).causal.append(
                        {"node": node, "cid": d.get("cid"), "parent": parent, "key": key}
                    )
        history_cids = {str(e.get("cid")) for e in read.history}
        for c in calls:
            if c.outcome == "acknowledged" and c.cid not in history_cids and read.history:
                level(c.effective).history_missing += 1

    live = sorted(reads)
    for c in calls:
        holding = [n for n in live if delivered[n][c.key] > 0]
        if c.outcome == "acknowledged":
            missing = [n for n in live if delivered[n][c.key] == 0]
            if not missing:
                continue
            rep = level(c.effective)
            if c.effective == "local" and c.node in destroyed and not holding:
                rep.lost_excused += 1
            else:
                rep.lost.append(
                    {"key": c.key, "cid": c.cid, "publisher": c.node, "missing_at": missing}
                )
            continue
        fate = "everywhere" if len(holding) == len(live) else "somewhere" if holding else "nowhere"
        rep = level(c.effective)
        (rep.unknown_fate if c.outcome == "unknown" else rep.failed_fate)[fate] += 1
    order = sorted(levels, key=lambda k: (k == NO_LEVEL, k != "local", k))
    return CheckReport(levels={k: levels[k] for k in order}, subscribers=tuple(live))
