"""Publish at an acknowledgement level (docs/http-api.md "Publish"; the core's side is
``pulsarcast_ipfs.core._acks``).

``ack = 0`` (``"local"``): answered once the event is in this node (as before).
``ack = N``: the event goes out at once, exactly as at ``local``, and the answer waits
until N other nodes said they hold it (STORED: stored and pinned), at most
``ack_timeout`` seconds; then :class:`NotAcknowledged`, with the holders that did
answer. Until it has its holders the event is in the persisted outbox
(:mod:`._outbox`) and the core goes on offering it, across a restart too.

An *idempotency key* names a publish: a second call with the same key makes no new
event; it answers for the event the first one made (and waits for its holders).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol

import anyio

from pulsarcast_ipfs.core import LocalProtocolError, PublishResult, cid_from_str, cid_str
from pulsarcast_ipfs.core._acks import MAX_ACK
from pulsarcast_ipfs.core._cid import CID

from ._host import NodeHost
from ._outbox import Outbox, OutboxItem
from ._state import StateError

__all__ = [
    "DEFAULT_ACK",
    "DEFAULT_ACK_TIMEOUT",
    "MAX_ACK",
    "MAX_ACK_TIMEOUT",
    "AckHost",
    "AckLevels",
    "NotAcknowledged",
    "Published",
    "parse_ack",
    "parse_idempotency_key",
]

log = logging.getLogger("pulsarcast.sidecar.acks")

DEFAULT_ACK: Final = 1
DEFAULT_ACK_TIMEOUT: Final = 10.0
MAX_ACK_TIMEOUT: Final = 300.0
MAX_KEY_LENGTH: Final = 200
RESUME_WAIT: Final = 60.0
"""How long a restarted sidecar waits for the topic of an outbox event to be known
again (its subscription resumed) before it leaves the event in the file."""


class NotAcknowledged(Exception):
    """Fewer than the asked holders answered within the time: the event exists and
    stays in the outbox (offered on)."""

    def __init__(self, event: CID, holders: tuple[str, ...], needed: int, waited: float) -> None:
        super().__init__(
            f"event {cid_str(event)} held by {len(holders)} of the {needed} other node(s) "
            f"asked within {waited:g} s; it stays in the outbox and is offered again"
        )
        self.event = event
        self.holders = holders
        self.needed = needed


@dataclass(frozen=True, slots=True, kw_only=True)
class Published:
    """A publish call's answer: the core's result, the level, and the holders."""

    result: PublishResult
    ack: int
    holders: tuple[str, ...]
    repeated: bool = False
    """The idempotency key named an earlier publish: no new event was made."""


def parse_ack(value: object) -> int:
    """``"local"`` -> 0, ``N`` or ``"N"`` (1..MAX_ACK) -> N; ValueError saying why."""
    if value == "local":
        return 0
    if isinstance(value, bool):
        raise ValueError('ack must be "local" or a number of other nodes from 1 to 64')
    if isinstance(value, str) and value.isdigit() and len(value) <= 3:
        value = int(value)
    if not isinstance(value, int) or not 1 <= value <= MAX_ACK:
        raise ValueError(f'ack must be "local" or a number of other nodes from 1 to {MAX_ACK}')
    return value


def parse_idempotency_key(value: object) -> str:
    if (
        not isinstance(value, str)
        or not 1 <= len(value) <= MAX_KEY_LENGTH
        or not value.isprintable()
    ):
        raise ValueError(
            f"an idempotency key is a printable string of 1 to {MAX_KEY_LENGTH} characters"
        )
    return value


class AckHost(NodeHost, Protocol):
    """What publishing at acknowledgement levels needs of the driver."""

    @property
    def blocks(self) -> Mapping[CID, bytes]:
        """Recently stored blocks (an own event's, to offer it on)."""
        ...

    def fail(self, why: str) -> None:
        """Stop: the state (here the outbox) cannot be written."""
        ...

    async def publish_now(
        self,
        cid: CID,
        payload: bytes,
        *,
        parent: CID | None,
        inject_id: str | None,
        attributes: dict[str, Any] | None = None,
        ack: int = 0,
    ) -> PublishResult:
        """The core's publish, signed: the event exists and is on its way."""
        ...


class AckLevels:
    """The driver's publishes at acknowledgement levels, and its outbox."""

    def __init__(self, host: AckHost, *, state_path: Path) -> None:
        self.d = host
        self.outbox = Outbox(state_path)
        self._in_flight: dict[str, anyio.Event] = {}
        """Idempotency keys of publishes not answered by the core yet (signing)."""

    def load(self) -> list[OutboxItem]:
        return self.outbox.load()

    async def publish(
        self,
        cid: CID,
        payload: bytes,
        *,
        parent: CID | None,
        inject_id: str | None,
        attributes: dict[str, Any] | None,
        ack: int,
        ack_timeout: float,
        key: str | None,
    ) -> Published:
        if key is not None:
            while key in self._in_flight:
                await self._in_flight[key].wait()
            entry = self.outbox.keys.get(key)
            if entry is not None:
                return await self._again(
                    key, entry.event, ack, ack_timeout, entry.holders, entry.done
                )
            self._in_flight[key] = anyio.Event()
        try:
            res = await self.d.publish_now(
                cid,
                payload,
                parent=parent,
                inject_id=inject_id if inject_id is not None else key,
                attributes=attributes,
                ack=ack,
            )
            if res.event_cid is None:  # a request to publish: no outbox (docs)
                return Published(result=res, ack=0, holders=())
            root = self.d.known_root(cid)
            topic = cid_str(root if root is not None else cid)
            ev = cid_str(res.event_cid)
            try:
                if ack:
                    data = self.d.blocks.get(res.event_cid)
                    if data is None:
                        raise StateError(f"the block of {ev} is gone before it was saved")
                    self.outbox.add(OutboxItem(cid=ev, topic=topic, event=data, ack=ack, key=key))
                elif key is not None:
                    self.outbox.key_published(key, ev, topic)
            except StateError as exc:
                self.d.fail(str(exc))
                raise
        finally:
            if key is not None:
                self._in_flight.pop(key).set()
        if not ack:
            return Published(result=res, ack=0, holders=())
        holders = await self._wait(res.event_cid, ack, ack_timeout)
        return Published(result=res, ack=ack, holders=holders)

    async def _again(
        self, key: str, ev: str, ack: int, ack_timeout: float, holders: list[str], done: bool
    ) -> Published:
        event = cid_from_str(ev)
        res = PublishResult(status="published", event_cid=event, request_id=None, inject_id=key)
        if done or not ack:
            return Published(result=res, ack=ack, holders=tuple(holders), repeated=True)
        got = await self._wait(event, ack, ack_timeout)
        return Published(result=res, ack=ack, holders=got, repeated=True)

    async def _wait(self, event: CID, ack: int, ack_timeout: float) -> tuple[str, ...]:
        node = self.d.node
        ok = await self.d.wait_for(
            lambda: node.acknowledged(event) is not None, max_wait=ack_timeout
        )
        if not ok:
            raise NotAcknowledged(event, node.holders(event) or (), ack, ack_timeout)
        holders = node.acknowledged(event) or ()
        self._done(cid_str(event), holders)
        return holders

    def _done(self, ev: str, holders: Iterable[str]) -> None:
        try:
            self.outbox.done(ev, list(holders))
        except StateError as exc:
            self.d.fail(str(exc))

    def sweep(self) -> None:
        """Housekeeping: the waiting events that reached their level meanwhile (their
        publish call timed out, or they came back from before a restart)."""
        node = self.d.node
        for ev in list(self.outbox.waiting):
            holders = node.acknowledged(cid_from_str(ev))
            if holders is not None:
                self._done(ev, holders)

    async def resume(self, items: list[OutboxItem]) -> None:
        """After a restart: hand the events still waiting back to the core, each once
        its topic is known again (subscriptions resumed)."""
        for item in items:
            root = cid_from_str(item.topic)
            known = await self.d.wait_for(
                lambda root=root: self.d.known_root(root) is not None,  # type: ignore[misc]
                max_wait=RESUME_WAIT,
            )
            if not known:
                log.warning(
                    "outbox event %s: topic %s not known after %g s; left in the outbox",
                    item.cid,
                    item.topic,
                    RESUME_WAIT,
                )
                continue
            try:
                self.d.call(
                    lambda now, item=item, root=root: self.d.node.resume_outbox(  # type: ignore[misc]
                        now, root, item.event, needed=item.ack
                    )
                )
            except LocalProtocolError as exc:
                log.warning("outbox event %s not resumed: %s", item.cid, exc)
                continue
            log.info("outbox event %s offered again (waits for %d holder(s))", item.cid, item.ack)

    def close(self) -> None:
        self.outbox.close()
