"""Fixed-width records keyed by a sha2-256 digest, with no Python object per record.

Theory of operation
-------------------
A retained history (:mod:`._history`) and the sidecar's retention bookkeeping keep
something per retained event, and a node retains up to a million of them. A ``dict``
keyed by CID bytes costs ~120 bytes an entry before any payload (the key's ``bytes``
object, ~72, and the entry and its share of the table, ~50); the record it maps to
costs another object. A :class:`DigestTable` holds its records in one ``bytearray``
instead, each ``width`` bytes long with the 32-byte digest at ``key_at``, and finds
them through an open-addressing index:

* **slots**: record ``s`` is ``data[s * width : (s + 1) * width]``. A slot keeps its
  number while its record lives (callers keep slot numbers in their own arrays);
  freed slots are reused, newest freed first. The bytes grow to the largest number
  of records held at once (a high-water mark) and are not given back.
* **index**: an ``array('I')`` of ``slot + 1`` (0: empty), its size a power of two
  at least twice the records (linear probing; about 1.5 probes a hit). A digest's
  first probe is its ``hash()`` — Python's keyed SipHash of the bytes — so that
  digests chosen by a peer cannot pile up in one probe run. Deletion shifts the
  run back (no tombstones), so lookups never slow down with churn.

So a record costs its ``width`` plus 8 to 16 bytes of index. Pure: no I/O; the
index's layout depends on the process's hash seed, and nothing else does (no
iteration follows it).
"""

from __future__ import annotations

from array import array
from typing import Final

from pulsarcast_ipfs.core._cid import CID

__all__ = ["DIGEST_SIZE", "CIDFlags", "DigestTable"]

DIGEST_SIZE: Final = 32
"""Bytes of a sha2-256 digest: every key."""
_MIN_INDEX: Final = 8


class DigestTable:
    """Records of ``width`` bytes keyed by the 32-byte digest at ``key_at`` (see the
    module). The caller reads and writes a record's other bytes in :attr:`data`."""

    __slots__ = ("_free", "_index", "_len", "_mask", "_zero", "data", "key_at", "width")

    def __init__(self, width: int, *, key_at: int = 0) -> None:
        if not 0 <= key_at <= width - DIGEST_SIZE:
            raise ValueError("the digest must lie within the record")
        self.width = width
        self.key_at = key_at
        self.data = bytearray()
        """The records, slot after slot (free slots hold zeros)."""
        self._zero = bytes(width)
        self._free = array("I")
        self._index = array("I", bytes(4 * _MIN_INDEX))
        self._mask = _MIN_INDEX - 1
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def digest(self, slot: int) -> bytes:
        """The digest of the record in ``slot``."""
        at = slot * self.width + self.key_at
        return bytes(self.data[at : at + DIGEST_SIZE])

    def find(self, digest: bytes) -> int:
        """The slot of ``digest``'s record, or -1."""
        index, mask, data = self._index, self._mask, self.data
        width, key_at = self.width, self.key_at
        i = hash(digest) & mask
        while True:
            ref = index[i]
            if not ref:
                return -1
            at = (ref - 1) * width + key_at
            if data[at : at + DIGEST_SIZE] == digest:
                return ref - 1
            i = (i + 1) & mask

    def insert(self, digest: bytes) -> int:
        """A new record for ``digest`` (not in the table: :meth:`find` first), zeros
        but for the digest; its slot."""
        if len(digest) != DIGEST_SIZE:
            raise ValueError("a key is a 32-byte digest")
        width = self.width
        if self._free:
            slot = self._free.pop()
        else:
            slot = len(self.data) // width
            self.data += self._zero
        at = slot * width + self.key_at
        self.data[at : at + DIGEST_SIZE] = digest
        self._len += 1
        if 2 * self._len > len(self._index):
            self._resize(2 * len(self._index))
        index, mask = self._index, self._mask
        i = hash(digest) & mask
        while index[i]:
            i = (i + 1) & mask
        index[i] = slot + 1
        return slot

    def remove(self, slot: int) -> None:
        """Forget the record in ``slot`` (which must hold one); the slot is free."""
        index, mask = self._index, self._mask
        ref = slot + 1
        i = hash(self.digest(slot)) & mask
        while index[i] != ref:
            if not index[i]:
                raise KeyError(f"slot {slot} holds no record")
            i = (i + 1) & mask
        # Backward-shift deletion: move up every later entry of the run whose first
        # probe is not between the hole and it.
        j = i
        while True:
            j = (j + 1) & mask
            ref = index[j]
            if not ref:
                break
            home = hash(self.digest(ref - 1)) & mask
            if (i < j and (home <= i or home > j)) or (j < i and home <= i and home > j):
                index[i] = ref
                i = j
        index[i] = 0
        width = self.width
        self.data[slot * width : (slot + 1) * width] = self._zero
        self._free.append(slot)
        self._len -= 1

    def _resize(self, size: int) -> None:
        old = self._index
        index = array("I", bytes(4 * size))
        mask = size - 1
        for ref in old:
            if ref:
                i = hash(self.digest(ref - 1)) & mask
                while index[i]:
                    i = (i + 1) & mask
                index[i] = ref
        self._index = index
        self._mask = mask

    def nbytes(self) -> int:
        """Bytes held (records, index, free list), for the memory reports."""
        return (
            len(self.data)
            + self._index.itemsize * len(self._index)
            + self._free.itemsize * len(self._free)
        )


_DAG_CBOR_SHA256: Final = b"\x01\x71\x12\x20"
_FLAG_WIDTH: Final = DIGEST_SIZE + 1


class CIDFlags:
    """A map from CIDs to a ``bool``, one 33-byte record (digest, flag) of a
    :class:`DigestTable` per CIDv1 dag-cbor sha2-256 (every event's and topic's), a
    ``dict`` entry for any other CID. What a sidecar keeps per retained event
    (whether it is its own) costs ~45 bytes rather than a ``dict`` entry and a key
    object (~120)."""

    __slots__ = ("_other", "_table")

    def __init__(self) -> None:
        self._table = DigestTable(_FLAG_WIDTH)
        self._other: dict[bytes, bool] = {}

    def __len__(self) -> int:
        return len(self._table) + len(self._other)

    @staticmethod
    def _digest(raw: bytes) -> bytes | None:
        return raw[4:] if len(raw) == 36 and raw.startswith(_DAG_CBOR_SHA256) else None

    def __contains__(self, cid: object) -> bool:
        return isinstance(cid, CID) and self.get(cid) is not None

    def get(self, cid: CID) -> bool | None:
        """The flag of ``cid``, or None if it has none."""
        raw = bytes(cid)
        digest = self._digest(raw)
        if digest is None:
            return self._other.get(raw)
        slot = self._table.find(digest)
        return None if slot < 0 else bool(self._table.data[slot * _FLAG_WIDTH + DIGEST_SIZE])

    def __setitem__(self, cid: CID, flag: bool) -> None:
        raw = bytes(cid)
        digest = self._digest(raw)
        if digest is None:
            self._other[raw] = flag
            return
        t = self._table
        slot = t.find(digest)
        if slot < 0:
            slot = t.insert(digest)
        t.data[slot * _FLAG_WIDTH + DIGEST_SIZE] = 1 if flag else 0

    def pop(self, cid: CID) -> bool | None:
        """Forget ``cid``; its flag, or None if it had none."""
        raw = bytes(cid)
        digest = self._digest(raw)
        if digest is None:
            return self._other.pop(raw, None)
        t = self._table
        slot = t.find(digest)
        if slot < 0:
            return None
        flag = bool(t.data[slot * _FLAG_WIDTH + DIGEST_SIZE])
        t.remove(slot)
        return flag
