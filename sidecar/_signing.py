"""Signing through Kubo: the core's :class:`SignRequest` outputs carried out.

The core never holds the node's private key. It asks for a signature
(``SignRequest``); :class:`KuboSigner` signs with Kubo ``key/sign`` (at most
:data:`SIGN_TIMEOUT`) in a task of its own and answers the core (``signed`` or
``sign_failed``). An API command that needed a signature returns ``Pending``;
:meth:`KuboSigner.complete` waits (at most :data:`OPERATION_TIMEOUT`) for the
``OperationDone`` the core emits once it is signed. With signatures required and a
delegation TTL, it also keeps the delegated signing key (:mod:`._delegate`).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TypeVar

import anyio

from pulsarcast_ipfs.core import OperationDone, Pending, PulsarcastError, SignRequest
from pulsarcast_ipfs.kubo import KuboClient, KuboError

from ._delegate import DelegateKeeper
from ._host import NodeHost

__all__ = ["OPERATION_TIMEOUT", "SIGN_TIMEOUT", "KuboSigner", "SigningFailed"]

log = logging.getLogger("pulsarcast.sidecar")
T = TypeVar("T")

SIGN_TIMEOUT = 10.0
"""Longest wait for Kubo ``key/sign`` (one signature)."""
OPERATION_TIMEOUT = 30.0
"""Longest wait for an API command's signatures (queued behind others')."""
DONE_KEPT = 1024
"""Answers of operations kept for their callers (the oldest nobody waits for go)."""


class SigningFailed(PulsarcastError):
    """An API command could not be signed through Kubo (the API answers 503)."""


class KuboSigner:
    """Signs for the core with the node's Kubo key; counts it for ``/metrics``."""

    def __init__(self, host: NodeHost, *, kubo: KuboClient) -> None:
        self._h = host
        self._kubo = kubo
        self._done: OrderedDict[str, OperationDone] = OrderedDict()
        self.signatures = 0
        """Signatures made through Kubo ``key/sign``."""
        self.failures = 0
        self.seconds = 0.0
        self.delegates: DelegateKeeper | None = None
        """The delegated signing key's keeper (signatures on, ``delegate_ttl`` > 0)."""

    def request(self, out: SignRequest, spawn: Callable[..., object] | None) -> None:
        """Carry out a :class:`SignRequest` in a task (``spawn``; ``None``: the driver
        is not running, the request fails at once)."""
        h = self._h
        if spawn is None:
            h.call(lambda now: h.node.sign_failed(now, out.request_id, "not running"))
            return
        spawn(self._sign_task, out)

    async def _sign_task(self, out: SignRequest) -> None:
        h = self._h
        t0 = time.perf_counter()
        try:
            with anyio.fail_after(SIGN_TIMEOUT):
                signed = await self._kubo.key_sign(out.data)
            signature = signed.signature
        except (KuboError, TimeoutError) as exc:
            self.failures += 1
            reason = f"Kubo key/sign: {exc or type(exc).__name__}"
            log.warning("signing failed: %s", reason)
            h.call(lambda now: h.node.sign_failed(now, out.request_id, reason))
            return
        self.signatures += 1
        self.seconds += time.perf_counter() - t0
        try:
            h.call(lambda now: h.node.signed(now, out.request_id, signature))
        except Exception:
            log.exception("signed(%s) failed", out.request_id)

    def operation_done(self, out: OperationDone) -> None:
        """The core finished an operation: keep its answer for :meth:`complete`."""
        if out.error is not None:
            log.warning("operation %s failed: %s", out.op, out.error)
        self._done[out.op] = out
        if len(self._done) > DONE_KEPT:  # answers nobody waits for any more
            self._done.popitem(last=False)

    async def complete(self, value: T | Pending) -> T:
        """The result of an API command: ``value``, or, for :class:`Pending`, what the
        operation finished with once Kubo signed it (:class:`SigningFailed` if not)."""
        if not isinstance(value, Pending):
            return value
        op = value.op
        done = await self._h.wait_for(lambda: op in self._done, max_wait=OPERATION_TIMEOUT)
        if not done:
            raise SigningFailed(f"signing through Kubo took over {OPERATION_TIMEOUT:.0f} s")
        out = self._done.pop(op)
        if out.error is not None or out.result is None:
            raise SigningFailed(out.error or "the operation failed")
        return out.result  # type: ignore[return-value]

    async def _kubo_sign(self, data: bytes) -> bytes:
        """Kubo ``key/sign`` with the node's own key (:data:`SIGN_TIMEOUT`)."""
        with anyio.fail_after(SIGN_TIMEOUT):
            return (await self._kubo.key_sign(data)).signature

    async def start_delegating(self, *, ttl: float) -> None:
        """Keep a delegated signing key of ``ttl`` seconds, the first made now."""
        self.delegates = DelegateKeeper(peer_id=self._h.peer_id, ttl=ttl, sign=self._kubo_sign)
        await self.renew_delegate()

    def delegate_due(self, now: float) -> bool:
        """Whether the delegated key needs renewing (:meth:`renew_delegate`)."""
        return self.delegates is not None and self.delegates.due(now)

    async def renew_delegate(self) -> None:
        """Make a new delegated signing key and hand it to the core (:mod:`._delegate`)."""
        if self.delegates is None:
            return
        h = self._h
        key = await self.delegates.renew(h.clock())
        if key is not None:
            h.call(lambda now: h.node.use_delegate(now, key))
