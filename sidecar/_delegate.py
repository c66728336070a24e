"""The sidecar's delegated signing key (docs/security.md "Delegated signing keys").

At start, and again at half of ``delegate_ttl``, the sidecar makes a fresh Ed25519
key (the private key lives in this process only, never on disk), has Kubo sign the
delegation statement with the node's own key (one ``key/sign``), and gives the key
to the core (``use_delegate``). The core then signs the node's own events in
memory: no Kubo round trip per publish. If Kubo cannot sign the delegation, the
core keeps signing every event through ``key/sign`` and the sidecar tries again at
the next renewal check.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable

from pulsarcast_ipfs.core import DelegateKey, Delegation, verify_delegation
from pulsarcast_ipfs.kubo import KuboError

log = logging.getLogger("pulsarcast.sidecar")

__all__ = ["DelegateKeeper"]

Sign = Callable[[bytes], Awaitable[bytes]]
"""Kubo ``key/sign`` with the node's own key: data -> 64-byte signature."""


class DelegateKeeper:
    """Makes and renews the node's delegated key; ``ttl`` 0 turns it off."""

    def __init__(self, *, peer_id: str, ttl: float, sign: Sign) -> None:
        self.peer_id = peer_id
        self.ttl = ttl
        self._sign = sign
        self.key: DelegateKey | None = None
        self._renewing = False
        self._next_try = 0.0
        self.renewals = 0
        self.failures = 0

    def due(self, now: float) -> bool:
        """Whether a (new) delegation should be made now."""
        if self.ttl <= 0 or self._renewing or now < self._next_try:
            return False
        key = self.key
        return key is None or key.delegation is None or key.delegation.expires - now < self.ttl / 2

    async def renew(self, now: float) -> DelegateKey | None:
        """A fresh key with its delegation signed by Kubo, or ``None`` (logged) if Kubo
        could not sign it; the next try is then a minute away."""
        self._renewing = True
        try:
            key = DelegateKey(os.urandom(32))
            expires = int(now + self.ttl)
            try:
                signature = await self._sign(key.statement(self.peer_id, expires))
            except (KuboError, TimeoutError) as exc:
                self.failures += 1
                self._next_try = now + 60.0
                log.warning(
                    "no delegated signing key (Kubo key/sign: %s): signing each event through Kubo",
                    exc or type(exc).__name__,
                )
                return None
            delegation = Delegation(key=key.public_key, expires=expires, signature=signature)
            if not verify_delegation(self.peer_id, delegation):
                self.failures += 1
                self._next_try = now + 60.0
                log.warning("Kubo signed the delegation with another key than %s", self.peer_id)
                return None
            self.key = key.with_delegation(delegation)
            self.renewals += 1
            log.info("delegated signing key until %d (renewed at half-time)", expires)
            return self.key
        finally:
            self._renewing = False
