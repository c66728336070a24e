"""The Pulsarcast node: the protocol of PROTOCOL.md §5-§7 as a pure state machine (stub)."""

from __future__ import annotations

import random
from collections.abc import Iterable

from multiformats import CID

from ._codec import Rpc
from ._config import NodeConfig
from ._descriptors import TopicOptions
from ._io import HistoryPage, Output, PublishResult, TopicState

__all__ = ["PulsarcastNode"]


class PulsarcastNode:
    """One node (work in progress: signatures are final, bodies are not)."""

    def __init__(
        self, *, peer_id: str, config: NodeConfig | None = None, rng: random.Random, now: float
    ) -> None:
        self.peer_id = peer_id
        self.config = config or NodeConfig()
        self._rng = rng
        self._outputs: list[Output] = []

    def set_known_peers(self, now: float, peers: Iterable[str]) -> None: ...
    def receive_rpc(self, now: float, peer: str, rpc: Rpc, *, size: int | None = None) -> None: ...
    def block_fetched(self, now: float, cid: CID, data: bytes | None) -> None: ...
    def peer_unreachable(self, now: float, peer: str) -> None: ...
    def handle_timer(self, now: float) -> None: ...
    def get_timer(self) -> float | None: ...

    def create_topic(
        self,
        now: float,
        name: str,
        *,
        options: TopicOptions | None = None,
        parent: CID | None = None,
    ) -> CID:
        raise NotImplementedError

    def update_topic(self, now: float, topic_cid: CID, *, options: TopicOptions) -> CID:
        raise NotImplementedError

    def subscribe(self, now: float, topic_cid: CID) -> None: ...
    def unsubscribe(self, now: float, topic_cid: CID) -> None: ...

    def publish(
        self,
        now: float,
        topic_cid: CID,
        payload: bytes,
        *,
        parent: CID | None = None,
        inject_id: str | None = None,
    ) -> PublishResult:
        raise NotImplementedError

    def history(self, topic_cid: CID, *, before: CID | None = None, limit: int = 50) -> HistoryPage:
        raise NotImplementedError

    def fetch_history(self, now: float, topic_cid: CID, *, start: CID, limit: int = 50) -> None: ...

    def topic_state(self, topic_cid: CID) -> TopicState:
        raise NotImplementedError

    def take_outputs(self) -> list[Output]:
        out, self._outputs = self._outputs, []
        return out
