"""Between the project's CID (``pulsarcast_ipfs.core._cid.CID``) and ``multiformats.CID``,
for tests that check the project's codecs against the ``dag_cbor`` library."""

from __future__ import annotations

from typing import Any

import multiformats

from pulsarcast_ipfs.core._cid import CID


def to_mf(value: Any) -> Any:
    """``value`` with every project CID in it replaced by the ``multiformats.CID``."""
    if type(value) is CID:
        return value.to_multiformats()
    if isinstance(value, dict):
        return {k: to_mf(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_mf(v) for v in value]
    return value


def from_mf(value: Any) -> Any:
    """``value`` with every ``multiformats.CID`` in it replaced by the project's CID."""
    if isinstance(value, multiformats.CID):
        return CID.of(value)
    if isinstance(value, dict):
        return {k: from_mf(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [from_mf(v) for v in value]
    return value
