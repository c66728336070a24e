"""The methods both clients share: each is one request, written once.

A method such as ``publish`` is an :class:`Endpoint` over its builder in
:mod:`pulsarcast_ipfs.sdk._calls`, which has the method's signature and docstring.
Looked up on a :class:`~pulsarcast_ipfs.sdk.Client` it is a blocking function, on an
:class:`~pulsarcast_ipfs.sdk.AsyncClient` a coroutine function: the client's own
``_bind`` joins the builder to its ``_send``. What is not one request (the consumer
block, the history walk, the delivery stream) stays in each client.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, Self, TypeVar, overload

from pulsarcast_ipfs.sdk import _calls

if TYPE_CHECKING:
    from pulsarcast_ipfs.sdk._async import AsyncClient
    from pulsarcast_ipfs.sdk._sync import Client

__all__ = ["Endpoint", "Endpoints"]

P = ParamSpec("P")
T = TypeVar("T")


class Endpoint(Generic[P, T]):
    """A client method that sends the one :class:`~_calls.Call` that ``build`` makes."""

    def __init__(self, build: Callable[P, _calls.Call[T]]) -> None:
        self.build = build
        self.__doc__ = build.__doc__
        self.__wrapped__ = build

    @overload
    def __get__(self, client: None, owner: type[Any]) -> Self: ...
    @overload
    def __get__(self, client: Client, owner: type[Any]) -> Callable[P, T]: ...
    @overload
    def __get__(self, client: AsyncClient, owner: type[Any]) -> Callable[P, Awaitable[T]]: ...
    def __get__(self, client: Client | AsyncClient | None, owner: type[Any]) -> Any:
        if client is None:
            return self
        return client._bind(self.build)


class Endpoints:
    """The one-request methods of docs/http-api.md, for :class:`Client` and
    :class:`AsyncClient` alike (their docstrings are the builders')."""

    # -- node
    health = Endpoint(_calls.health)
    status = Endpoint(_calls.status)
    # -- topics
    create_topic = Endpoint(_calls.create_topic)
    get_topic = Endpoint(_calls.get_topic)
    update_topic = Endpoint(_calls.update_topic)
    subscribe = Endpoint(_calls.subscribe)
    unsubscribe = Endpoint(_calls.unsubscribe)
    # -- consumers (docs/sdk.md "Consumers")
    open_consumer = Endpoint(_calls.open_consumer)
    get_consumer = Endpoint(_calls.get_consumer)
    consumers = Endpoint(_calls.consumers)
    close_consumer = Endpoint(_calls.close_consumer)
    # -- events
    publish = Endpoint(_calls.publish)
    get_event = Endpoint(_calls.get_event)
    history = Endpoint(_calls.history)
