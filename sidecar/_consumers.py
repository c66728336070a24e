"""Consumers: one application's subscription on a shared sidecar (docs/http-api.md
"Consumers").

Theory of operation
-------------------
A sidecar serves every application on its machine. Each application that reads a
topic is a *consumer*: a ``sub`` process, an SDK subscription, a ``/v1/deliveries``
stream opened with ``consumer=``. A consumer has its **own filter** (None: every
event) and its **own cursor** (the ``seq`` of the last line of the delivery log its
streams passed), so two applications on one node can want different things and
resume independently.

The node subscribes in the tree once per topic, with the **union** of what its
consumers want (:meth:`ConsumerRegistry.interest`), plus the node's *explicit*
subscription (``POST /v1/topics/{cid}/subscribe``) if there is one; an unfiltered
consumer makes the union "every event". The tree summary the node tells its parent
is then the union (core ``subscribe(filters=)``), and the node's delivery log holds
every event of the union; each consumer's stream serves exactly the lines its own
filter matches (:meth:`Consumer.wants`).

Life cycle, all on the clock given to each call (``now``; pure, no I/O):

* :meth:`~ConsumerRegistry.open` makes a consumer (anonymous: a fresh id) or takes
  a *named* one up again: a name is durable, its filter and cursor are persisted in
  the sidecar's state and it resumes from its own cursor after a restart of the
  application or of the sidecar (a Kafka consumer group of one). Opening a name
  again sets its filter and ``fast`` to the new ones and keeps its cursor.
* :meth:`~ConsumerRegistry.attach` / :meth:`~ConsumerRegistry.detach`: a stream
  opens or closes. A consumer without an open stream is *idle* since then.
* :meth:`~ConsumerRegistry.close`: it leaves (``DELETE /v1/consumers/{id}``).
* :meth:`~ConsumerRegistry.expire`: a consumer that went away without closing is
  closed once idle for :attr:`ConsumerPolicy.grace` (anonymous) or
  :attr:`ConsumerPolicy.retention` (named). A consumer with an open stream never
  expires; a sidecar that restarts counts idleness from its start.

When a topic's last consumer goes, the node leaves the topic, unless its explicit
subscription holds it (the driver decides: :mod:`._subscriptions`).
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from pulsarcast_ipfs.core import (
    MATCH_ALL,
    Filter,
    FilterSyntaxError,
    matches,
    parse_filter,
    render_filter,
)

__all__ = [
    "Consumer",
    "ConsumerConflict",
    "ConsumerPolicy",
    "ConsumerRegistry",
    "TooManyConsumers",
    "check_name",
]

MAX_CONSUMERS: Final = 1024
"""Consumers per sidecar at most (anonymous and named)."""
NAME_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
ANONYMOUS_PREFIX: Final = "anon-"


class ConsumerConflict(ValueError):
    """A name already follows another topic (the API answers 409 ``conflict``)."""


class TooManyConsumers(ValueError):
    """:data:`MAX_CONSUMERS` reached (the API answers 400 ``bad_request``)."""


def check_name(name: object) -> str:
    """A consumer name: 1-64 of ``[A-Za-z0-9_.-]``, starting with a letter or digit,
    not starting with ``anon-`` (anonymous consumers' ids); ValueError saying why."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise ValueError(
            f"bad consumer name {name!r}: 1-64 of A-Z a-z 0-9 _ . -, starting with a "
            "letter or digit"
        )
    if name.startswith(ANONYMOUS_PREFIX):
        raise ValueError(f"bad consumer name {name!r}: {ANONYMOUS_PREFIX}… is for anonymous ids")
    return name


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerPolicy:
    """How long a consumer without an open stream is kept (seconds)."""

    grace: float = 60.0
    """An anonymous consumer (no name) with no open stream for this long is closed:
    its application went away without closing it."""
    retention: float = 7 * 24 * 3600.0
    """A named (durable) consumer with no open stream for this long is closed."""

    def __post_init__(self) -> None:
        if not (self.grace > 0 and self.retention > 0):
            raise ValueError("consumer grace and retention must be positive")


@dataclass(slots=True, kw_only=True)
class Consumer:
    """One application's subscription: its topic, filter and cursor."""

    id: str
    topic: str
    """The topic's first version (CID text), as the delivery log names it."""
    filter: Filter | None
    """Only the events it matches (None: every event)."""
    name: str | None = None
    """Durable consumers have one (their ``id`` is the name)."""
    fast: bool = False
    cursor: int = 0
    """The ``seq`` of the last delivery-log line its streams passed (matching or not):
    the next stream without ``after`` starts after it. It never goes back."""
    streams: int = 0
    idle_since: float | None = None
    """Since when no stream is open (None: one is)."""

    def wants(self, delivery: Mapping[str, Any]) -> bool:
        """Whether this consumer is served that delivery-log line (its topic, its filter)."""
        if delivery.get("topic_root") != self.topic:
            return False
        if self.filter is None:
            return True
        attributes = delivery.get("attributes")
        return matches(self.filter, attributes if isinstance(attributes, Mapping) else None)

    def expires_at(self, policy: ConsumerPolicy) -> float | None:
        """When it is closed if no stream opens before (None: a stream is open)."""
        if self.idle_since is None:
            return None
        return self.idle_since + (policy.retention if self.name else policy.grace)

    def to_state(self) -> dict[str, Any]:
        """The persisted form (``state.json`` ``consumers``)."""
        return {
            "id": self.id,
            "topic": self.topic,
            "filter": render_filter(self.filter) if self.filter is not None else None,
            "name": self.name,
            "fast": self.fast,
            "cursor": self.cursor,
        }

    @classmethod
    def from_state(cls, doc: Any) -> Consumer:
        """One persisted consumer; ValueError saying what is wrong."""
        if not isinstance(doc, dict):
            raise ValueError("a consumer must be an object")
        cid, topic, text = doc.get("id"), doc.get("topic"), doc.get("filter")
        name, fast, cursor = doc.get("name"), doc.get("fast", False), doc.get("cursor", 0)
        if not isinstance(cid, str) or not cid or not isinstance(topic, str) or not topic:
            raise ValueError("a consumer needs an id and a topic")
        if name is not None and (check_name(name) != cid):
            raise ValueError(f"consumer {cid!r}: a named consumer's id is its name")
        if name is None and not cid.startswith(ANONYMOUS_PREFIX):
            raise ValueError(f"consumer {cid!r}: an anonymous id starts with {ANONYMOUS_PREFIX}")
        if not isinstance(fast, bool):
            raise ValueError(f"consumer {cid!r}: fast must be true or false")
        if not isinstance(cursor, int) or isinstance(cursor, bool) or cursor < 0:
            raise ValueError(f"consumer {cid!r}: cursor must be an integer >= 0")
        if text is not None and not isinstance(text, str):
            raise ValueError(f"consumer {cid!r}: filter must be a string or null")
        try:
            where = parse_filter(text) if text is not None else None
        except FilterSyntaxError as exc:
            raise ValueError(f"consumer {cid!r}: its filter does not parse: {exc}") from None
        if where == MATCH_ALL:
            where = None
        return cls(id=cid, topic=topic, filter=where, name=name, fast=fast, cursor=cursor)


def _new_id() -> str:
    return ANONYMOUS_PREFIX + secrets.token_hex(8)


class ConsumerRegistry:
    """Every consumer of one sidecar, by id (pure: the caller gives ``now``)."""

    def __init__(
        self, *, policy: ConsumerPolicy | None = None, new_id: Callable[[], str] = _new_id
    ) -> None:
        self.policy = policy or ConsumerPolicy()
        self._new_id = new_id
        self._by_id: dict[str, Consumer] = {}

    def __len__(self) -> int:
        return len(self._by_id)

    def __iter__(self) -> Iterator[Consumer]:
        return iter(list(self._by_id.values()))

    def get(self, consumer_id: str) -> Consumer | None:
        return self._by_id.get(consumer_id)

    def of_topic(self, topic: str) -> list[Consumer]:
        return [c for c in self._by_id.values() if c.topic == topic]

    def topics(self) -> set[str]:
        return {c.topic for c in self._by_id.values()}

    def open(
        self,
        now: float,
        topic: str,
        *,
        filter: Filter | None,
        cursor: int,
        name: str | None = None,
        fast: bool = False,
    ) -> tuple[Consumer, bool]:
        """A new consumer of ``topic`` starting after ``cursor``, or the named one taken
        up again (filter and ``fast`` replaced, its own cursor kept); and whether it is
        new. Idle from ``now`` until a stream attaches."""
        where = None if filter == MATCH_ALL else filter
        if name is not None:
            check_name(name)
            old = self._by_id.get(name)
            if old is not None:
                if old.topic != topic:
                    raise ConsumerConflict(
                        f"consumer {name!r} follows topic {old.topic}; close it first"
                        f" (DELETE /v1/consumers/{name}) or use another name"
                    )
                old.filter, old.fast = where, fast
                if old.streams == 0:
                    old.idle_since = now
                return old, False
        if len(self._by_id) >= MAX_CONSUMERS:
            raise TooManyConsumers(f"this sidecar already has {MAX_CONSUMERS} consumers")
        cid = name if name is not None else self._new_id()
        while cid in self._by_id:
            cid = self._new_id()
        c = Consumer(
            id=cid, topic=topic, filter=where, name=name, fast=fast, cursor=cursor, idle_since=now
        )
        self._by_id[cid] = c
        return c, True

    def close(self, consumer_id: str) -> Consumer | None:
        """Remove a consumer (None: no such consumer)."""
        return self._by_id.pop(consumer_id, None)

    def attach(self, consumer: Consumer) -> None:
        """A stream of ``consumer`` opened."""
        consumer.streams += 1
        consumer.idle_since = None

    def detach(self, now: float, consumer: Consumer) -> None:
        """A stream of ``consumer`` closed: idle from ``now`` if it was the last."""
        consumer.streams = max(0, consumer.streams - 1)
        if consumer.streams == 0:
            consumer.idle_since = now

    @staticmethod
    def advance(consumer: Consumer, seq: int) -> bool:
        """Its streams passed the log line ``seq``; whether the cursor moved."""
        if seq <= consumer.cursor:
            return False
        consumer.cursor = seq
        return True

    def expire(self, now: float) -> list[Consumer]:
        """Close and return the consumers idle past their grace (or retention)."""
        gone = []
        for c in list(self._by_id.values()):
            at = c.expires_at(self.policy)
            if at is not None and now >= at:
                del self._by_id[c.id]
                gone.append(c)
        return gone

    def next_expiry(self) -> float | None:
        """When the next idle consumer expires (None: none is idle)."""
        times = [t for c in self._by_id.values() if (t := c.expires_at(self.policy)) is not None]
        return min(times, default=None)

    def interest(
        self, topic: str, *, explicit: Filter | None = None, explicit_all: bool = False
    ) -> tuple[Filter, ...] | None:
        """What the node subscribes to ``topic`` with: the union of its consumers'
        filters and the explicit subscription's (``explicit``, or ``explicit_all`` for
        one without a filter). ``(MATCH_ALL,)``: every event; None: nobody wants it."""
        wanted: set[Filter] = set()
        if explicit_all:
            wanted.add(MATCH_ALL)
        elif explicit is not None:
            wanted.add(explicit)
        for c in self.of_topic(topic):
            wanted.add(c.filter if c.filter is not None else MATCH_ALL)
        if not wanted:
            return None
        if MATCH_ALL in wanted:
            return (MATCH_ALL,)
        return tuple(sorted(wanted, key=render_filter))

    def wants_fast(self, topic: str) -> bool:
        """Whether a consumer of ``topic`` asked for fast groups."""
        return any(c.fast for c in self.of_topic(topic))

    # -- persistence (the driver writes these into state.json) ---------------------

    def to_state(self) -> list[dict[str, Any]]:
        return [c.to_state() for c in self._by_id.values()]

    def load(self, now: float, docs: Iterable[Any]) -> None:
        """Take up the persisted consumers; each is idle from ``now`` (the sidecar's
        start), so an application has its whole grace to reconnect."""
        self._by_id.clear()
        for doc in docs:
            c = Consumer.from_state(doc)
            c.idle_since = now
            self._by_id[c.id] = c
