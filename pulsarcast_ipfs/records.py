"""Metric records: the one schema shared by the core, the sidecar, the simulator,
the benchmark runner and the Spark jobs (docs/protocol.md §7).

Theory of operation
-------------------
Every node appends one JSON object per happening to a JSON-lines file (the
sidecar and simulator rotate and may gzip them). The protocol core emits
:class:`MetricRecord` outputs stamped with the ``now`` it was given — never a
fresh clock read — and the driver adds the run-level fields (``run``,
``system``) when it writes the line. The Spark jobs in ``spark/`` validate every
line against this schema (``spark/metrics_schema_v1.json`` is its JSON-Schema
form, kept equal to :data:`FIELDS` by a test) and count what does not match.

One line, schema version 1::

    {"v": 1, "ts": 1767225600.125, "run": "bench-1", "system": "pulsarcast",
     "node": "12D3KooW...", "kind": "event_delivered", "topic": "politics",
     "topic_cid": "bafyrei...", "event": "bafyrei...", "latency": 0.031,
     "recovered": false}

Common fields (every record):

=========  =======  ====================================================
``v``      int      schema version, ``1``
``ts``     float    seconds since the Unix epoch (virtual in the simulator)
``run``    str      run identifier chosen by the driver
``system`` str      ``pulsarcast``, ``pulsarcast-ordered``, ``pulsarcast-fast``,
                    ``pulsarcast-filtered``, ``gossipsub``, ``floodsub``, or ``sim``
``node``   str      the node's peer ID (or a stable node name)
``kind``   str      one of :class:`RecordKind`
=========  =======  ====================================================

Kind-specific fields are listed in :data:`FIELDS`. ``topic`` is always the topic
*name*; ``topic_cid`` is the CID of the topic's first version (stable across
updates; ``null`` for Kubo pubsub baselines). ``event`` is the event CID (or the
Kubo pubsub message id for the baselines).

Measures derived from them (see ``spark/``): an event *injected* is an
application's publish call; *published* is an event that entered a tree (after
a request to publish, at the allowed node that published it); *delivered* is an
event handed to a subscribed application. Duplicate ``event_delivered`` records
for the same (node, event) are counted once by the jobs and reported apart.
"""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from json.encoder import encode_basestring_ascii
from typing import Any, Final

__all__ = [
    "FIELDS",
    "SCHEMA_VERSION",
    "MetricRecord",
    "RecordError",
    "RecordKind",
    "RecordLines",
    "validate_record",
]

SCHEMA_VERSION: Final = 1


class RecordKind(enum.StrEnum):
    """What happened."""

    SUBSCRIBED = "subscribed"
    """An application subscribed this node to ``topic``."""
    UNSUBSCRIBED = "unsubscribed"
    """An application unsubscribed this node from ``topic``."""
    EVENT_INJECTED = "event_injected"
    """An application asked to publish (before any allow check or forwarding)."""
    EVENT_PUBLISHED = "event_published"
    """An event entered its dissemination tree at this node (its publisher)."""
    EVENT_DELIVERED = "event_delivered"
    """An event was handed to the local application (``recovered`` if by gap repair)."""
    EVENT_DROPPED = "event_dropped"
    """An incoming event or request was refused; ``reason`` says why."""
    RPC_SENT = "rpc_sent"
    RPC_RECEIVED = "rpc_received"
    TREE_CHANGED = "tree_changed"
    """This node's place in a topic's tree changed (role, parent, children)."""
    RESOURCE_SAMPLE = "resource_sample"
    """Periodic CPU, memory and bandwidth sample of one process."""
    PEER_PENALISED = "peer_penalised"
    """A tree neighbour was found lying (docs/protocol-notes.md "Relays that lie"): a parent
    that withheld announced events (``withheld``), or a child that took events and
    joined no anti-entropy (``silent_child``). It is left and avoided a while."""


# field name -> (JSON type(s), required)
_T = tuple[tuple[str, ...], bool]
_STR: Final = ("string",)
_OSTR: Final = ("string", "null")
_NUM: Final = ("number",)
_INT: Final = ("integer",)

COMMON_FIELDS: Final[dict[str, _T]] = {
    "v": (_INT, True),
    "ts": (_NUM, True),
    "run": (_STR, True),
    "system": (_STR, True),
    "node": (_STR, True),
    "kind": (_STR, True),
}

FIELDS: Final[dict[RecordKind, dict[str, _T]]] = {
    RecordKind.SUBSCRIBED: {"topic": (_STR, True), "topic_cid": (_OSTR, False)},
    RecordKind.UNSUBSCRIBED: {"topic": (_STR, True), "topic_cid": (_OSTR, False)},
    RecordKind.EVENT_INJECTED: {
        "topic": (_STR, True),
        "topic_cid": (_OSTR, False),
        "inject_id": (_STR, True),  # unique in the run, chosen by the application/runner
        "size": (_INT, False),  # payload bytes
    },
    RecordKind.EVENT_PUBLISHED: {
        "topic": (_STR, True),
        "topic_cid": (_OSTR, False),
        "event": (_STR, True),
        "inject_id": (_OSTR, False),
        "author": (_OSTR, False),
        "publisher": (_OSTR, False),
        "parent": (_OSTR, False),  # the one parent (CUSTOM, one chain), else null
        "parents": (("array", "null"), False),  # every parent (protocol 2 history DAG)
        "size": (_INT, False),
        "via": (("string", "null"), False),  # "direct" | "request"
    },
    RecordKind.EVENT_DELIVERED: {
        "topic": (_STR, True),
        "topic_cid": (_OSTR, False),
        "event": (_STR, True),
        "latency": (_NUM, True),  # seconds from the event's `created` to delivery
        "recovered": (("boolean",), True),
        "inject_id": (_OSTR, False),
        # fast subscriptions: the path of the first copy, "group" (from the
        # publisher), "helper" (from a helper of its group) or "tree"
        "path": (_OSTR, False),
    },
    RecordKind.EVENT_DROPPED: {
        "topic": (_OSTR, False),
        "event": (_OSTR, False),
        "reason": (_STR, True),
        "peer": (_OSTR, False),
    },
    RecordKind.RPC_SENT: {
        "op": (_STR, True),
        "bytes": (_INT, True),
        "peer": (_STR, True),
        "topic": (_OSTR, False),
    },
    RecordKind.RPC_RECEIVED: {
        "op": (_STR, True),
        "bytes": (_INT, True),
        "peer": (_STR, True),
        "topic": (_OSTR, False),
    },
    RecordKind.TREE_CHANGED: {
        "topic": (_STR, True),
        "topic_cid": (_OSTR, False),
        "role": (_STR, True),  # "root" | "subscriber" | "relay" | "none"
        "parent": (_OSTR, False),
        "children": (("array",), True),
    },
    RecordKind.PEER_PENALISED: {
        "topic": (_STR, True),
        "peer": (_STR, True),
        "reason": (_STR, True),  # "withheld" | "silent_child"
        "publisher": (_OSTR, False),  # withheld: only this publisher's events (a censor)
        "misses": (_INT, False),  # withheld: announced events it did not send, of the last 16
    },
    RecordKind.RESOURCE_SAMPLE: {
        "process": (_STR, True),  # "sidecar" | "kubo" | "node"
        "cpu_seconds": (_NUM, False),  # cumulative CPU time of the process
        "rss_bytes": (_INT, False),
        "bw_total_in": (_INT, False),  # cumulative bytes, Kubo stats/bw
        "bw_total_out": (_INT, False),
        "bw_protocols": (("object", "null"), False),  # protocol -> {"in": int, "out": int}
    },
}


class RecordError(ValueError):
    """A metric record does not match the schema."""


def _json_type_ok(value: Any, types: tuple[str, ...]) -> bool:
    for t in types:
        if t == "null" and value is None:
            return True
        if t == "string" and isinstance(value, str):
            return True
        if t == "boolean" and isinstance(value, bool):
            return True
        if t == "integer" and isinstance(value, int) and not isinstance(value, bool):
            return True
        if (
            t == "number"
            and isinstance(value, int | float)
            and not isinstance(value, bool)
            and math.isfinite(value)
        ):
            return True
        if t == "array" and isinstance(value, list):
            return True
        if t == "object" and isinstance(value, dict):
            return True
    return False


def validate_record(obj: Mapping[str, Any]) -> RecordKind:
    """Check one decoded JSON record; return its kind or raise :class:`RecordError`."""
    if not isinstance(obj, Mapping):
        raise RecordError("a record must be a JSON object")
    for name, (types, _required) in COMMON_FIELDS.items():
        if name not in obj:
            raise RecordError(f"missing field {name!r}")
        if not _json_type_ok(obj[name], types):
            raise RecordError(f"field {name!r} must be {' or '.join(types)}")
    if obj["v"] != SCHEMA_VERSION:
        raise RecordError(f"unsupported schema version {obj['v']!r} (expected {SCHEMA_VERSION})")
    try:
        kind = RecordKind(obj["kind"])
    except ValueError:
        raise RecordError(f"unknown record kind {obj['kind']!r}") from None
    for name, (types, required) in FIELDS[kind].items():
        if name not in obj:
            if required:
                raise RecordError(f"{kind.value}: missing field {name!r}")
            continue
        if not _json_type_ok(obj[name], types):
            raise RecordError(f"{kind.value}: field {name!r} must be {' or '.join(types)}")
    return kind


@dataclass(frozen=True, slots=True, kw_only=True)
class MetricRecord:
    """One record as the core or a driver emits it, before run-level fields are added."""

    kind: RecordKind
    ts: float
    node: str
    fields: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self, *, run: str, system: str, validate: bool = True) -> str:
        """The JSON line for this record.

        ``validate``: check it against the schema first (drivers that write millions
        of records produced by the core may skip this; their tests validate the files).
        """
        obj: dict[str, Any] = {
            "v": SCHEMA_VERSION,
            "ts": self.ts,
            "run": run,
            "system": system,
            "node": self.node,
            "kind": self.kind.value,
        }
        obj.update(self.fields)
        if validate:
            validate_record(obj)
        return json.dumps(obj, separators=(",", ":"), sort_keys=False)


class _Slow(Exception):
    """A value the fast encoder leaves to ``json.dumps`` (a non-finite float)."""


def _enc_float(value: float) -> str:
    if not math.isfinite(value):
        raise _Slow
    return float.__repr__(value)


def _enc_bool(value: bool) -> str:
    return "true" if value else "false"


def _enc_none(_: None) -> str:
    return "null"


_enc_json = json.JSONEncoder(separators=(",", ":")).encode
"""``json.dumps(value, separators=(",", ":"))`` without a new encoder per call."""

_ENCODERS: Final[dict[type, Callable[[Any], str]]] = {
    str: encode_basestring_ascii,
    int: int.__repr__,
    float: _enc_float,
    bool: _enc_bool,
    type(None): _enc_none,
    list: _enc_json,
    tuple: _enc_json,
    dict: _enc_json,
}
"""How ``json.dumps`` (ASCII, compact separators) writes a value of each exact type;
a ``str`` subclass (a ``StrEnum`` member) is written as its text, like ``json`` does."""

_COMMON_NAMES: Final = frozenset(COMMON_FIELDS)


def _encoder(t: type) -> Callable[[Any], str] | None:
    enc = _ENCODERS.get(t)
    if enc is None and issubclass(t, str):
        return encode_basestring_ascii
    return enc


class RecordLines:
    """The JSON lines of :meth:`MetricRecord.to_json` for one ``run`` and ``system``,
    validated once per record *shape* instead of once per record.

    A shape is the kind, the types of ``ts`` and ``node``, and the field names with
    the exact type of each value, in order. :func:`validate_record` looks at nothing
    else but whether a number is finite and, for arrays and objects, only at their
    type; so a record of a shape that passed it once passes it again if its floats
    are finite. The first record of each shape goes through ``to_json`` (validation,
    ``json.dumps``) and its result is returned as is; later ones are written field by
    field with the encoders ``json.dumps`` itself uses (its C string escaper,
    ``int``/``float`` ``repr``), which gives the same bytes: a sidecar writes one line
    per RPC and per delivery, and ``to_json`` was about a sixth of its CPU per event.
    ``tests/test_records_fast.py`` checks it against ``to_json`` (hypothesis).
    Anything else (a non-finite float, a field named like a common field, a value of
    another type) takes ``to_json``, errors included (:class:`RecordError`).
    """

    __slots__ = ("_heads", "_shapes", "run", "system")

    def __init__(self, *, run: str, system: str) -> None:
        self.run = run
        self.system = system
        self._shapes: dict[tuple[Any, ...], tuple[tuple[str, Callable[[Any], str]], ...]] = {}
        self._heads: dict[tuple[RecordKind, str], str] = {}

    def line(self, record: MetricRecord) -> str:
        """``record.to_json(run=..., system=...)`` (same text, same errors)."""
        f = record.fields
        ts = record.ts
        node = record.node
        shape = (record.kind, type(ts), type(node), tuple(f), tuple(map(type, f.values())))
        encoders = self._shapes.get(shape)
        if encoders is not None:
            try:
                head = self._heads.get((record.kind, node))
                if head is None:
                    head = self._head(record.kind, node)
                parts = ['{"v":1,"ts":', _encoder_of(ts)(ts), head]
                for (prefix, enc), value in zip(encoders, f.values(), strict=True):
                    parts.append(prefix)
                    parts.append(enc(value))
                parts.append("}")
                return "".join(parts)
            except _Slow:
                pass
        text = record.to_json(run=self.run, system=self.system)
        self._learn(shape, record)
        return text

    def _head(self, kind: RecordKind, node: str) -> str:
        head = (
            f',"run":{encode_basestring_ascii(self.run)}'
            f',"system":{encode_basestring_ascii(self.system)}'
            f',"node":{encode_basestring_ascii(node)}'
            f',"kind":{encode_basestring_ascii(kind.value)}'
        )
        if len(self._heads) >= 1024:
            self._heads.clear()
        self._heads[(kind, node)] = head
        return head

    def _learn(self, shape: tuple[Any, ...], record: MetricRecord) -> None:
        """Remember a shape that ``to_json`` just accepted, if the fast path covers it."""
        if SCHEMA_VERSION != 1 or not isinstance(record.kind, RecordKind):
            return  # the head '{"v":1,' is written as text
        if type(record.ts) not in (int, float) or type(record.node) is not str:
            return
        encoders: list[tuple[str, Callable[[Any], str]]] = []
        for name, value in record.fields.items():
            enc = _encoder(type(value))
            if type(name) is not str or name in _COMMON_NAMES or enc is None:
                return
            encoders.append((f",{encode_basestring_ascii(name)}:", enc))
        if len(self._shapes) >= 4096:  # bounded: shapes are few, but fields are free-form
            self._shapes.clear()
        self._shapes[shape] = tuple(encoders)


def _encoder_of(ts: float) -> Callable[[Any], str]:
    return _enc_float if type(ts) is float else int.__repr__
