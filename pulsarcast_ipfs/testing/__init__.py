"""Test helpers shipped with the package (like ``trio.testing``).

:func:`wait_until` polls a condition on real daemons with a deadline. The local
Kubo and sidecar clusters the tests start are production code and live in
:mod:`pulsarcast_ipfs.cluster`.
"""

from __future__ import annotations

from pulsarcast_ipfs.testing._wait import wait_until

__all__ = ["wait_until"]
