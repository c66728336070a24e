"""The Pulsarcast sidecar daemon that runs beside a Kubo node (docs/protocol.md §1, §5-§7).

``pulsarcast-sidecar`` (:mod:`sidecar.__main__`) runs a :class:`Driver`: the pure
protocol core fed by tree RPCs over Kubo stream mounting, Kubo's routing table,
timers and the HTTP API of docs/http-api.md (:func:`build_app`).
"""

from __future__ import annotations

from ._api import ApiError, build_app, serve_api
from ._config import ConfigError, SidecarConfig, load_config
from ._driver import Driver
from ._openapi import openapi_document
from ._routing import limit_per_bucket
from ._state import StateError, StateStore
from ._transport import PROTOCOL

__all__ = [
    "PROTOCOL",
    "ApiError",
    "ConfigError",
    "Driver",
    "SidecarConfig",
    "StateError",
    "StateStore",
    "build_app",
    "limit_per_bucket",
    "load_config",
    "openapi_document",
    "serve_api",
]
