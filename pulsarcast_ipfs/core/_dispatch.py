"""One dispatch of the core's outputs, for every driver (docs/core-api.md).

A driver (the sidecar, the simulator, :class:`~pulsarcast_ipfs.core.testing.CoreNet`,
the driver micro-benchmark's fake peers) carries out what
:meth:`PulsarcastNode.take_outputs` returns by giving each output to one method of
its own, named by :data:`OUTPUT_METHODS` (``SendRpc`` -> ``on_send_rpc``, ...).
:class:`OutputDispatch` looks those methods up once, checks that none is missing
(a driver that does not care about an output type says so with ``ignore``), and
calls ``method(ctx, out)`` for each output in order; ``ctx`` is whatever the driver
needs to know whose outputs they are (the simulator's node index, CoreNet's peer
ID, ``None`` in the sidecar). An output of a type nobody named is a bug of the
driver and raises :class:`TypeError`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, Final, Generic, TypeVar

from pulsarcast_ipfs.records import MetricRecord

from ._io import (
    Deliver,
    DisconnectPeer,
    FetchBlock,
    OperationDone,
    ReleaseBlocks,
    SendRpc,
    SignRequest,
    StoreBlock,
    TopicUpdated,
)

__all__ = ["OUTPUT_METHODS", "OutputDispatch"]

OUTPUT_METHODS: Final[Mapping[type, str]] = MappingProxyType(
    {
        SendRpc: "on_send_rpc",
        StoreBlock: "on_store_block",
        ReleaseBlocks: "on_release_blocks",
        FetchBlock: "on_fetch_block",
        Deliver: "on_deliver",
        TopicUpdated: "on_topic_updated",
        DisconnectPeer: "on_disconnect_peer",
        SignRequest: "on_sign_request",
        OperationDone: "on_operation_done",
        MetricRecord: "on_metric_record",
    }
)
"""Output type -> the driver method that carries it out."""

C = TypeVar("C")


class OutputDispatch(Generic[C]):
    """``dispatch(ctx, outputs)``: each output to ``handler.on_<output>(ctx, out)``."""

    __slots__ = ("_ignored", "_table")

    def __init__(self, handler: object, *, ignore: Iterable[type] = ()) -> None:
        ignored = frozenset(ignore)
        unknown = ignored - OUTPUT_METHODS.keys()
        if unknown:
            raise TypeError(f"not core outputs: {sorted(t.__name__ for t in unknown)}")
        table: dict[type, Callable[[C, Any], None]] = {}
        for kind, name in OUTPUT_METHODS.items():
            if kind in ignored:
                continue
            method = getattr(handler, name, None)
            if method is None:
                raise TypeError(
                    f"{type(handler).__name__} has no {name}() for {kind.__name__} "
                    "(implement it, or ignore the output type)"
                )
            table[kind] = method
        self._table = table
        self._ignored = ignored

    def __call__(self, ctx: C, outputs: Iterable[object]) -> None:
        table = self._table
        for out in outputs:
            method = table.get(type(out))
            if method is not None:
                method(ctx, out)
            elif type(out) not in self._ignored:
                raise TypeError(f"unknown core output {type(out).__name__}")
