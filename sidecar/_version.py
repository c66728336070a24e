"""The sidecar's version (``/v1/health``, the dashboard, ``--version``)."""

from __future__ import annotations

__all__ = ["VERSION"]

VERSION = "0.1.0"
