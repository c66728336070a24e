"""Metric records: the one schema shared by the core, the sidecar, the simulator,
the benchmark runner and the Spark jobs (PROTOCOL.md §7).

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
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = [
    "FIELDS",
    "SCHEMA_VERSION",
    "MetricRecord",
    "RecordError",
    "RecordKind",
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
