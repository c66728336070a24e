"""pulsarcast-ipfs: reliable, persistent, topic-based publish/subscribe for IPFS."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
