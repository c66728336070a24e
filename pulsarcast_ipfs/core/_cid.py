"""The project's CID type: a content identifier kept as its binary form (docs/protocol.md §3).

Why not ``multiformats.CID`` itself: its constructor type-checks every argument at
run time (``typing_validation``), about 60-100 µs a CID, and every received event
makes a new one. In session 14's cluster profile (20 nodes, 20 events/s, py-spy on
six sidecars) ``CID.__new__`` was 7.6 % of the sidecars' busy time, the largest
single item of the receive path. This class keeps what the protocol needs (the
binary form, equality and hashing by it, the text forms, the digest) and builds a
CID in about a microsecond.

Validation is not skipped, it is done where bytes or text come in:

* :meth:`CID.decode` of text or bytes goes through ``multiformats``' validated
  decoder (the slow path, rare: user input, other codecs), and refuses a form that
  is not canonical;
* the fast paths build only what is valid by construction: the protocol's links,
  CIDv1 dag-cbor sha2-256 of a 32-byte digest (:meth:`CID.dag_cbor_sha256`, and
  ``_dagcbor.cid_from_bytes`` for the 36 bytes ``01 71 12 20`` + digest), and the
  raw sha2-256 links of the retention index (``01 55 12 20`` + digest).

A ``multiformats.CID`` of the same bytes compares equal to one of these (both
ways), so values from libraries (``dag_cbor`` in the tests) can be compared; the
two do not hash alike, so a set or dict holds one kind (:meth:`CID.of` converts).
``tests/test_core_cid.py`` checks every property against ``multiformats``.
"""

from __future__ import annotations

import base64
import functools
from typing import Any, Final

import multiformats

__all__ = ["CID"]

_DAG_CBOR_SHA256: Final = b"\x01\x71\x12\x20"
_RAW_SHA256: Final = b"\x01\x55\x12\x20"
_SHA256_V1: Final = (_DAG_CBOR_SHA256, _RAW_SHA256)
"""CIDv1 sha2-256 prefixes valid with any 32-byte digest: the protocol's links and the
retention index's raw links (``sidecar/_retainindex.py``)."""
_BUILT: Final = object()
"""Passed by this module's constructors only: ``CID(raw)`` from outside is refused, so
every CID in the process came through a validated or valid-by-construction path."""
_B32_TABLE: Final = bytes.maketrans(
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", b"abcdefghijklmnopqrstuvwxyz234567"
)


_DAG_PB = 0x70


@functools.cache
def _codec(code: int) -> multiformats.multicodec.Multicodec:
    """The multicodec of ``code`` (``KeyError`` if multiformats knows none: a CID
    built through the validated paths always has a known one)."""
    return multiformats.multicodec.get(code=code)


class CID:
    """An immutable CID (v0 or v1) held as its binary form.

    Build one with :meth:`decode` (text or bytes, validated), :meth:`of` (from a
    ``multiformats.CID``) or :meth:`dag_cbor_sha256` (the protocol's links).
    """

    __slots__ = ("_hash", "_raw", "_text")

    _raw: bytes
    _hash: int
    _text: str | None

    def __new__(cls, raw: bytes, built: object = None) -> CID:
        if built is not _BUILT:
            raise TypeError(
                "use CID.decode(text or bytes), CID.of(cid) or CID.dag_cbor_sha256(digest)"
            )
        cid = super().__new__(cls)
        cid._raw = raw
        cid._hash = hash(raw)
        cid._text = None
        return cid

    @classmethod
    def _make(cls, raw: bytes) -> CID:
        """A CID of binary form ``raw``, which the caller has checked."""
        return cls(raw, _BUILT)

    # -- construction ---------------------------------------------------------------

    @classmethod
    def dag_cbor_sha256(cls, digest: bytes) -> CID:
        """CIDv1 dag-cbor sha2-256 of a 32-byte sha256 ``digest`` (every protocol link)."""
        if type(digest) is not bytes or len(digest) != 32:
            raise ValueError("a sha2-256 digest is 32 bytes")
        return cls._make(_DAG_CBOR_SHA256 + digest)

    @classmethod
    def decode(cls, value: str | bytes | bytearray | memoryview) -> CID:
        """The CID of a multibase text (or a CIDv0 ``Qm…``) or of binary bytes.

        ``ValueError`` (multiformats' ``KeyError`` and ``IndexError`` included) if it
        is not one. Text may be in any multibase multiformats reads (``str()`` gives
        the canonical one back); bytes must be the canonical binary form.
        """
        if isinstance(value, str):
            try:
                parsed = multiformats.CID.decode(value)
            except (ValueError, LookupError) as exc:  # multiformats' (IndexError for "")
                raise ValueError(f"not a CID: {value[:80]!r}: {exc}") from exc
            return cls.of(parsed)
        if not isinstance(value, bytes | bytearray | memoryview):
            raise TypeError(f"a CID is decoded from str or bytes, not {type(value).__name__}")
        raw = bytes(value)
        if len(raw) == 36 and raw.startswith(_SHA256_V1):
            return cls._make(raw)
        try:
            parsed = multiformats.CID.decode(raw)
        except (ValueError, LookupError) as exc:  # multiformats' documented errors
            raise ValueError(f"invalid CID bytes: {exc}") from exc
        if bytes(parsed) != raw:
            raise ValueError("CID bytes are not canonical")
        return cls._make(raw)

    @classmethod
    def of(cls, cid: CID | multiformats.CID) -> CID:
        """This type's CID of ``cid`` (itself if it is one already)."""
        if type(cid) is cls:
            return cid
        if isinstance(cid, multiformats.CID):
            return cls._make(bytes(cid))
        raise TypeError(f"not a CID: {type(cid).__name__}")

    def to_multiformats(self) -> multiformats.CID:
        """The same CID as a ``multiformats.CID`` (for libraries that want one)."""
        return multiformats.CID.decode(self._raw)

    # -- what it is -----------------------------------------------------------------

    @property
    def version(self) -> int:
        return 1 if self._raw[0] == 1 else 0

    @property
    def digest(self) -> bytes:
        """The full multihash (code, length, digest), as ``multiformats.CID.digest``."""
        if self._raw[0] != 1:
            return self._raw
        if self._raw.startswith(_SHA256_V1):
            return self._raw[2:]
        return bytes(self.to_multiformats().digest)

    @property
    def raw_digest(self) -> bytes:
        """The hash digest alone, without the multihash's code and length."""
        if self._raw.startswith(_SHA256_V1):
            return self._raw[4:]
        return bytes(self.to_multiformats().raw_digest)

    @property
    def codec(self) -> multiformats.multicodec.Multicodec:
        """The content multicodec (``multiformats``' object: ``.name``, ``.code``)."""
        raw = self._raw
        if raw[0] != 1:
            return _codec(_DAG_PB)
        if raw[1] < 0x80:  # a one-byte varint: the codec's code itself
            return _codec(raw[1])
        return self.to_multiformats().codec

    def is_dag_cbor_sha256(self) -> bool:
        """Is this a protocol link: CIDv1, dag-cbor, sha2-256 (32 bytes)?"""
        return len(self._raw) == 36 and self._raw.startswith(_DAG_CBOR_SHA256)

    # -- forms ----------------------------------------------------------------------

    def __bytes__(self) -> bytes:
        return self._raw

    def __str__(self) -> str:
        """Canonical text: base32 (``b…``) for CIDv1, base58btc (``Qm…``) for CIDv0."""
        text = self._text
        if text is None:
            if self._raw[0] == 1:
                b32 = base64.b32encode(self._raw).translate(_B32_TABLE).rstrip(b"=")
                text = "b" + b32.decode("ascii")
            else:
                text = str(self.to_multiformats())
            self._text = text
        return text

    def encode(self, base: str | None = None) -> str:
        """The text in multibase ``base`` (default: the canonical one, as ``str()``)."""
        if base is None or (base == "base32" and self._raw[0] == 1):
            return str(self)
        return str(self.to_multiformats().encode(base))

    def __repr__(self) -> str:
        return f"CID({str(self)!r})"

    # -- identity -------------------------------------------------------------------

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: Any) -> bool:
        if type(other) is CID:
            return self._raw == other._raw
        if isinstance(other, multiformats.CID):
            return self._raw == bytes(other)
        return NotImplemented

    def __ne__(self, other: Any) -> bool:
        result = self.__eq__(other)
        return result if result is NotImplemented else not result

    def __reduce__(self) -> tuple[Any, ...]:
        return (CID.decode, (self._raw,))

    def __copy__(self) -> CID:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> CID:
        return self
