"""History readers (sidecar/_readers.py) on a stand-in host: the orchestration the
API hands them, measured on the host's injected clock."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, TypeVar

import anyio
import pytest

from pulsarcast_ipfs.core import compute_cid
from pulsarcast_ipfs.core._cid import CID
from sidecar._readers import SETTLE, NotResolved, Readers

T = TypeVar("T")
TOPIC = compute_cid(b"topic")
LATER = compute_cid(b"topic v2")


class _Node:
    """A core that has joined the topic and holds a complete history (or knows none)."""

    def __init__(self, known: bool = True) -> None:
        self.known = known
        self.reads: list[tuple[CID, list[str]]] = []
        self.memory_usage = {"fetches": 0}

    def topic_state(self, cid: CID) -> Any:
        return SimpleNamespace(synced=True, parent="12D3KooWParent", author="a", children=())

    def history_summary(self, cid: CID) -> Any:
        if not self.known:
            from pulsarcast_ipfs.core import UnknownTopic

            raise UnknownTopic(str(cid))
        return SimpleNamespace(complete=True, retained=3, heads=(cid,))

    def read(self, now: float, cid: CID, *, holders: list[str]) -> None:
        self.reads.append((cid, holders))


class _Kubo:
    async def routing_findprovs(self, cid: CID, n: int, *, max_wait: float) -> list[Any]:
        return []


class _Host:
    """Stands in for the driver: a clock that moves only when told (or by ``step``
    each time it is read), and a core that resolves the topic or not."""

    def __init__(self, node: _Node, *, step: float = 0.0, resolves: bool = True) -> None:
        self.node = node
        self.peer_id = "12D3KooWMe"
        self.kubo = _Kubo()
        self.now = 1000.0
        self.step = step
        self.resolves = resolves
        self.root: CID | None = TOPIC

    def clock(self) -> float:
        self.now += self.step
        return self.now

    def call(self, fn: Callable[[float], T]) -> T:
        return fn(self.now)

    async def wait_for(self, predicate: Callable[[], bool], *, max_wait: float) -> bool:
        return self.resolves and predicate()

    def known_root(self, cid: CID) -> CID | None:
        return self.root

    async def refresh_routing(self) -> None:
        pass


@pytest.mark.anyio
async def test_a_reader_settles_on_the_injected_clock() -> None:
    """The history holds still for SETTLE seconds of the host's clock, however little
    real time passed: with ``time.monotonic`` this bounded wait would time out."""
    host = _Host(_Node(), step=SETTLE)
    readers = Readers(host)
    with anyio.fail_after(5):
        assert await readers.settle(TOPIC, max_wait=SETTLE / 2) is True
    # and a clock that stands still never settles within the wait
    still = Readers(_Host(_Node(), step=0.0))
    assert await still.settle(TOPIC, max_wait=0.2) is False


@pytest.mark.anyio
async def test_gather_answers_a_holder_at_once_and_extends_a_readers_stay() -> None:
    node = _Node()
    host = _Host(node)
    readers = Readers(host)

    async def never(cid: CID, found: int) -> CID:
        raise AssertionError("a topic the node knows is not resolved again")

    assert await readers.gather(TOPIC, resolve=never, resolve_wait=1.0) is True
    assert node.reads == []  # a subscriber: no read
    readers.last_read[TOPIC] = 1.0  # a reader: asking again extends its stay
    host.now = 2000.0
    assert await readers.gather(TOPIC, resolve=never, resolve_wait=1.0) is True
    assert node.reads == [(TOPIC, [])] and readers.last_read[TOPIC] == 2000.0


@pytest.mark.anyio
async def test_gather_makes_a_reader_of_an_unknown_topic_and_says_when_it_cannot() -> None:
    node = _Node(known=False)
    host = _Host(node, resolves=False)
    host.root = None
    readers = Readers(host)
    asked: list[tuple[CID, int]] = []

    async def resolve(cid: CID, found: int) -> CID:
        asked.append((cid, found))
        return TOPIC

    with pytest.raises(NotResolved, match="took too long"):
        await readers.gather(LATER, resolve=resolve, resolve_wait=1.0)
    assert asked == [(LATER, 0)]  # the caller resolved the unknown topic's first version
    assert node.reads == [(LATER, [])] and readers.reads == 1
    assert readers.is_reader(TOPIC)
