"""A token bucket: flood protection per peer (:mod:`._admission`) and per network
(:mod:`._joingate`)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TokenBucket"]


@dataclass(slots=True)
class TokenBucket:
    """``tokens`` as of ``last``; refilled at ``rate`` a second up to ``burst``."""

    tokens: float
    last: float

    def take(self, now: float, rate: float, burst: float) -> bool:
        """Spend one token if there is one (whether there was)."""
        if now > self.last:
            self.tokens = min(burst, self.tokens + (now - self.last) * rate)
            self.last = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False
