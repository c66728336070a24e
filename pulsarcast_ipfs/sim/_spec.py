"""Fault and network specifications of a simulation, and their command-line syntax.

- durations: ``250ms``, ``1.5s``, ``2m``, ``1h``; a bare number is seconds;
- link latency: ``50ms`` (constant), ``500ms±300ms`` or ``500ms+-300ms``
  (normal, mean ± standard deviation, truncated at 0), ``10ms..90ms`` (uniform);
- message loss: ``5%`` or ``0.05``;
- crashes: ``10%@120s`` (a fraction of the nodes) or ``25@120s`` (a count),
  comma-separated for several waves.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass
from typing import Final, Literal

__all__ = [
    "CrashSpec",
    "LatencySpec",
    "SpecError",
    "parse_crashes",
    "parse_duration",
    "parse_fraction",
    "parse_latency",
]


class SpecError(ValueError):
    """A simulation option is malformed or out of range."""


_UNITS: Final = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "": 1.0}
_DURATION: Final = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*(ms|s|m|h|)\s*$")


def parse_duration(text: str) -> float:
    """``250ms`` / ``1.5s`` / ``2m`` / ``1h`` / ``3`` (seconds) -> seconds."""
    m = _DURATION.match(text)
    if m is None:
        raise SpecError(f"invalid duration {text!r} (examples: 250ms, 1.5s, 2m)")
    return float(m.group(1)) * _UNITS[m.group(2)]


def parse_fraction(text: str) -> float:
    """``5%`` or ``0.05`` -> 0.05 (between 0 and 1)."""
    t = text.strip()
    try:
        value = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise SpecError(f"invalid fraction {text!r} (examples: 5%, 0.05)") from None
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise SpecError(f"fraction {text!r} is not between 0% and 100%")
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class LatencySpec:
    """A one-way link latency distribution (seconds)."""

    kind: Literal["constant", "uniform", "normal"]
    a: float
    """constant: the value; uniform: the low end; normal: the mean."""
    b: float = 0.0
    """uniform: the high end; normal: the standard deviation (jitter)."""

    def __post_init__(self) -> None:
        if self.kind not in ("constant", "uniform", "normal"):
            raise SpecError(f"unknown latency distribution {self.kind!r}")
        if not (math.isfinite(self.a) and math.isfinite(self.b)) or self.a < 0 or self.b < 0:
            raise SpecError("latency parameters must be finite and non-negative")
        if self.kind == "uniform" and self.b < self.a:
            raise SpecError("uniform latency: the high end is below the low end")

    def sample(self, rng: random.Random) -> float:
        """One latency draw (never negative)."""
        if self.kind == "constant":
            return self.a
        if self.kind == "uniform":
            return rng.uniform(self.a, self.b)
        return max(0.0, rng.gauss(self.a, self.b))

    @property
    def mean(self) -> float:
        """The distribution's nominal mean (before truncation)."""
        return (self.a + self.b) / 2 if self.kind == "uniform" else self.a

    def __str__(self) -> str:
        if self.kind == "constant":
            return f"{self.a * 1000:g}ms"
        if self.kind == "uniform":
            return f"{self.a * 1000:g}ms..{self.b * 1000:g}ms"
        return f"{self.a * 1000:g}ms±{self.b * 1000:g}ms"


def parse_latency(text: str) -> LatencySpec:
    """``50ms`` | ``500ms±300ms`` | ``500ms+-300ms`` | ``10ms..90ms``."""
    try:
        for sep in ("±", "+-"):
            if sep in text:
                mean, jitter = text.split(sep, 1)
                return LatencySpec(kind="normal", a=parse_duration(mean), b=parse_duration(jitter))
        if ".." in text:
            lo, hi = text.split("..", 1)
            return LatencySpec(kind="uniform", a=parse_duration(lo), b=parse_duration(hi))
        return LatencySpec(kind="constant", a=parse_duration(text))
    except SpecError as exc:
        raise SpecError(
            f"invalid latency {text!r}: {exc} (examples: 50ms, 500ms±300ms, 10ms..90ms)"
        ) from None


@dataclass(frozen=True, slots=True, kw_only=True)
class CrashSpec:
    """A wave of crashes: ``fraction`` of the nodes (or ``count`` nodes) at virtual time ``at``.

    ``at`` is in seconds from the start of publication.
    """

    at: float
    fraction: float | None = None
    count: int | None = None

    def __post_init__(self) -> None:
        if (self.fraction is None) == (self.count is None):
            raise SpecError("a crash wave needs exactly one of fraction and count")
        if self.fraction is not None and not 0.0 <= self.fraction <= 1.0:
            raise SpecError("crash fraction must be between 0 and 1")
        if self.count is not None and self.count < 0:
            raise SpecError("crash count must be non-negative")
        if not math.isfinite(self.at) or self.at < 0:
            raise SpecError("crash time must be a non-negative number of seconds")

    def size(self, nodes: int) -> int:
        """How many nodes this wave crashes in a network of ``nodes``."""
        if self.count is not None:
            return min(self.count, nodes)
        assert self.fraction is not None
        return min(nodes, round(self.fraction * nodes))

    def __str__(self) -> str:
        what = f"{self.fraction * 100:g}%" if self.fraction is not None else str(self.count)
        return f"{what}@{self.at:g}s"


def parse_crashes(text: str) -> tuple[CrashSpec, ...]:
    """``10%@120s`` or ``25@2m``, comma-separated."""
    waves: list[CrashSpec] = []
    for part in text.split(","):
        part = part.strip()
        if "@" not in part:
            raise SpecError(f"invalid crash wave {part!r}: expected <N|P%>@<time>, e.g. 10%@120s")
        what, when = part.split("@", 1)
        at = parse_duration(when)
        what = what.strip()
        if what.endswith("%"):
            waves.append(CrashSpec(at=at, fraction=parse_fraction(what)))
        elif what.isdigit():
            waves.append(CrashSpec(at=at, count=int(what)))
        else:
            raise SpecError(f"invalid crash wave {part!r}: {what!r} is neither a count nor a %")
    return tuple(waves)
