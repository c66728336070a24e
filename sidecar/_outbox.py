"""The persisted outbox: events published at an acknowledgement level and not yet
held by enough other nodes, and the idempotency keys of recent publishes
(docs/http-api.md "Publish", docs/faults.md "Acknowledgement levels").

``outbox.ndjson`` in the state directory is an append-only log, one JSON object per
line, written like the delivery log (one ``write`` per line on an ``O_APPEND``
descriptor, before the publish call is answered: a crash of the sidecar loses no
line it wrote; a power cut may lose the last ones)::

    {"add": CID, "topic": root CID, "event": base64 block, "ack": N, "key": k | null}
    {"done": CID, "holders": [peer, ...]}     enough nodes hold it
    {"key": k, "event": CID, "topic": root CID}  a publish at ack=local with a key

At start the log is read (a torn last line is ignored), the events still waiting are
handed back to the core (``resume_outbox``: offered again), and the log is rewritten
atomically with only what is still needed: the waiting events and the newest
:data:`KEYS_MAX` keys. It is rewritten so again when it has grown to four times that.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import logging
import os
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from ._state import StateError, atomic_write

__all__ = ["OUTBOX_FILE", "KeyEntry", "Outbox", "OutboxItem"]

log = logging.getLogger("pulsarcast.sidecar.outbox")

OUTBOX_FILE: Final = "outbox.ndjson"
KEYS_MAX: Final = 10_000
"""Idempotency keys remembered (the newest), waiting events' keys included."""


@dataclass(slots=True, kw_only=True)
class OutboxItem:
    """An event of this node waiting for ``ack`` holders."""

    cid: str
    topic: str
    event: bytes
    ack: int
    key: str | None = None


@dataclass(slots=True, kw_only=True)
class KeyEntry:
    """What a publish with an idempotency key made: the event, and its holders once
    it reached its level (``done``)."""

    event: str
    topic: str
    ack: int
    done: bool = False
    holders: list[str] = field(default_factory=list)


class Outbox:
    """The outbox file of one state directory."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / OUTBOX_FILE
        self.waiting: dict[str, OutboxItem] = {}
        """Events waiting for holders, by CID, oldest first."""
        self.keys: OrderedDict[str, KeyEntry] = OrderedDict()
        self._fd: int | None = None
        self._lines = 0

    def load(self) -> list[OutboxItem]:
        """Read the log (the directory exists: the state store made it) and compact
        it; the events still waiting, oldest first. :class:`StateError` if it cannot
        be read or written (nothing is changed then)."""
        try:
            raw = self.path.read_bytes() if self.path.exists() else b""
        except OSError as exc:
            raise StateError(f"cannot read {self.path}: {exc.strerror or exc}") from None
        for n, line in enumerate(raw.split(b"\n"), 1):
            if not line.strip():
                continue
            try:
                self._apply(json.loads(line))
            except (ValueError, KeyError, TypeError, binascii.Error) as exc:
                if n == raw.count(b"\n") + 1:
                    log.warning("%s: torn last line dropped (%s)", self.path, exc)
                    continue
                raise StateError(
                    f"{self.path}:{n}: corrupt outbox line ({exc}); fix or move the file "
                    "away, it was not changed"
                ) from None
        self._compact()
        return list(self.waiting.values())

    def _apply(self, obj: dict[str, Any]) -> None:
        if "add" in obj:
            item = OutboxItem(
                cid=str(obj["add"]),
                topic=str(obj["topic"]),
                event=base64.b64decode(obj["event"], validate=True),
                ack=int(obj["ack"]),
                key=obj.get("key"),
            )
            self.waiting[item.cid] = item
            if item.key is not None:
                self._remember(item.key, KeyEntry(event=item.cid, topic=item.topic, ack=item.ack))
        elif "done" in obj:
            cid = str(obj["done"])
            gone = self.waiting.pop(cid, None)
            if gone is not None and gone.key is not None:
                entry = self.keys.get(gone.key)
                if entry is not None:
                    entry.done = True
                    entry.holders = [str(h) for h in obj.get("holders", [])]
        elif "key" in obj:
            self._remember(
                str(obj["key"]),
                KeyEntry(event=str(obj["event"]), topic=str(obj["topic"]), ack=0, done=True),
            )
        else:
            raise ValueError("neither add, done nor key")

    def _remember(self, key: str, entry: KeyEntry) -> None:
        self.keys[key] = entry
        self.keys.move_to_end(key)
        while len(self.keys) > KEYS_MAX:
            self.keys.popitem(last=False)

    def _lines_now(self) -> list[dict[str, Any]]:
        lines: list[dict[str, Any]] = []
        for key, entry in self.keys.items():
            if entry.done or entry.event not in self.waiting:
                lines.append({"key": key, "event": entry.event, "topic": entry.topic})
        for item in self.waiting.values():
            lines.append(_add_line(item))
        return lines

    def _compact(self) -> None:
        lines = self._lines_now()
        text = "".join(json.dumps(obj, separators=(",", ":")) + "\n" for obj in lines)
        self.close()
        try:
            atomic_write(self.path, text)
        except OSError as exc:
            raise StateError(f"cannot write {self.path}: {exc.strerror or exc}") from exc
        self._lines = len(lines)

    def _append(self, obj: dict[str, Any]) -> None:
        data = (json.dumps(obj, separators=(",", ":")) + "\n").encode()
        try:
            if self._fd is None:
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            os.write(self._fd, data)
        except OSError as exc:
            raise StateError(f"cannot append to {self.path}: {exc.strerror or exc}") from exc
        self._lines += 1
        if self._lines > 4 * (KEYS_MAX + len(self.waiting)):
            self._compact()

    def add(self, item: OutboxItem) -> None:
        """An event waits for holders (written before the publish is answered)."""
        self._append(_add_line(item))
        self.waiting[item.cid] = item
        if item.key is not None:
            self._remember(item.key, KeyEntry(event=item.cid, topic=item.topic, ack=item.ack))

    def done(self, cid: str, holders: list[str]) -> None:
        """Enough nodes hold ``cid``: it leaves the outbox."""
        item = self.waiting.get(cid)
        if item is None:
            return
        self._append({"done": cid, "holders": holders})
        del self.waiting[cid]
        if item.key is not None and item.key in self.keys:
            entry = self.keys[item.key]
            entry.done = True
            entry.holders = list(holders)

    def key_published(self, key: str, cid: str, topic: str) -> None:
        """A publish at ``ack=local`` with an idempotency key made ``cid``."""
        self._append({"key": key, "event": cid, "topic": topic})
        self._remember(key, KeyEntry(event=cid, topic=topic, ack=0, done=True))

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None


def _add_line(item: OutboxItem) -> dict[str, Any]:
    return {
        "add": item.cid,
        "topic": item.topic,
        "event": base64.b64encode(item.event).decode(),
        "ack": item.ack,
        "key": item.key,
    }
