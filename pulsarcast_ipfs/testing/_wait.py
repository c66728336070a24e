"""Waiting for a condition on real daemons: :func:`pulsarcast_ipfs.polling.wait_until`."""

from __future__ import annotations

from pulsarcast_ipfs.polling import wait_until

__all__ = ["wait_until"]
