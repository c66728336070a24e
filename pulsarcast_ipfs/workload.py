"""The evaluation workload: Reddit comments from 2007 as topics, users and events.

Theory of operation
-------------------
The workload files (``data/workloads/*.jsonl``, from the original evaluation's
test harness, see ``ATTRIBUTION.md`` there) hold two kinds of JSON line:

- ``{"type": "topic", "name", "node", "author", "totalNumberEvents"}`` — a
  subreddit, created by the user on ``node`` (``node-1`` … ``node-100``);
- ``{"type": "user", "name", "node", "subscriptions", "events": [{"internalId",
  "topic", "ups", "downs", "controversiality"}]}`` — the topics a user
  subscribes to and the comments it publishes; ``internalId`` is the comment's
  position in the original stream, i.e. the global publication order.

:func:`load_workload` parses a file strictly (every error names the line and
what is wrong) into a :class:`Workload`. :meth:`Workload.scale` maps it onto
``N`` nodes, ``T`` topics and ``E`` events, deterministically from a seed
(the rule is documented in ``docs/simulator.md`` and on :meth:`Workload.scale`):

- ``T`` < all topics keeps the ``T`` topics with most events (ties: file order);
  events and subscriptions of the other topics are dropped.
- Users are numbered ``u = k - 1`` for ``node-k``. With ``N`` at most the number
  of users, user ``u`` lives on node ``u mod N`` (a node may hold several
  users: the union of their subscriptions, all their events). With more nodes,
  node ``i`` takes the profile of user ``i mod U``: the same subscriptions, and
  its share of that user's events, so the subscription and publication
  *distributions* are preserved. A topic is created by the first node holding
  its creator's profile (node ``u``).
- The ``E`` events are a stratified sample of the (topic-filtered) stream in
  ``internalId`` order: the ``j``-th published event is the original event at
  position ``floor(j * L / E)`` (``L`` events in the stream), so ``E < L``
  thins the stream evenly and ``E > L`` repeats each event about ``E / L``
  times; the per-topic and per-user proportions are kept and so is the order.
  When a user's profile is on several nodes, its events go to those nodes in
  turn, starting at a seeded offset over a seeded permutation of the replicas.
- ``C`` communities (default 1) split the network into ``C`` copies of the
  workload's population that share one DHT but not their topics: node ``i``
  (replica ``r = i div U`` of user ``i mod U``) is in community ``r mod C``;
  each community has its own instance ``<name>/<c>`` of every kept topic,
  created by the creator's replica in that community (node ``u + c U``); a
  node subscribes to its profile's topics in its community, and an event goes
  to the instance of the community of the replica that publishes it. Needs
  ``N >= C U``. With ``C`` = 1 nothing is renamed. It keeps the per-topic
  subscriber counts of the original ``U``-user population while ``N`` grows,
  which is what large runs with many small trees need (``docs/simulator.md``).

This module is pure (no clocks, no global random); payloads are derived from
the record and the seed by :meth:`Publication.payload`.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Final

__all__ = [
    "DEFAULT_WORKLOAD",
    "Publication",
    "ScaledTopic",
    "ScaledWorkload",
    "Workload",
    "WorkloadError",
    "WorkloadEvent",
    "WorkloadTopic",
    "WorkloadUser",
    "load_workload",
    "shipped_workload_path",
]

DEFAULT_WORKLOAD: Final = "reddit-2007-25k.jsonl"
"""The workload of the Pulsarcast papers' evaluation (23 topics, 100 users)."""

PAYLOAD_MIN: Final = 200
PAYLOAD_MAX: Final = 600


class WorkloadError(ValueError):
    """A workload file, or a request to scale one, is invalid."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadTopic:
    """A topic (subreddit) and the user that creates it."""

    name: str
    creator: int
    """0-based user index (``node-k`` is user ``k - 1``)."""
    author: str
    total_events: int


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadEvent:
    """One comment: its global position, topic and the Reddit fields kept by the harness."""

    internal_id: int
    topic: str
    ups: int
    downs: int
    controversiality: int


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadUser:
    """A user: its subscriptions and the events it publishes (in ``internalId`` order)."""

    index: int
    name: str
    subscriptions: tuple[str, ...]
    events: tuple[WorkloadEvent, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ScaledTopic:
    """A topic of a scaled workload: its name, creator node and event count."""

    name: str
    creator: int
    events: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Publication:
    """One application publish call of a scaled workload, in publication order."""

    seq: int
    node: int
    topic: str
    inject_id: str
    """Unique in the run: ``<seq>-<internalId>``."""
    event: WorkloadEvent
    user: str

    def attributes(self) -> dict[str, int | str]:
        """The event's attributes: the Reddit fields a filter selects on."""
        return {
            "ups": self.event.ups,
            "downs": self.event.downs,
            "controversiality": self.event.controversiality,
            "user": self.user,
        }

    def payload(self, seed: int) -> bytes:
        """Deterministic payload: the record as JSON, padded to a seeded 200-600 bytes."""
        body = json.dumps(
            {
                "inject": self.inject_id,
                "internalId": self.event.internal_id,
                "topic": self.topic,
                "user": self.user,
                "ups": self.event.ups,
                "downs": self.event.downs,
                "controversiality": self.event.controversiality,
            },
            separators=(",", ":"),
            sort_keys=True,
        ).encode()
        digest = hashlib.sha256(f"{seed}:{self.inject_id}".encode()).digest()
        size = PAYLOAD_MIN + int.from_bytes(digest[:4], "big") % (PAYLOAD_MAX - PAYLOAD_MIN + 1)
        if len(body) >= size:
            return body
        pad = (digest * (size // len(digest) + 1)).hex().encode()
        return body + b" " + pad[: size - len(body) - 1]


@dataclass(frozen=True, slots=True, kw_only=True)
class ScaledWorkload:
    """A workload mapped onto ``nodes`` nodes (see :meth:`Workload.scale`)."""

    nodes: int
    topics: tuple[ScaledTopic, ...]
    subscriptions: tuple[tuple[str, ...], ...]
    """Per node index: the topics it subscribes to (workload topic order)."""
    publications: tuple[Publication, ...]

    def subscribers(self, topic: str) -> list[int]:
        """Node indices subscribed to ``topic``."""
        return [i for i, subs in enumerate(self.subscriptions) if topic in subs]


@dataclass(frozen=True, slots=True, kw_only=True)
class Workload:
    """A parsed workload file."""

    topics: tuple[WorkloadTopic, ...]
    users: tuple[WorkloadUser, ...]
    """Indexed by user index (``node-k`` is ``users[k - 1]``)."""

    @property
    def total_events(self) -> int:
        return sum(len(u.events) for u in self.users)

    def scale(
        self,
        *,
        nodes: int,
        topics: int | None = None,
        events: int | None = None,
        seed: int = 0,
        communities: int = 1,
    ) -> ScaledWorkload:
        """Map the workload onto ``nodes`` nodes, ``topics`` topics and ``events`` events.

        ``None`` keeps all topics / all events of the kept topics; ``communities``
        copies of the population each get their own instance of every topic. The
        rule is in the module docstring; it is deterministic in ``seed``.
        """
        if not isinstance(nodes, int) or nodes < 1:
            raise WorkloadError(f"nodes must be a positive integer, got {nodes!r}")
        if not isinstance(communities, int) or communities < 1:
            raise WorkloadError(f"communities must be a positive integer, got {communities!r}")
        if communities > 1 and nodes < communities * len(self.users):
            raise WorkloadError(
                f"{communities} communities of {len(self.users)} users need at least "
                f"{communities * len(self.users)} nodes, got {nodes}"
            )
        n_topics = len(self.topics)
        if topics is None:
            topics = n_topics
        if not isinstance(topics, int) or not 1 <= topics <= n_topics:
            raise WorkloadError(f"topics must be between 1 and {n_topics}, got {topics!r}")
        order = sorted(range(n_topics), key=lambda i: (-self.topics[i].total_events, i))
        kept_idx = sorted(order[:topics])
        kept = [self.topics[i] for i in kept_idx]
        kept_names = {t.name for t in kept}

        stream = sorted(
            (
                (e.internal_id, u.index, e)
                for u in self.users
                for e in u.events
                if e.topic in kept_names
            ),
            key=lambda x: x[0],
        )
        if events is None:
            events = len(stream)
        if not isinstance(events, int) or events < 0:
            raise WorkloadError(f"events must be a non-negative integer, got {events!r}")
        if events > 0 and not stream:
            raise WorkloadError("the kept topics have no events to publish")

        n_users = len(self.users)

        def homes(user: int) -> list[int]:
            if nodes <= n_users:
                return [user % nodes]
            return list(range(user, nodes, n_users))

        rng = random.Random(f"workload:{seed}")
        replicas: list[list[int]] = []
        turn: list[int] = []
        for u in range(n_users):
            h = homes(u)
            rng.shuffle(h)
            replicas.append(h)
            turn.append(rng.randrange(len(h)))

        def community(node: int) -> int:
            return (node // n_users) % communities

        def instance(name: str, c: int) -> str:
            return name if communities == 1 else f"{name}/{c}"

        subscriptions: list[tuple[str, ...]] = []
        for i in range(nodes):
            users_here = range(i, n_users, nodes) if nodes <= n_users else (i % n_users,)
            subs = {s for u in users_here for s in self.users[u].subscriptions}
            c = community(i)
            subscriptions.append(tuple(instance(t.name, c) for t in kept if t.name in subs))

        pubs: list[Publication] = []
        per_topic: dict[str, int] = {
            instance(t.name, c): 0 for c in range(communities) for t in kept
        }
        length = len(stream)
        for j in range(events):
            internal_id, user, ev = stream[j * length // events]
            reps = replicas[user]
            node = reps[turn[user] % len(reps)]
            turn[user] += 1
            topic = instance(ev.topic, community(node))
            per_topic[topic] += 1
            pubs.append(
                Publication(
                    seq=j,
                    node=node,
                    topic=topic,
                    inject_id=f"{j}-{internal_id}",
                    event=ev,
                    user=self.users[user].name,
                )
            )
        scaled_topics = tuple(
            ScaledTopic(
                name=instance(t.name, c),
                creator=t.creator % nodes + c * n_users,
                events=per_topic[instance(t.name, c)],
            )
            for c in range(communities)
            for t in kept
        )
        return ScaledWorkload(
            nodes=nodes,
            topics=scaled_topics,
            subscriptions=tuple(subscriptions),
            publications=tuple(pubs),
        )


def shipped_workload_path(name: str = DEFAULT_WORKLOAD) -> Path:
    """Path of a workload file shipped in ``pulsarcast_ipfs/data/workloads``."""
    path = Path(str(resources.files("pulsarcast_ipfs") / "data" / "workloads" / name))
    if not path.is_file():
        raise WorkloadError(f"no shipped workload named {name!r}")
    return path


def _node_index(value: Any, where: str) -> int:
    if not isinstance(value, str) or not value.startswith("node-"):
        raise WorkloadError(f"{where}: 'node' must be a string 'node-<k>', got {value!r}")
    digits = value[5:]
    if not digits.isdigit() or int(digits) < 1:
        raise WorkloadError(f"{where}: 'node' must be 'node-<k>' with k >= 1, got {value!r}")
    return int(digits) - 1


def _field(obj: Mapping[str, Any], name: str, kind: type | tuple[type, ...], where: str) -> Any:
    if name not in obj:
        raise WorkloadError(f"{where}: missing field {name!r}")
    value = obj[name]
    if (isinstance(value, bool) and kind is int) or not isinstance(value, kind):
        raise WorkloadError(f"{where}: field {name!r} has the wrong type ({value!r})")
    return value


def _parse_event(obj: Any, where: str) -> WorkloadEvent:
    if not isinstance(obj, dict):
        raise WorkloadError(f"{where}: an event must be a JSON object")
    internal_id = _field(obj, "internalId", int, where)
    if internal_id < 0:
        raise WorkloadError(f"{where}: 'internalId' must be >= 0")
    topic = _field(obj, "topic", str, where)
    return WorkloadEvent(
        internal_id=internal_id,
        topic=topic,
        ups=_field(obj, "ups", int, where) if "ups" in obj else 0,
        downs=_field(obj, "downs", int, where) if "downs" in obj else 0,
        controversiality=(
            _field(obj, "controversiality", int, where) if "controversiality" in obj else 0
        ),
    )


def _parse_lines(lines: Iterable[str], source: str) -> Workload:
    topics: list[WorkloadTopic] = []
    topic_names: set[str] = set()
    users: dict[int, WorkloadUser] = {}
    user_lines: dict[int, int] = {}
    ids: dict[int, int] = {}
    for lineno, line in enumerate(lines, 1):
        where = f"{source}:{lineno}"
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise WorkloadError(f"{where}: not valid JSON ({exc.msg})") from exc
        if not isinstance(obj, dict):
            raise WorkloadError(f"{where}: a line must be a JSON object")
        kind = obj.get("type")
        if kind == "topic":
            name = _field(obj, "name", str, where)
            if not name:
                raise WorkloadError(f"{where}: empty topic name")
            if name in topic_names:
                raise WorkloadError(f"{where}: duplicate topic {name!r}")
            total = _field(obj, "totalNumberEvents", int, where)
            if total < 0:
                raise WorkloadError(f"{where}: 'totalNumberEvents' must be >= 0")
            topic_names.add(name)
            topics.append(
                WorkloadTopic(
                    name=name,
                    creator=_node_index(obj.get("node"), where),
                    author=_field(obj, "author", str, where),
                    total_events=total,
                )
            )
        elif kind == "user":
            index = _node_index(obj.get("node"), where)
            if index in users:
                raise WorkloadError(
                    f"{where}: node-{index + 1} already has a user (line {user_lines[index]})"
                )
            raw_subs = _field(obj, "subscriptions", (dict, list), where)
            if isinstance(raw_subs, dict):
                subs = tuple(k for k, v in raw_subs.items() if v is True)
                if any(v is not True and v is not False for v in raw_subs.values()):
                    raise WorkloadError(f"{where}: subscription values must be true or false")
            else:
                if not all(isinstance(s, str) for s in raw_subs):
                    raise WorkloadError(f"{where}: subscriptions must be topic names")
                subs = tuple(dict.fromkeys(raw_subs))
            raw_events = _field(obj, "events", list, where)
            evs = tuple(_parse_event(e, f"{where}: event #{n}") for n, e in enumerate(raw_events))
            for ev in evs:
                if ev.internal_id in ids:
                    raise WorkloadError(
                        f"{where}: internalId {ev.internal_id} also on line {ids[ev.internal_id]}"
                    )
                ids[ev.internal_id] = lineno
            users[index] = WorkloadUser(
                index=index,
                name=_field(obj, "name", str, where),
                subscriptions=subs,
                events=tuple(sorted(evs, key=lambda e: e.internal_id)),
            )
            user_lines[index] = lineno
        else:
            raise WorkloadError(f"{where}: unknown record type {kind!r} (expected topic or user)")
    if not topics:
        raise WorkloadError(f"{source}: no topic records")
    if not users:
        raise WorkloadError(f"{source}: no user records")
    n_users = max(users) + 1
    missing = [f"node-{i + 1}" for i in range(n_users) if i not in users]
    if missing:
        raise WorkloadError(f"{source}: users are not numbered densely; missing {missing[:5]}")
    for t in topics:
        if t.creator >= n_users:
            raise WorkloadError(f"{source}: topic {t.name!r} is created by an unknown node")
    for u in users.values():
        where = f"{source}:{user_lines[u.index]}"
        for s in u.subscriptions:
            if s not in topic_names:
                raise WorkloadError(f"{where}: subscription to unknown topic {s!r}")
        for ev in u.events:
            if ev.topic not in topic_names:
                raise WorkloadError(
                    f"{where}: event {ev.internal_id} in unknown topic {ev.topic!r}"
                )
    return Workload(topics=tuple(topics), users=tuple(users[i] for i in range(n_users)))


def load_workload(path: str | Path | None = None) -> Workload:
    """Parse a workload file (default: the shipped ``reddit-2007-25k.jsonl``).

    Raises :class:`WorkloadError` with the line number and the problem.
    """
    p = shipped_workload_path() if path is None else Path(path)
    try:
        with p.open(encoding="utf-8") as f:
            return _parse_lines(f, p.name)
    except OSError as exc:
        raise WorkloadError(f"cannot read workload {str(p)!r}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise WorkloadError(f"{p.name}: not UTF-8 text") from exc
