"""The retention index: one recursive pin keeps every retained event (docs/sidecar.md
"Retention").

A subscriber keeps its topics' histories against Kubo's garbage collection. One
direct ``pin/add`` per retained event cost Kubo ~0.6 ms of CPU per event even in
batches of 100 (per CID a query for a recursive pin, three synced datastore writes
and a read of the block): half of Kubo's CPU while publishing at 20 events/s on 20
nodes (docs/benchmark-history.md, the gossipsub-parity work). Instead the block
store keeps one small DAG of the
retained events' CIDs, pinned *recursively* under the name :data:`INDEX_PIN_NAME`,
and replaced with ``pin/update`` when it changes: one pin operation per change of
the set, not per event.

The index links every event as a **raw** CID of the event's own multihash
(``bafkrei…``, the same bytes as the event's ``bafyrei…``): Kubo's blockstore and
garbage collector key blocks by multihash, so the raw link keeps the event's block
(Kubo 0.43 ``gc.GC`` compares the raw form of every pinned CID with the stored
keys), and a raw link has no links of its own, so neither the pin nor the collector
walks into an event's parents or topic, which this node may not hold (a recursive
pin of an event would fetch its whole past). ``ipfs pin ls bafyrei…`` of a retained
event therefore says "not pinned"; ``ipfs pin ls --type=recursive`` shows the index.

Layout (dag-cbor, this node's own, never sent): the root
``{"buckets": [link, …], "pulsarcast-retained": 1}`` links buckets
``{"events": [raw link, …]}`` of at most :data:`BUCKET_SIZE` events each, filled in
the order events are retained, so that the oldest go out (the retention policy)
from the oldest buckets and a change rewrites one bucket and the root. The blocks a
change replaces stay in the blockstore unpinned until a ``repo gc``. A sidecar that
starts again reads the index pinned under the name and goes on from it (restarted,
the core retains the history anew as it comes back, and releases what falls out).

Sans-I/O: :class:`RetainIndex` builds the blocks and says what to pin; the block
store (``sidecar._store``) puts and pins them.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Final

from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.core._dagcbor import CborError, decode, encode, sha256_cid
from pulsarcast_ipfs.core._digesttable import DIGEST_SIZE, DigestTable

__all__ = ["BUCKET_SIZE", "EMPTY_ROOT", "INDEX_PIN_NAME", "IndexBuild", "NotAnIndex", "RetainIndex"]

INDEX_PIN_NAME: Final = "pulsarcast-retained"
"""The name of the index's recursive pin in Kubo (``ipfs pin ls --names``)."""
BUCKET_SIZE: Final = 256
"""Event links per bucket block (~10.5 KB)."""
_ROOT_KEY: Final = "pulsarcast-retained"
_DAG_CBOR_V1: Final = b"\x01\x71"
_RAW_V1: Final = b"\x01\x55"
_SHA256_MH: Final = b"\x12\x20"
"""A sha2-256 multihash's first two bytes (code, length)."""
_BUCKET: Final = struct.Struct(">Q")
_WHERE_WIDTH: Final = DIGEST_SIZE + _BUCKET.size


class NotAnIndex(ValueError):
    """A block that is not a retention index root or bucket."""


def _multihash(cid: CID) -> bytes:
    """The multihash bytes of ``cid`` (the blockstore's key)."""
    raw = bytes(cid)
    if raw[:2] in (_DAG_CBOR_V1, _RAW_V1):
        return raw[2:]
    return bytes(cid.digest)  # multiformats: the full multihash


def _key(cid: CID) -> bytes:
    """What the index keys ``cid`` by: its multihash as a CIDv1 dag-cbor's bytes (an
    event's own CID bytes; a raw link's, as the event's)."""
    raw = bytes(cid)
    return raw if raw[:2] == _DAG_CBOR_V1 else _DAG_CBOR_V1 + _multihash(cid)


def _sha256_digest(key: bytes) -> bytes | None:
    """The digest of a key (:func:`_key`) whose multihash is sha2-256, else None."""
    return key[4:] if len(key) == 36 and key.startswith(_DAG_CBOR_V1 + _SHA256_MH) else None


def _head(major: int, n: int) -> bytes:
    if n < 24:
        return bytes([major << 5 | n])
    if n < 0x100:
        return bytes([major << 5 | 24, n])
    if n < 0x10000:
        return bytes([major << 5 | 25]) + n.to_bytes(2, "big")
    return bytes([major << 5 | 26]) + n.to_bytes(4, "big")


def encode_bucket(multihashes: Iterable[bytes]) -> bytes:
    """``{"events": [raw link, …]}`` as strict dag-cbor, the links in the given order
    (built by hand: no CID object per event; tests check it against ``dag_cbor``)."""
    links = [b"\xd8\x2a" + _head(2, len(mh) + 3) + b"\x00" + _RAW_V1 + mh for mh in multihashes]
    return b"\xa1\x66events" + _head(4, len(links)) + b"".join(links)


def decode_bucket(data: bytes) -> list[bytes]:
    """The multihashes a bucket block links; :class:`NotAnIndex` if it is none."""
    try:
        doc = decode(data)
    except CborError as exc:
        raise NotAnIndex(f"not dag-cbor: {exc}") from None
    links = doc.get("events") if isinstance(doc, dict) and len(doc) == 1 else None
    if not isinstance(links, list) or not all(isinstance(c, CID) for c in links):
        raise NotAnIndex('a bucket is {"events": [link, ...]}')
    return [_multihash(c) for c in links]


def decode_root(data: bytes) -> list[CID]:
    """The bucket CIDs a root block links; :class:`NotAnIndex` if it is none."""
    try:
        doc = decode(data)
    except CborError as exc:
        raise NotAnIndex(f"not dag-cbor: {exc}") from None
    if not isinstance(doc, dict) or doc.get(_ROOT_KEY) != 1 or set(doc) != {"buckets", _ROOT_KEY}:
        raise NotAnIndex(f'a root is {{"buckets": [...], "{_ROOT_KEY}": 1}}')
    buckets = doc["buckets"]
    if not isinstance(buckets, list) or not all(isinstance(c, CID) for c in buckets):
        raise NotAnIndex("the root's buckets are links")
    return list(buckets)


@dataclass(frozen=True, slots=True, kw_only=True)
class IndexBuild:
    """One version of the index, to put (``blocks``, the root last) and then pin in
    place of the pinned one; :meth:`RetainIndex.commit` once Kubo has it."""

    root: CID
    blocks: tuple[tuple[CID, bytes], ...]
    size: int
    """Events it links."""
    built: tuple[tuple[int, CID | None, int], ...]
    """(bucket, its block or ``None`` if it was emptied, its version when built)."""


EMPTY_ROOT: Final = encode({"buckets": [], _ROOT_KEY: 1})
"""The root of an empty index: the same block on every node. A store pins it first
and moves to its real index with ``pin/update``: under ``Provide.Strategy=pinned``
Kubo announces every block a recursive ``pin/add`` walks (the events of the first
index each node pinned were ~17 MB of LAN DHT in a 20-node run), and ``pin/update``
with ``fast-provide-root=false`` announces nothing."""


class RetainIndex:
    """The set of retained events as index blocks (sans-I/O; see the module).

    A million retained events must fit a sidecar's memory (docs/faults.md "Memory"):
    no Python object per event. Each key that is a sha2-256 multihash (every event's
    and topic's) is one 40-byte record of a :class:`DigestTable` (its digest and the
    number of the bucket that links it), and each bucket is an ``array`` of its
    members' slots in the order they were linked: about 60 bytes an event. Keys of
    any other multihash (only an index someone else pinned could hold one) go to a
    ``dict``, as a member ``-1 - id``.
    """

    def __init__(self, *, bucket_size: int = BUCKET_SIZE) -> None:
        if bucket_size < 1:
            raise ValueError("bucket_size must be at least 1")
        self.bucket_size = bucket_size
        self._where = DigestTable(_WHERE_WIDTH)
        """sha2-256 digest of a key -> the bucket that links it."""
        self._other: dict[bytes, tuple[int, int]] = {}
        """Any other key (:func:`_key`) -> (its bucket, its id)."""
        self._other_keys: dict[int, bytes] = {}
        self._other_next = 0
        self._buckets: dict[int, array[int]] = {}
        """Bucket number -> its members (slots of ``_where``, or ``-1 - id``), oldest
        bucket first."""
        self._blocks: dict[int, CID] = {}
        """Bucket -> its block in the pinned root."""
        self._versions: dict[int, int] = {}
        self._changed: set[int] = set()
        """Buckets changed (or emptied) since the pinned root."""
        self._next = 0
        self.root: CID | None = None
        """The root pinned now (``None``: none yet)."""
        self.pinned_size = 0
        """Events the pinned root links."""

    def __len__(self) -> int:
        return len(self._where) + len(self._other)

    def __contains__(self, cid: object) -> bool:
        if not isinstance(cid, CID):
            return False
        key = _key(cid)
        digest = _sha256_digest(key)
        return self._where.find(digest) >= 0 if digest is not None else key in self._other

    @property
    def changed(self) -> bool:
        """Whether the set differs from the pinned root (or nothing is pinned yet while
        something is to be)."""
        return bool(self._changed)

    def _touch(self, bucket: int) -> None:
        self._changed.add(bucket)
        self._versions[bucket] = self._versions.get(bucket, 0) + 1

    def _place(self, member: int) -> int:
        """Link ``member`` from the open bucket, opening a new one when it is full; the
        bucket's number."""
        last = self._next - 1
        if last not in self._buckets or len(self._buckets[last]) >= self.bucket_size:
            last = self._next
            self._next += 1
            self._buckets[last] = array("q")
        self._buckets[last].append(member)
        return last

    def _link(self, key: bytes) -> int | None:
        """Link ``key`` (:func:`_key`); its bucket, or None if it is linked already."""
        digest = _sha256_digest(key)
        if digest is not None:
            where = self._where
            if where.find(digest) >= 0:
                return None
            slot = where.insert(digest)
            bucket = self._place(slot)
            _BUCKET.pack_into(where.data, slot * _WHERE_WIDTH + DIGEST_SIZE, bucket)
            return bucket
        if key in self._other:
            return None
        oid = self._other_next
        self._other_next += 1
        bucket = self._place(-1 - oid)
        self._other[key] = (bucket, oid)
        self._other_keys[oid] = key
        return bucket

    def add(self, cid: CID) -> bool:
        """Link ``cid``; False if it is linked already."""
        bucket = self._link(_key(cid))
        if bucket is None:
            return False
        self._touch(bucket)
        return True

    def remove(self, cid: CID) -> bool:
        """Unlink ``cid``; False if it was not linked."""
        key = _key(cid)
        digest = _sha256_digest(key)
        if digest is not None:
            where = self._where
            slot = where.find(digest)
            if slot < 0:
                return False
            bucket = _BUCKET.unpack_from(where.data, slot * _WHERE_WIDTH + DIGEST_SIZE)[0]
            member = slot
            where.remove(slot)
        else:
            found = self._other.pop(key, None)
            if found is None:
                return False
            bucket, oid = found
            del self._other_keys[oid]
            member = -1 - oid
        members = self._buckets[bucket]
        members.remove(member)
        if not members:
            del self._buckets[bucket]
        self._touch(bucket)
        return True

    def _multihashes(self, members: array[int]) -> Iterator[bytes]:
        """The multihashes of a bucket's members, in order."""
        where = self._where
        for m in members:
            yield _SHA256_MH + where.digest(m) if m >= 0 else self._other_keys[-1 - m][2:]

    def build(self) -> IndexBuild:
        """The blocks of the current set: every changed bucket's and a new root's."""
        blocks: list[tuple[CID, bytes]] = []
        built: list[tuple[int, CID | None, int]] = []
        links: list[CID] = []
        for bucket, members in self._buckets.items():
            if bucket in self._changed or bucket not in self._blocks:
                data = encode_bucket(self._multihashes(members))
                cid = sha256_cid(data)
                blocks.append((cid, data))
                built.append((bucket, cid, self._versions.get(bucket, 0)))
            else:
                cid = self._blocks[bucket]
            links.append(cid)
        root_data = encode({"buckets": links, _ROOT_KEY: 1})
        root = sha256_cid(root_data)
        blocks.append((root, root_data))
        built += [
            (b, None, self._versions.get(b, 0)) for b in self._changed if b not in self._buckets
        ]
        return IndexBuild(root=root, blocks=tuple(blocks), size=len(self), built=tuple(built))

    def commit(self, build: IndexBuild) -> None:
        """``build`` is pinned now (in place of the root before it)."""
        self.root = build.root
        self.pinned_size = build.size
        for bucket, cid, version in build.built:
            if self._versions.get(bucket, 0) != version:
                continue  # changed again since: still to build
            self._changed.discard(bucket)
            if cid is not None and bucket in self._buckets:
                self._blocks[bucket] = cid
            else:
                self._blocks.pop(bucket, None)
                self._versions.pop(bucket, None)

    def load(self, root: CID, buckets: list[list[bytes]]) -> None:
        """Go on from an index pinned before (``root`` and its buckets' multihashes, in
        order): its events are retained, and the first root loaded is the one the
        next build replaces (the caller unpins any other)."""
        for members in buckets:
            for mh in members:
                bucket = self._link(_DAG_CBOR_V1 + mh)
                if bucket is not None:
                    # Rebuilt at the next build: the loaded blocks are not ours.
                    self._changed.add(bucket)
        if self.root is None:
            self.root = root
        self.pinned_size = len(self)
