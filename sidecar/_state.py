"""The sidecar's own persisted state ("persisted on disk so that a restarted
sidecar resumes its subscriptions and repairs what it missed").

``state.json`` (rewritten atomically: temp file, fsync, rename) holds the peer ID,
the created topics, the subscriptions (with the time they started, so the core's
gap repair recovers everything since), the last-seen heads per topic and the
next delivery sequence number. ``deliveries.ndjson`` is the append-only delivery
log (one Delivery object per line, ``seq`` increasing); it is rotated (oldest
half dropped, atomically) when it exceeds its bound. The set of delivered event
CIDs rebuilt from it lets the driver suppress duplicates after a restart, when
the core's gap repair re-delivers events it cannot know were delivered before.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pulsarcast_ipfs.core import FilterSyntaxError, cid_from_str, parse_filter
from pulsarcast_ipfs.core._cid import CID

from ._consumers import Consumer

__all__ = ["PersistedState", "StateError", "StateStore"]

STATE_FILE = "state.json"
DELIVERY_LOG = "deliveries.ndjson"
STATE_VERSION = 1
_COMPACT = json.JSONEncoder(separators=(",", ":"))
"""``json.dumps(obj, separators=(",", ":"))`` without a new encoder per line."""


class StateError(RuntimeError):
    """The state directory cannot be used (corrupt file, other node's state, I/O error).

    Nothing is overwritten when this is raised: the files stay as they were.
    """


def atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (temp file in the same dir, fsync, rename)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


@dataclass(slots=True, kw_only=True)
class PersistedState:
    """What ``state.json`` holds."""

    peer_id: str | None = None
    created: list[str] = field(default_factory=list)
    """Root CIDs of topics this node created (it is their author)."""
    subscriptions: dict[str, float] = field(default_factory=dict)
    """Root topic CID → when the subscription started (epoch seconds)."""
    heads: dict[str, list[str]] = field(default_factory=dict)
    """Root topic CID → most recent event CIDs seen, newest first."""
    filters: dict[str, str] = field(default_factory=dict)
    """Root topic CID → the subscription's filter, in its canonical text;
    a subscription without one has no entry."""
    fast: list[str] = field(default_factory=list)
    """Root CIDs of the subscriptions made with ``fast`` (fast groups)."""
    consumer_only: list[str] = field(default_factory=list)
    """Root CIDs of the subscriptions held only for consumers (no explicit
    ``subscribe``): the node leaves such a topic with its last consumer. ``filters``
    and ``fast`` are the explicit subscription's; an older file has no such entry
    (every subscription explicit)."""
    consumers: list[dict[str, Any]] = field(default_factory=list)
    """The consumers (``sidecar._consumers.Consumer.to_state``): filter and cursor."""
    next_seq: int = 1

    def to_json(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "peer_id": self.peer_id,
            "created": self.created,
            "subscriptions": self.subscriptions,
            "heads": self.heads,
            "filters": self.filters,
            "fast": self.fast,
            "consumer_only": self.consumer_only,
            "consumers": self.consumers,
            "next_seq": self.next_seq,
        }

    @classmethod
    def from_json(cls, doc: Any, where: Path) -> PersistedState:
        def bad(msg: str) -> StateError:
            return StateError(f"{where}: {msg} (fix or move the file away; it was not changed)")

        if not isinstance(doc, dict):
            raise bad("expected a JSON object")
        if doc.get("version") != STATE_VERSION:
            raise bad(f"unsupported state version {doc.get('version')!r}")
        peer = doc.get("peer_id")
        created = doc.get("created", [])
        subs = doc.get("subscriptions", {})
        heads = doc.get("heads", {})
        filters = doc.get("filters", {})
        seq = doc.get("next_seq", 1)
        fast = doc.get("fast", [])
        if not isinstance(fast, list) or not all(isinstance(c, str) for c in fast):
            raise bad("fast must be a list of CIDs")
        consumer_only = doc.get("consumer_only", [])
        if not isinstance(consumer_only, list) or not all(
            isinstance(c, str) for c in consumer_only
        ):
            raise bad("consumer_only must be a list of CIDs")
        consumers = doc.get("consumers", [])
        if not isinstance(consumers, list):
            raise bad("consumers must be a list")
        for one in consumers:
            try:
                Consumer.from_state(one)
            except ValueError as exc:
                raise bad(f"consumers: {exc}") from None
        if peer is not None and not isinstance(peer, str):
            raise bad("peer_id must be a string")
        if not isinstance(created, list) or not all(isinstance(c, str) for c in created):
            raise bad("created must be a list of CIDs")
        if not isinstance(subs, dict) or not all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in subs.values()
        ):
            raise bad("subscriptions must map topic CIDs to times")
        if not isinstance(heads, dict) or not all(
            isinstance(v, list) and all(isinstance(c, str) for c in v) for v in heads.values()
        ):
            raise bad("heads must map topic CIDs to lists of CIDs")
        if not isinstance(filters, dict) or not all(isinstance(v, str) for v in filters.values()):
            raise bad("filters must map topic CIDs to filter texts")
        for root, text in filters.items():
            try:
                parse_filter(text)
            except FilterSyntaxError as exc:
                raise bad(f"the filter of subscription {root} does not parse: {exc}") from None
        if not isinstance(seq, int) or isinstance(seq, bool) or seq < 1:
            raise bad("next_seq must be a positive integer")
        return cls(
            peer_id=peer,
            created=list(created),
            subscriptions={str(k): float(v) for k, v in subs.items()},
            heads={str(k): list(v) for k, v in heads.items()},
            filters={str(k): v for k, v in filters.items()},
            fast=list(fast),
            consumer_only=list(consumer_only),
            consumers=list(consumers),
            next_seq=seq,
        )


class StateStore:
    """The state directory: ``state.json`` plus the delivery log."""

    def __init__(self, directory: Path, *, log_max: int = 100_000) -> None:
        self.dir = directory
        self._log_path: tuple[Path | None, str] = (None, "")
        """(the directory it was made for, the delivery log's path as text)."""
        self.log_max = log_max
        self.state = PersistedState()
        self.delivered: OrderedDict[str, int] = OrderedDict()
        """Delivered event CID → seq (bounded like the log)."""
        self._log_lines = 0
        self._first_seq = 1
        self._snapshots = 0
        self._written = 0
        self._write_lock = threading.Lock()
        self._log_fd: int | None = None
        self._log_id: tuple[int, int] = (0, 0)
        """(device, inode) of the file ``_log_fd`` is open on."""

    @property
    def state_file(self) -> Path:
        return self.dir / STATE_FILE

    @property
    def log_file(self) -> Path:
        return self.dir / DELIVERY_LOG

    def load(self, peer_id: str) -> None:
        """Read the state (creating the directory); refuse another node's state."""
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StateError(f"cannot create state directory {self.dir}: {exc}") from None
        path = self.state_file
        if path.exists():
            try:
                text = path.read_text(encoding="utf-8")
            except OSError as exc:
                raise StateError(f"cannot read {path}: {exc}") from None
            try:
                doc = json.loads(text)
            except json.JSONDecodeError as exc:
                raise StateError(
                    f"{path}: corrupt state file ({exc}); fix or move it away, it was not changed"
                ) from None
            self.state = PersistedState.from_json(doc, path)
            if self.state.peer_id not in (None, peer_id):
                raise StateError(
                    f"{path} belongs to peer {self.state.peer_id}, but Kubo is {peer_id}: "
                    "use another --state-dir"
                )
        self.state.peer_id = peer_id
        self._drop_torn_tail()
        last_seq = 0
        for obj in self._read_log():
            seq = obj["seq"]
            self.delivered[obj["cid"]] = seq
            self._log_lines += 1
            last_seq = max(last_seq, seq)
            if self._log_lines == 1:
                self._first_seq = seq
        while len(self.delivered) > self.log_max:
            self.delivered.popitem(last=False)
        self.state.next_seq = max(self.state.next_seq, last_seq + 1)
        self.save()

    def delivered_cids(self, limit: int) -> list[CID]:
        """The newest ``limit`` delivered events, oldest first, for the core
        (``restore_delivered``: gap repair after a restart stops at them)."""
        out: list[CID] = []
        for cid in list(self.delivered)[-limit:] if limit > 0 else ():
            with contextlib.suppress(ValueError):
                out.append(cid_from_str(cid))
        return out

    def _drop_torn_tail(self) -> None:
        """Cut a torn last line (a crash or a full disk while appending) off the log,
        so that the next append starts on a line of its own."""
        path = self.log_file
        try:
            with open(path, "rb") as f:
                size = f.seek(0, os.SEEK_END)
                if size == 0:
                    return
                f.seek(size - 1)
                if f.read(1) == b"\n":
                    return
            with open(path, "rb+") as f:
                keep = 0
                pos = size
                while pos > 0 and not keep:
                    step = min(65536, pos)
                    pos -= step
                    f.seek(pos)
                    chunk = f.read(step)
                    nl = chunk.rfind(b"\n")
                    if nl >= 0:
                        keep = pos + nl + 1
                f.truncate(keep)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise StateError(f"cannot repair the torn end of {path}: {exc}") from None

    def _read_log(self) -> Iterator[dict[str, Any]]:
        path = self.log_file
        if not path.exists():
            return
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError:
                    if not line.endswith("\n"):
                        return  # a torn last line (crash while appending): ignore it
                    raise StateError(f"{path}:{n}: corrupt delivery log line") from None
                if (
                    not isinstance(obj, dict)
                    or not isinstance(obj.get("seq"), int)
                    or not isinstance(obj.get("cid"), str)
                ):
                    raise StateError(f"{path}:{n}: a delivery needs an integer seq and a cid")
                yield obj

    def save(self) -> None:
        """Rewrite ``state.json`` atomically; :class:`StateError` if the disk refuses
        (full, read-only, immutable): the previous file is then left intact."""
        self.write(*self.snapshot())

    def snapshot(self) -> tuple[int, str]:
        """The state as it is now, numbered, for :meth:`write` (in the event loop)."""
        self._snapshots += 1
        return self._snapshots, json.dumps(self.state.to_json(), indent=1, sort_keys=True)

    def write(self, number: int, text: str) -> None:
        """Write snapshot ``number`` atomically, unless a later one is written already.

        Safe from a worker thread: the sidecar saves in one so that the two
        ``fsync`` calls never stall its event loop; a snapshot taken earlier never
        replaces a later one, whichever thread finishes first.
        """
        with self._write_lock:
            if number <= self._written:
                return
            try:
                atomic_write(self.state_file, text)
            except OSError as exc:
                raise StateError(
                    f"cannot write {self.state_file}: {exc.strerror or exc} "
                    "(the previous state file is intact)"
                ) from exc
            self._written = number

    # deliveries

    def append_delivery(self, delivery: dict[str, Any]) -> dict[str, Any]:
        """Give ``delivery`` the next seq, append it to the log and return it.

        The line goes to the kernel in one ``write`` on a descriptor kept open
        (``O_APPEND``, no user-space buffer) before this returns: as before, when the
        file was opened and closed per line, a crash of the sidecar loses no
        returned delivery, and nothing is fsynced (a power cut may lose the last
        lines; gap repair delivers those events again, see docs/sidecar.md). The
        descriptor follows the path: one ``stat`` per line, and a file replaced,
        moved or removed (rotation, an operator) is opened again.
        """
        seq = self.state.next_seq
        obj = {**delivery, "seq": seq}
        line = _COMPACT.encode(obj) + "\n"
        try:
            self._write_log(line.encode("utf-8"))
        except OSError as exc:
            # Nothing is counted as delivered: after the disk is fixed and the sidecar
            # restarted, gap repair delivers the event again. A partial line at the end
            # of the log is a torn line, which loading ignores.
            self.close()
            raise StateError(
                f"cannot append to {self.log_file}: {exc.strerror or exc} "
                "(the delivery log up to the previous line is intact)"
            ) from exc
        self.state.next_seq += 1
        self.delivered[obj["cid"]] = seq
        if len(self.delivered) > self.log_max:
            self.delivered.popitem(last=False)
        self._log_lines += 1
        if self._log_lines > self.log_max:
            self._rotate()
        return obj

    def _write_log(self, data: bytes) -> None:
        # The path as text, made once per directory: building the Path per line was
        # a third of a delivery's log write (py-spy, 20 events/s on 20 nodes).
        if self._log_path[0] is not self.dir:
            self._log_path = (self.dir, os.fspath(self.log_file))
        path = self._log_path[1]
        fd = self._log_fd
        if fd is not None:
            try:
                st = os.stat(path)
            except FileNotFoundError:
                st = None
            if st is None or (st.st_dev, st.st_ino) != self._log_id:
                self.close()
                fd = None
        if fd is None:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)
            st = os.fstat(fd)
            self._log_fd, self._log_id = fd, (st.st_dev, st.st_ino)
        view = memoryview(data)
        while view:  # a short write (a disk filling up) is followed by the rest or an error
            view = view[os.write(fd, view) :]

    def close(self) -> None:
        """Close the delivery log's descriptor (opened again by the next append)."""
        fd, self._log_fd = self._log_fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def __del__(self) -> None:
        self.close()

    def _rotate(self) -> None:
        self.close()
        keep = list(self._read_log())[-(self.log_max // 2) :]
        atomic_write(
            self.log_file, "".join(json.dumps(o, separators=(",", ":")) + "\n" for o in keep)
        )
        self._log_lines = len(keep)
        self._first_seq = keep[0]["seq"] if keep else self.state.next_seq

    def replay(self, after: int, topic: str | None = None) -> Iterator[dict[str, Any]]:
        """Persisted deliveries with ``seq > after`` (of one root topic if given), oldest first."""
        for obj in self._read_log():
            if obj["seq"] > after and (topic is None or obj.get("topic_root") == topic):
                yield obj

    @property
    def last_seq(self) -> int:
        return self.state.next_seq - 1
