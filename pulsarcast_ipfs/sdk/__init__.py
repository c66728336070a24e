"""The Python SDK of the Pulsarcast sidecar's HTTP API (docs/http-api.md, docs/sdk.md).

```python
from pulsarcast_ipfs.sdk import AsyncClient, ClientConfig

async with AsyncClient(config=ClientConfig(api="http://127.0.0.1:5050")) as pc:
    topic = await pc.create_topic("news")
    await pc.subscribe(topic.cid)
    outcome = await pc.publish(topic.cid, "hello")
    async for delivery in pc.deliveries(topic.cid):
        print(delivery.seq, delivery.event.text)
```

:class:`Client` has the same methods, blocking. Errors: :class:`SdkError` and the
hierarchy drawn in :mod:`pulsarcast_ipfs.sdk._errors`.
"""

from __future__ import annotations

from pulsarcast_ipfs.sdk._async import AsyncClient
from pulsarcast_ipfs.sdk._errors import (
    ApiError,
    BadRequest,
    Conflict,
    InvalidParent,
    InvalidResponse,
    KuboUnavailable,
    NotAcknowledged,
    NotAllowed,
    NotFound,
    PayloadTooLarge,
    SdkError,
    SidecarUnavailable,
    SigningFailed,
    Timeout,
    Unauthorized,
    UnknownEvent,
    UnknownTopic,
)
from pulsarcast_ipfs.sdk._sync import Client
from pulsarcast_ipfs.sdk._types import (
    DEFAULT_API,
    AttributeValue,
    ClientConfig,
    Consumer,
    Delivery,
    Event,
    EventLinking,
    Health,
    HistoryOrder,
    HistoryPage,
    NodeStatus,
    PeerSet,
    PublishOutcome,
    Topic,
    TopicStatus,
)

__all__ = [
    "DEFAULT_API",
    "ApiError",
    "AsyncClient",
    "AttributeValue",
    "BadRequest",
    "Client",
    "ClientConfig",
    "Conflict",
    "Consumer",
    "Delivery",
    "Event",
    "EventLinking",
    "Health",
    "HistoryOrder",
    "HistoryPage",
    "InvalidParent",
    "InvalidResponse",
    "KuboUnavailable",
    "NodeStatus",
    "NotAcknowledged",
    "NotAllowed",
    "NotFound",
    "PayloadTooLarge",
    "PeerSet",
    "PublishOutcome",
    "SdkError",
    "SidecarUnavailable",
    "SigningFailed",
    "Timeout",
    "Topic",
    "TopicStatus",
    "Unauthorized",
    "UnknownEvent",
    "UnknownTopic",
]
