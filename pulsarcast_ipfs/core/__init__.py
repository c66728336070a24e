"""The pure Pulsarcast protocol core (PROTOCOL.md §4-§7; contract in docs/core-api.md).

No clocks, no I/O, no global randomness: inputs carry ``now``, outputs are
returned to the driver (the simulator or the sidecar).
"""

from __future__ import annotations

from ._codec import (
    MAX_FRAME_SIZE,
    Event,
    FrameDecoder,
    Heads,
    Join,
    JoinAck,
    Leave,
    Ping,
    Pong,
    RequestAck,
    RequestToPublish,
    Rpc,
    decode_rpc,
    encode_frame,
    encode_rpc,
)
from ._config import NodeConfig
from ._descriptors import (
    MAX_PAYLOAD_SIZE,
    PROTOCOL_VERSION,
    EventDescriptor,
    EventLinking,
    PeerPolicy,
    TopicDescriptor,
    TopicOptions,
    cid_str,
    compute_cid,
    decode_descriptor,
    format_created,
    parse_created,
)
from ._errors import (
    DescriptorError,
    LocalProtocolError,
    NotAllowedToPublish,
    PulsarcastError,
    RemoteProtocolError,
    UnknownTopic,
)
from ._io import (
    Deliver,
    FetchBlock,
    HistoryPage,
    Output,
    PublishResult,
    Role,
    SendRpc,
    StoreBlock,
    TopicState,
    TopicUpdated,
)
from ._node import PulsarcastNode

__all__ = [
    "MAX_FRAME_SIZE",
    "MAX_PAYLOAD_SIZE",
    "PROTOCOL_VERSION",
    "Deliver",
    "DescriptorError",
    "Event",
    "EventDescriptor",
    "EventLinking",
    "FetchBlock",
    "FrameDecoder",
    "Heads",
    "HistoryPage",
    "Join",
    "JoinAck",
    "Leave",
    "LocalProtocolError",
    "NodeConfig",
    "NotAllowedToPublish",
    "Output",
    "PeerPolicy",
    "Ping",
    "Pong",
    "PublishResult",
    "PulsarcastError",
    "PulsarcastNode",
    "RemoteProtocolError",
    "RequestAck",
    "RequestToPublish",
    "Role",
    "Rpc",
    "SendRpc",
    "StoreBlock",
    "TopicDescriptor",
    "TopicOptions",
    "TopicState",
    "TopicUpdated",
    "UnknownTopic",
    "cid_str",
    "compute_cid",
    "decode_descriptor",
    "decode_rpc",
    "encode_frame",
    "encode_rpc",
    "format_created",
    "parse_created",
]
