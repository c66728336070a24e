"""The retention index as it was first written: a ``dict`` entry per event, keyed by
its CID bytes, and a ``dict`` per bucket.

Kept as the reference that ``tests/test_sidecar_retainindex.py`` checks the compact
:class:`sidecar._retainindex.RetainIndex` against: the same operations build the
same blocks. Not used by the sidecar.
"""

from __future__ import annotations

from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.core._dagcbor import encode, sha256_cid
from sidecar._retainindex import (
    _DAG_CBOR_V1,
    _ROOT_KEY,
    BUCKET_SIZE,
    IndexBuild,
    _key,
    encode_bucket,
)

__all__ = ["ReferenceRetainIndex"]


class ReferenceRetainIndex:
    """The index as first written (a dict per key and per bucket member)."""

    def __init__(self, *, bucket_size: int = BUCKET_SIZE) -> None:
        if bucket_size < 1:
            raise ValueError("bucket_size must be at least 1")
        self.bucket_size = bucket_size
        self._where: dict[bytes, int] = {}
        """Key (:func:`_key`: the multihash, as dag-cbor CID bytes) -> the bucket that links it."""
        self._buckets: dict[int, dict[bytes, None]] = {}
        """Bucket number -> its keys, oldest bucket first."""
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
        return len(self._where)

    def __contains__(self, cid: object) -> bool:
        return isinstance(cid, CID) and _key(cid) in self._where

    @property
    def changed(self) -> bool:
        """Whether the set differs from the pinned root (or nothing is pinned yet while
        something is to be)."""
        return bool(self._changed)

    def _touch(self, bucket: int) -> None:
        self._changed.add(bucket)
        self._versions[bucket] = self._versions.get(bucket, 0) + 1

    def _place(self, mh: bytes) -> int:
        """Link key ``mh`` (not linked yet) from the open bucket, opening a new one when
        it is full; the bucket's number."""
        last = self._next - 1
        if last not in self._buckets or len(self._buckets[last]) >= self.bucket_size:
            last = self._next
            self._next += 1
            self._buckets[last] = {}
        self._buckets[last][mh] = None
        self._where[mh] = last
        return last

    def add(self, cid: CID) -> bool:
        """Link ``cid``; False if it is linked already."""
        mh = _key(cid)
        if mh in self._where:
            return False
        self._touch(self._place(mh))
        return True

    def remove(self, cid: CID) -> bool:
        """Unlink ``cid``; False if it was not linked."""
        mh = _key(cid)
        bucket = self._where.pop(mh, None)
        if bucket is None:
            return False
        members = self._buckets[bucket]
        del members[mh]
        if not members:
            del self._buckets[bucket]
        self._touch(bucket)
        return True

    def build(self) -> IndexBuild:
        """The blocks of the current set: every changed bucket's and a new root's."""
        blocks: list[tuple[CID, bytes]] = []
        built: list[tuple[int, CID | None, int]] = []
        links: list[CID] = []
        for bucket, members in self._buckets.items():
            if bucket in self._changed or bucket not in self._blocks:
                data = encode_bucket(k[2:] for k in members)
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
        return IndexBuild(
            root=root, blocks=tuple(blocks), size=len(self._where), built=tuple(built)
        )

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
            for mh in (_DAG_CBOR_V1 + m for m in members):
                if mh not in self._where:
                    # Rebuilt at the next build: the loaded blocks are not ours.
                    self._changed.add(self._place(mh))
        if self.root is None:
            self.root = root
        self.pinned_size = len(self._where)
