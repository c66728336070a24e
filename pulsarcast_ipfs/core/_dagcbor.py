"""A small, strict DAG-CBOR codec with memoised CIDs (docs/protocol.md §3, §4, §6).

Why not ``dag_cbor`` directly: it (and ``multiformats``) type-check every call
at run time, which costs 0.1-0.5 ms per CID or block — a 1,000-node simulation
decodes millions. This module implements exactly the DAG-CBOR data model and
its strictness rules, and ``tests/test_core_dagcbor.py`` checks it against
``dag_cbor`` (same bytes on encoding; same accept/reject on decoding):

- major types 0-5 with minimal ("preferred") length encodings, definite lengths;
- maps: text keys only, sorted length-first then bytewise, no duplicates;
- tag 42 only, holding a byte string ``0x00`` + binary CID (a link);
- simple values ``false``, ``true``, ``null``; floats as 64-bit only, finite;
- valid UTF-8 text; nothing after the top-level item; nesting depth bounded.

Any violation raises :class:`CborError` (a ``ValueError``), and nothing else does:
multiformats' documented errors for bad CID bytes (``ValueError``, ``KeyError``) are
translated; any other exception is a bug and escapes as itself. Depth is bounded
(``MAX_DEPTH``) before Python's recursion limit is near. CID objects are
memoised by their bytes (bounded LRU), so the same link decoded by many nodes
of one process is built once. They are this project's :class:`~._cid.CID`, built
in about a microsecond, not ``multiformats.CID`` (60-100 µs of run-time type checks).
"""

from __future__ import annotations

import functools
import hashlib
import math
import struct
from typing import Any, Final

import multiformats

from pulsarcast_ipfs.core._cid import CID

__all__ = ["CborError", "cid_for_digest", "cid_from_bytes", "decode", "encode"]

MAX_DEPTH: Final = 64
_DAG_CBOR_SHA256: Final = b"\x01\x71\x12\x20"


class CborError(ValueError):
    """Bytes that are not strict DAG-CBOR (or a value that cannot be encoded)."""


@functools.lru_cache(maxsize=65536)
def cid_from_bytes(raw: bytes) -> CID:
    """The CID of binary form ``raw`` (memoised: the same link decoded by many nodes
    of one process is one object); ``CborError`` if it is not one."""
    if len(raw) == 36 and raw.startswith(_DAG_CBOR_SHA256):
        return cid_for_digest(raw[4:])  # the links of every descriptor
    try:
        return CID.decode(raw)  # multiformats' validated decoder, then canonical
    except ValueError as exc:
        raise CborError(str(exc)) from exc


@functools.lru_cache(maxsize=65536)
def cid_for_digest(digest: bytes) -> CID:
    """CIDv1 dag-cbor sha2-256 (base32) of a 32-byte sha256 digest (memoised)."""
    if len(digest) != 32:
        raise CborError("a sha2-256 digest is 32 bytes")
    return CID._make(_DAG_CBOR_SHA256 + bytes(digest))


def sha256_cid(data: bytes) -> CID:
    return cid_for_digest(hashlib.sha256(data).digest())


def _cid_bytes(cid: Any) -> bytes:
    """The binary form of this project's CID or of a ``multiformats.CID``."""
    return cid._raw if type(cid) is CID else bytes(cid)


# ---------------------------------------------------------------- encoding


def _head(major: int, n: int, out: bytearray) -> None:
    m = major << 5
    if n < 24:
        out.append(m | n)
    elif n < 0x100:
        out.append(m | 24)
        out.append(n)
    elif n < 0x10000:
        out.append(m | 25)
        out += n.to_bytes(2, "big")
    elif n < 0x100000000:
        out.append(m | 26)
        out += n.to_bytes(4, "big")
    elif n < 0x10000000000000000:
        out.append(m | 27)
        out += n.to_bytes(8, "big")
    else:
        raise CborError(f"integer {n} out of the 64-bit range")


_KEY_PLANS: dict[tuple[str, ...], tuple[tuple[str, bytes], ...]] = {}
"""Map key tuple -> its keys in DAG-CBOR order, each with its encoded head and text
(bounded: the protocol's maps have a few fixed key sets)."""
_KEY_PLANS_MAX: Final = 1024


def _key_plan(keys: tuple[str, ...]) -> tuple[tuple[str, bytes], ...]:
    plan = _KEY_PLANS.get(keys)
    if plan is None:
        items = []
        for k in keys:
            if not isinstance(k, str):
                raise CborError("DAG-CBOR map keys must be strings")
            kb = k.encode("utf-8")
            head = bytearray()
            _head(3, len(kb), head)
            items.append((k, kb, bytes(head) + kb))
        items.sort(key=lambda it: (len(it[1]), it[1]))
        plan = tuple((k, enc) for k, _, enc in items)
        if len(_KEY_PLANS) >= _KEY_PLANS_MAX:
            _KEY_PLANS.clear()
        _KEY_PLANS[keys] = plan
    return plan


_LINK_HEAD: Final = b"\xd8\x2a\x58\x25\x00"
"""Tag 42, a byte string of 37 bytes, the identity multibase prefix: a 36-byte CID."""


def _enc(value: Any, out: bytearray, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise CborError("value nested too deeply")
    # The protocol's own types first, by exact type (a bool is not an int here);
    # anything else takes the general checks of _enc_other.
    t = type(value)
    if t is str:
        raw = value.encode("utf-8")
        n = len(raw)
        if n < 24:
            out.append(0x60 | n)
        elif n < 0x100:
            out += b"\x78%c" % n
        else:
            _head(3, n, out)
        out += raw
    elif t is dict:
        _head(5, len(value), out)
        for k, enc in _key_plan(tuple(value)):
            out += enc
            _enc(value[k], out, depth + 1)
    elif t is bytes:
        n = len(value)
        if 24 <= n < 0x100:
            out += b"\x58%c" % n
        else:
            _head(2, n, out)
        out += value
    elif t is int:
        if 0 <= value < 24:
            out.append(value)
        elif value >= 0:
            _head(0, value, out)
        else:
            _head(1, -1 - value, out)
    elif t is CID:
        raw = value._raw
        if len(raw) == 36:  # every protocol link: tag 42, 37 bytes, the 0x00 prefix
            out += _LINK_HEAD
        else:
            out += b"\xd8\x2a"
            _head(2, len(raw) + 1, out)
            out.append(0)
        out += raw
    elif t is list:
        _head(4, len(value), out)
        for item in value:
            _enc(item, out, depth + 1)
    else:
        _enc_other(value, out, depth)


def _enc_other(value: Any, out: bytearray, depth: int) -> None:
    if value is None:
        out.append(0xF6)
    elif value is True:
        out.append(0xF5)
    elif value is False:
        out.append(0xF4)
    elif isinstance(value, int):
        if value >= 0:
            _head(0, value, out)
        else:
            _head(1, -1 - value, out)
    elif isinstance(value, str):
        raw = value.encode("utf-8")
        _head(3, len(raw), out)
        out += raw
    elif isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
        _head(2, len(raw), out)
        out += raw
    elif isinstance(value, CID | multiformats.CID):
        raw = b"\x00" + _cid_bytes(value)
        out += b"\xd8\x2a"
        _head(2, len(raw), out)
        out += raw
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise CborError("DAG-CBOR forbids NaN and infinities")
        out.append(0xFB)
        out += struct.pack(">d", value)
    elif isinstance(value, list | tuple):
        _head(4, len(value), out)
        for item in value:
            _enc(item, out, depth + 1)
    elif isinstance(value, dict):
        items = []
        for k, v in value.items():
            if not isinstance(k, str):
                raise CborError("DAG-CBOR map keys must be strings")
            items.append((k.encode("utf-8"), v))
        items.sort(key=lambda kv: (len(kv[0]), kv[0]))
        _head(5, len(items), out)
        for kb, v in items:
            _head(3, len(kb), out)
            out += kb
            _enc(v, out, depth + 1)
    else:
        raise CborError(f"cannot encode {type(value).__name__} as DAG-CBOR")


def encode(value: Any) -> bytes:
    """Canonical DAG-CBOR bytes of ``value`` (same bytes as ``dag_cbor.encode``)."""
    out = bytearray()
    _enc(value, out, 0)
    return bytes(out)


# ---------------------------------------------------------------- decoding


_END: Final = "unexpected end of data"
_unpack_double = struct.Struct(">d").unpack_from


def _long_arg(data: bytes, pos: int, info: int) -> tuple[int, int]:
    """The argument of a head whose additional info is ``info`` >= 24, read from
    ``pos``; and the position after it."""
    if info == 24:
        if pos >= len(data):
            raise CborError(_END)
        n = data[pos]
        if n < 24:
            raise CborError("integer not minimally encoded")
        return n, pos + 1
    if info == 25:
        size, least = 2, 0x100
    elif info == 26:
        size, least = 4, 0x10000
    elif info == 27:
        size, least = 8, 0x100000000
    else:
        raise CborError("indefinite lengths and reserved encodings are not DAG-CBOR")
    end = pos + size
    if end > len(data):
        raise CborError(_END)
    n = int.from_bytes(data[pos:end], "big")
    if n < least:
        raise CborError("integer not minimally encoded")
    return n, end


def _dec(data: bytes, pos: int, depth: int) -> tuple[Any, int]:
    """The item at ``pos`` and the position after it. One function with the buffer
    and position in locals: a reader object's method per byte read was 20 % of a
    received event's CPU in the sidecar's micro-benchmark."""
    if depth > MAX_DEPTH:
        raise CborError("data nested too deeply")
    if pos >= len(data):
        raise CborError(_END)
    ib = data[pos]
    pos += 1
    major = ib >> 5
    info = ib & 0x1F
    if major == 7:
        if info == 20:
            return False, pos
        if info == 21:
            return True, pos
        if info == 22:
            return None, pos
        if info == 27:
            end = pos + 8
            if end > len(data):
                raise CborError(_END)
            value = _unpack_double(data, pos)[0]
            if not math.isfinite(value):
                raise CborError("DAG-CBOR forbids NaN and infinities")
            return value, end
        raise CborError("only false, true, null and 64-bit floats are DAG-CBOR simple values")
    if info < 24:
        n = info
    elif info == 24 and pos < len(data) and data[pos] >= 24:  # the usual long head
        n = data[pos]
        pos += 1
    else:
        n, pos = _long_arg(data, pos, info)
    if major == 0:
        return n, pos
    if major == 2 or major == 3:
        end = pos + n
        if end > len(data):
            raise CborError(_END)
        if major == 2:
            return data[pos:end], end
        try:
            return data[pos:end].decode("utf-8"), end
        except UnicodeDecodeError as exc:
            raise CborError("text is not valid UTF-8") from exc
    if major == 5:
        if n > len(data) - pos:
            raise CborError("map longer than the data")
        out: dict[str, Any] = {}
        prev = b""
        for i in range(n):
            if pos >= len(data):
                raise CborError(_END)
            kb = data[pos]
            if kb >> 5 != 3:
                raise CborError("DAG-CBOR map keys must be strings")
            klen = kb & 0x1F
            if klen < 24:
                pos += 1
            else:
                klen, pos = _long_arg(data, pos + 1, klen)
            end = pos + klen
            if end > len(data):
                raise CborError(_END)
            raw = data[pos:end]
            if i and (len(prev) > klen or (len(prev) == klen and prev >= raw)):
                raise CborError("map keys not in canonical order (or duplicated)")
            prev = raw
            try:
                key = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise CborError("map key is not valid UTF-8") from exc
            out[key], pos = _dec(data, end, depth + 1)
        return out, pos
    if major == 4:
        if n > len(data) - pos:
            raise CborError("array longer than the data")
        items = []
        for _ in range(n):
            item, pos = _dec(data, pos, depth + 1)
            items.append(item)
        return items, pos
    if major == 1:
        return -1 - n, pos
    # major 6
    if n != 42:
        raise CborError("only tag 42 (CID) is allowed in DAG-CBOR")
    if pos >= len(data):
        raise CborError(_END)
    inner = data[pos]
    if inner >> 5 != 2:
        raise CborError("tag 42 must hold a byte string")
    size = inner & 0x1F
    if size < 24:
        pos += 1
    else:
        size, pos = _long_arg(data, pos + 1, size)
    end = pos + size
    if end > len(data):
        raise CborError(_END)
    if size == 0 or data[pos] != 0:
        raise CborError("CID bytes must start with the identity multibase prefix 0x00")
    return cid_from_bytes(data[pos + 1 : end]), end


def decode(data: bytes) -> Any:
    """Decode exactly one strict DAG-CBOR item; ``CborError`` on anything else."""
    data = bytes(data)
    value, pos = _dec(data, 0, 0)
    if pos != len(data):
        raise CborError("trailing bytes after the DAG-CBOR item")
    return value


def is_dag_cbor_sha256_link(value: object) -> bool:
    """Is ``value`` a CIDv1 dag-cbor sha2-256 link (fast path, no run-time type checks)."""
    if type(value) is CID:
        raw = value._raw
    elif isinstance(value, multiformats.CID):
        raw = bytes(value)
    else:
        return False
    return len(raw) == 36 and raw[:4] == _DAG_CBOR_SHA256
