"""The cluster's one error type, and the translation of start-up failures into it.

::

    RuntimeError
    └── ClusterError        could not be started, reached or torn down

A start-up runs many daemons at once, so it fails with a group of errors (ours,
Kubo's :class:`~pulsarcast_ipfs.kubo.KuboError`, :class:`ToxiproxyError`);
:func:`single_error` turns such a group into one :class:`ClusterError` at the
boundary (``raise … from exc``).
"""

from __future__ import annotations

from pulsarcast_ipfs.cluster._toxiproxy import ToxiproxyError
from pulsarcast_ipfs.kubo import KuboError

__all__ = ["ClusterError", "single_error"]


class ClusterError(RuntimeError):
    """The local cluster could not be started, reached or torn down."""


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in _leaves(sub)]
    return [exc]


def single_error(exc: BaseException) -> ClusterError | None:
    """One :class:`ClusterError` for a group of start-up failures (None: not ours)."""
    if not isinstance(exc, BaseExceptionGroup):
        if isinstance(exc, KuboError | ToxiproxyError):
            return ClusterError(f"cluster start-up failed: {exc}")
        return None
    leaves = _leaves(exc)
    if not all(isinstance(e, ClusterError | KuboError | ToxiproxyError) for e in leaves):
        return None
    first, rest = str(leaves[0]), leaves[1:]
    if rest:
        others = "; ".join(str(e).splitlines()[0] for e in rest[:5])
        first += f"\n(and {len(rest)} more: {others})"
    return ClusterError(first)
