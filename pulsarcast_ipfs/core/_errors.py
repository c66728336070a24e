"""Errors of the protocol core.

The hierarchy separates "you misused the API" from "the peer sent garbage"
(h11's ``LocalProtocolError`` / ``RemoteProtocolError``)::

    PulsarcastError
    ├── LocalProtocolError          you misused the API (bad argument, unknown topic, ...)
    │   ├── UnknownTopic            the node knows no topic by that CID
    │   ├── NotAllowedToPublish     neither allowed to publish nor to request it (§5)
    │   ├── InvalidParent           a CUSTOM parent this node does not know (§5)
    │   ├── TopicConflict           a CUSTOM parent that is an event of another topic (§5)
    │   ├── InvalidAttributes       an event attribute map breaks the rules (core/_filters.py)
    │   └── FilterSyntaxError       a subscription filter does not parse (position, expected)
    ├── RemoteProtocolError         the peer (or a file) sent garbage; the only error
    │   └── DescriptorError         garbage may ever raise: invalid descriptor bytes (§4)
    └── BodiesNeeded                a history page lists events whose bodies the core
                                    does not hold: the driver reads them and asks again

Errors of lower layers (``dag_cbor``, ``multiformats``, peer-ID parsing) are
translated at the boundary with ``raise ... from exc``; bytes from the network
can only ever raise :class:`RemoteProtocolError` (a fuzz test states exactly that).

Each refusal a caller may want to tell apart has its own class: the sidecar picks
an HTTP answer by the class (``pulsarcast_ipfs.api_errors``), never by the message.
"""

from __future__ import annotations

from pulsarcast_ipfs.core._cid import CID

__all__ = [
    "BodiesNeeded",
    "DescriptorError",
    "FilterSyntaxError",
    "InvalidAttributes",
    "InvalidParent",
    "LocalProtocolError",
    "NotAllowedToPublish",
    "PulsarcastError",
    "RemoteProtocolError",
    "TopicConflict",
    "UnknownTopic",
]


class PulsarcastError(Exception):
    """Base class of every error raised by the protocol core."""


class LocalProtocolError(PulsarcastError):
    """The caller misused the API (bad argument, wrong state)."""


class UnknownTopic(LocalProtocolError):
    """No topic with that CID is known to this node."""


class NotAllowedToPublish(LocalProtocolError):
    """This node may neither publish in the topic nor request to publish (docs/protocol.md §5)."""


class InvalidParent(LocalProtocolError):
    """The parent named for a CUSTOM-linked event is no event this node knows.

    docs/protocol.md §5 "Event linking".
    """


class TopicConflict(LocalProtocolError):
    """The parent named for a CUSTOM-linked event belongs to another topic (docs/protocol.md §5)."""


class InvalidAttributes(LocalProtocolError):
    """An event's attribute map (or a filter's value) breaks the rules of core/_filters.py."""


class FilterSyntaxError(LocalProtocolError):
    """A filter's text does not parse: ``position`` (0-based offset) and ``expected``."""

    def __init__(self, problem: str, *, position: int, expected: str) -> None:
        super().__init__(f"{problem} at position {position}: expected {expected}")
        self.problem = problem
        self.position = position
        self.expected = expected


class RemoteProtocolError(PulsarcastError):
    """Bytes from a peer (or a file) are malformed or violate the protocol."""


class DescriptorError(RemoteProtocolError):
    """Descriptor bytes are not a valid topic or event descriptor (docs/protocol.md §4)."""


class BodiesNeeded(PulsarcastError):
    """A history page lists retained events whose descriptors the core does not hold.

    The core keeps an index of a retained history, not the events (docs/sidecar.md
    "Retention"): the driver reads these blocks from its block store and asks for the
    page again with ``read`` (``PulsarcastNode.history``)."""

    def __init__(self, cids: tuple[CID, ...]) -> None:
        super().__init__(f"{len(cids)} event bodies to read from the block store")
        self.cids = cids
