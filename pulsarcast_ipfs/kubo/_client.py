"""Async client of Kubo's HTTP RPC API, covering what Pulsarcast needs (docs/protocol.md §2).

RPC facts it relies on (docs/protocol.md §2): every call is POST; positional arguments
are repeated ``arg=``; pubsub topics are multibase base64url (``u…``);
``block/put?cid-codec=dag-cbor&mhtype=sha2-256`` stores the exact bytes given
(one multipart file per block, many per request; the answer is one
``{"Key","Size"}`` line per block, in order, and stops at the first refused one);
``stats/dht`` dumps the local routing table without network traffic; a ``p2p``
listener with ``report-peer-id`` writes the remote peer ID and ``\\n`` first on
every incoming connection.

One-shot calls go over the lean HTTP/1.1 path of :mod:`pulsarcast_ipfs.kubo._http`
(httpx's request machinery was most of their CPU); streamed answers, a non-plain
base URL and an injected ``transport`` use httpx. All errors are
:mod:`pulsarcast_ipfs.kubo._errors` types; httpx never leaks out.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, Self

import anyio
import httpx
from multiformats import multibase

from pulsarcast_ipfs._lifecycle import AsyncClosing
from pulsarcast_ipfs.core import cid_str
from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.kubo._car import encode_car
from pulsarcast_ipfs.kubo._errors import (
    BlockCIDMismatch,
    KuboAPIError,
    KuboNotFound,
    KuboProtocolError,
    error_from_response,
    map_transport_errors,
)
from pulsarcast_ipfs.kubo._http import ConnectionPool
from pulsarcast_ipfs.kubo._routing import dag_cbor_cid, parse_stats_dht
from pulsarcast_ipfs.kubo._types import (
    BandwidthStats,
    KuboVersion,
    NodeIdentity,
    P2PListener,
    PeerAddrs,
    PeerInfo,
    PubsubMessage,
    RoutingTableSnapshot,
    SignedMessage,
)

__all__ = ["KuboClient", "KuboConfig", "PubsubSubscription", "decode_topic", "encode_topic"]

Params = Sequence[tuple[str, str]]

_BLOCK_PUT_PARAMS = (("cid-codec", "dag-cbor"), ("mhtype", "sha2-256"))
_DAG_IMPORT_PARAMS = (("pin-roots", "false"),)

# routing/* answers are streams of QueryEvents; their "Type" field:
_QUERY_FINAL_PEER = 2
_QUERY_ERROR = 3
_QUERY_PROVIDER = 4


@dataclass(frozen=True, slots=True, kw_only=True)
class KuboConfig:
    """How to reach one Kubo daemon.

    ``base_url`` is the RPC API root (``http://127.0.0.1:5001``); ``timeout`` bounds
    ordinary calls, ``routing_timeout`` the DHT walks (``provide``, ``findpeer``,
    ``findprovs``), ``connect_timeout`` establishing the HTTP connection.
    """

    base_url: str = "http://127.0.0.1:5001"
    timeout: float = 30.0
    routing_timeout: float = 60.0
    connect_timeout: float = 5.0

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must be an http(s) URL, got {self.base_url!r}")
        for name in ("timeout", "routing_timeout", "connect_timeout"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and value > 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")

    @classmethod
    def from_multiaddr(cls, api: str, **kwargs: Any) -> KuboConfig:
        """Config from an API multiaddr (``/ip4/127.0.0.1/tcp/5001``, a repo's ``api`` file)."""
        parts = api.strip().split("/")
        if len(parts) < 5 or parts[1] not in ("ip4", "ip6", "dns", "dns4") or parts[3] != "tcp":
            raise ValueError(f"not a TCP API multiaddr: {api!r}")
        host = f"[{parts[2]}]" if parts[1] == "ip6" else parts[2]
        return cls(base_url=f"http://{host}:{parts[4]}", **kwargs)


def encode_topic(topic: str) -> str:
    """A pubsub topic as Kubo's RPC wants it: multibase base64url (``u…``)."""
    return str(multibase.encode(topic.encode("utf-8"), "base64url"))


def decode_topic(text: str) -> str:
    """The inverse of :func:`encode_topic`."""
    return bytes(multibase.decode(text)).decode("utf-8", "replace")


def _multibase_bytes(text: object, what: str) -> bytes:
    if not isinstance(text, str):
        raise KuboProtocolError(f"{what}: expected a multibase string, got {text!r}")
    if not text:
        return b""
    try:
        return bytes(multibase.decode(text))
    except (ValueError, LookupError) as exc:  # what multibase raises on bad text
        raise KuboProtocolError(f"{what}: not multibase: {text[:40]!r}") from exc


def _parse_ndjson(endpoint: str, body: bytes) -> list[Any]:
    docs: list[Any] = []
    for line in body.splitlines():
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
        except json.JSONDecodeError as exc:
            raise KuboProtocolError(f"unparseable line {line[:80]!r}", endpoint=endpoint) from exc
        if isinstance(doc, dict) and doc.get("Type") == "error" and "Message" in doc:
            raise error_from_response(endpoint, 500, line)
        docs.append(doc)
    return docs


def _providers_in(doc: Any, found: dict[str, PeerAddrs]) -> None:
    """Add the providers of one ``routing/findprovs`` QueryEvent (Type 4) to ``found``."""
    if not isinstance(doc, dict) or doc.get("Type") != _QUERY_PROVIDER:
        return
    for r in doc.get("Responses") or ():
        if isinstance(r, dict) and isinstance(r.get("ID"), str) and r["ID"]:
            addrs = r.get("Addrs") or ()
            found[r["ID"]] = PeerAddrs(
                peer_id=r["ID"], addresses=tuple(str(a) for a in addrs if isinstance(a, str))
            )


def _checked_key(doc: Any, expected: CID) -> CID:
    """The ``Key`` of one ``block/put`` answer, which must be ``expected`` (our own
    CID of the bytes sent)."""
    got = doc.get("Key") if isinstance(doc, dict) else None
    if not isinstance(got, str):
        raise KuboProtocolError(f"no Key in {doc!r}", endpoint="block/put")
    if got == cid_str(expected):
        return expected  # the usual answer, compared as text (no multiformats parse)
    try:
        got_cid = CID.decode(got)
    except (ValueError, LookupError) as exc:  # multiformats' errors
        raise KuboProtocolError(
            f"Kubo returned an invalid CID {got!r}", endpoint="block/put"
        ) from exc
    if got_cid != expected:
        raise BlockCIDMismatch(expected=str(expected), got=got)
    return expected


def _check_cid(cid: str | CID, endpoint: str) -> str:
    """The CID's text; a malformed string is left for Kubo to reject (KuboInvalidArgument)."""
    del endpoint
    return cid_str(cid) if isinstance(cid, CID) else str(cid)


class PubsubSubscription(AsyncClosing):
    """An open ``pubsub/sub`` stream: an async context manager and async iterator.

    ``async with client.pubsub_sub("t") as sub:`` returns once Kubo has subscribed
    (headers received); ``async for msg in sub`` yields :class:`PubsubMessage` s.
    Leaving the block (or cancelling the task) closes the HTTP stream, which
    unsubscribes.
    """

    def __init__(self, client: KuboClient, topic: str) -> None:
        self._client = client
        self.topic = topic
        self._response: httpx.Response | None = None
        self._lines: AsyncIterator[str] | None = None

    async def __aenter__(self) -> Self:
        endpoint = "pubsub/sub"
        http = self._client._http
        request = http.build_request(
            "POST",
            f"/api/v0/{endpoint}",
            params=[("arg", encode_topic(self.topic))],
            timeout=httpx.Timeout(
                None, connect=self._client.config.connect_timeout, pool=self._client.config.timeout
            ),
        )
        with map_transport_errors(endpoint):
            response = await http.send(request, stream=True)
        try:
            if response.status_code != 200:
                with map_transport_errors(endpoint):
                    body = await response.aread()
                raise error_from_response(endpoint, response.status_code, body)
        except BaseException:
            await response.aclose()
            raise
        self._response = response
        self._lines = response.aiter_lines()
        return self

    async def aclose(self) -> None:
        if self._response is not None:
            response, self._response = self._response, None
            await response.aclose()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> PubsubMessage:
        if self._lines is None or self._response is None:
            raise StopAsyncIteration
        endpoint = "pubsub/sub"
        while True:
            with map_transport_errors(endpoint):
                try:
                    line = await self._lines.__anext__()
                except StopAsyncIteration:
                    await self.aclose()
                    raise
            if line.strip():
                break
        docs = _parse_ndjson(endpoint, line.encode())
        doc = docs[0]
        if not isinstance(doc, dict):
            raise KuboProtocolError(f"expected a message object, got {doc!r}", endpoint=endpoint)
        topics = doc.get("topicIDs") or doc.get("topics") or []
        return PubsubMessage(
            from_peer=str(doc.get("from", "")),
            data=_multibase_bytes(doc.get("data", ""), endpoint),
            seqno=_multibase_bytes(doc.get("seqno", ""), endpoint),
            topics=tuple(decode_topic(t) for t in topics if isinstance(t, str)),
        )


def multipart_body(parts: Sequence[bytes]) -> tuple[dict[str, str], bytes]:
    """``multipart/form-data`` with one file argument ``data`` per part, as ONE body.

    httpx's ``files=`` streams a multipart request as three chunks per file, and
    each chunk became its own socket write: a ``block/put`` of 10 blocks made 31
    writes (py-spy at 20 events/s: half of ``block_put_many``'s CPU was in
    ``transport.write``). The boundary is random per request, as httpx's is.
    """
    boundary = os.urandom(16).hex()
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="data"; filename="data"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()
    body = b"".join(b"%s%s\r\n" % (head, part) for part in parts)
    body += f"--{boundary}--\r\n".encode()
    return {"Content-Type": f"multipart/form-data; boundary={boundary}"}, body


class KuboClient(AsyncClosing):
    """Async client of one Kubo daemon's RPC API.

    Use as ``async with KuboClient(config=KuboConfig(base_url=...)) as kubo:``.
    ``transport`` replaces the HTTP transport (``httpx.MockTransport`` in unit tests);
    with one, every call goes through httpx (without: the one-shot calls to a plain
    ``http://host:port`` take :class:`~pulsarcast_ipfs.kubo._http.ConnectionPool`).
    """

    def __init__(
        self,
        *,
        config: KuboConfig | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.config = config or KuboConfig()
        self._http = httpx.AsyncClient(
            base_url=self.config.base_url,
            transport=transport,
            timeout=httpx.Timeout(self.config.timeout, connect=self.config.connect_timeout),
            trust_env=False,
        )
        self._pool = (
            ConnectionPool.for_base_url(self.config.base_url) if transport is None else None
        )

    async def aclose(self) -> None:
        await self._http.aclose()
        if self._pool is not None:
            await self._pool.aclose()

    # -- plumbing -----------------------------------------------------------------

    async def _call(
        self,
        endpoint: str,
        params: Params = (),
        *,
        data: bytes | None = None,
        parts: Sequence[bytes] = (),
        max_wait: float | None = None,
    ) -> bytes:
        """POST one RPC and return the body of a successful answer.

        ``data`` is sent as the one file argument; ``parts`` as one file argument each.
        """
        body, stream_error = await self._call_partial(
            endpoint, params, data=data, parts=parts, max_wait=max_wait
        )
        if stream_error:
            raise error_from_response(endpoint, 500, stream_error)
        return body

    async def _call_partial(
        self,
        endpoint: str,
        params: Params = (),
        *,
        data: bytes | None = None,
        parts: Sequence[bytes] = (),
        max_wait: float | None = None,
    ) -> tuple[bytes, bytes]:
        """:meth:`_call`, but an error Kubo met after it began to answer is returned
        beside what it answered until then (``X-Stream-Error``; ``b""``: none).
        httpx reads it from the header fields only, not from the trailer."""
        if data is not None:
            parts = (data, *parts)
        headers, body = multipart_body(parts) if parts else ({}, b"")
        if self._pool is not None:
            response = await self._pool.post(
                endpoint,
                params,
                body=body,
                content_type=headers.get("Content-Type", ""),
                max_wait=max_wait or self.config.timeout,
                connect_timeout=self.config.connect_timeout,
            )
            status, content, stream_error = response.status, response.body, response.stream_error
        else:
            t = httpx.Timeout(max_wait or self.config.timeout, connect=self.config.connect_timeout)
            with map_transport_errors(endpoint):
                answer = await self._http.post(
                    f"/api/v0/{endpoint}",
                    params=list(params),
                    content=body if parts else None,
                    headers=headers or None,
                    timeout=t,
                )
            status, content = answer.status_code, answer.content
            stream_error = answer.headers.get("X-Stream-Error", "").encode()
        if status != 200:
            raise error_from_response(endpoint, status, content)
        return content, stream_error

    async def _json(
        self,
        endpoint: str,
        params: Params = (),
        *,
        data: bytes | None = None,
        max_wait: float | None = None,
    ) -> dict[str, Any]:
        body = await self._call(endpoint, params, data=data, max_wait=max_wait)
        docs = _parse_ndjson(endpoint, body)
        if len(docs) != 1 or not isinstance(docs[0], dict):
            raise KuboProtocolError(
                f"expected one JSON object, got {body[:200]!r}", endpoint=endpoint
            )
        doc: dict[str, Any] = docs[0]
        return doc

    async def _ndjson(
        self, endpoint: str, params: Params = (), *, max_wait: float | None = None
    ) -> list[Any]:
        return _parse_ndjson(endpoint, await self._call(endpoint, params, max_wait=max_wait))

    # -- identity -----------------------------------------------------------------

    async def id(self, peer_id: str | None = None) -> NodeIdentity:
        """``id``: this node's (or a known peer's) identity."""
        params = [("arg", peer_id)] if peer_id else []
        doc = await self._json("id", params)
        try:
            return NodeIdentity(
                peer_id=str(doc["ID"]),
                public_key=str(doc.get("PublicKey") or ""),
                addresses=tuple(doc.get("Addresses") or ()),
                agent_version=str(doc.get("AgentVersion") or ""),
                protocols=tuple(doc.get("Protocols") or ()),
            )
        except KeyError as exc:
            raise KuboProtocolError(f"missing field {exc}", endpoint="id") from exc

    async def version(self) -> KuboVersion:
        """``version``."""
        doc = await self._json("version")
        return KuboVersion(
            version=str(doc.get("Version", "")),
            commit=str(doc.get("Commit", "")),
            repo=str(doc.get("Repo", "")),
            system=str(doc.get("System", "")),
            golang=str(doc.get("Golang", "")),
        )

    async def config_get(self, key: str) -> Any:
        """``config KEY``: the value set in the daemon's configuration, or ``None``
        when the key is not set there (Kubo then uses its built-in default)."""
        try:
            doc = await self._json("config", [("arg", key)])
        except KuboNotFound:
            return None
        if doc.get("Key") != key or "Value" not in doc:
            raise KuboProtocolError(f"unexpected answer {doc!r}", endpoint="config")
        return doc["Value"]

    # -- blocks, DAG, pins ----------------------------------------------------------

    async def block_put(self, data: bytes, *, pin: bool = False) -> CID:
        """Store exact dag-cbor bytes; return their CIDv1 (checked against our own)."""
        expected = dag_cbor_cid(data)
        params = [*_BLOCK_PUT_PARAMS, ("pin", "true" if pin else "false")]
        doc = await self._json("block/put", params, data=data)
        return _checked_key(doc, expected)

    async def block_put_many(
        self, blocks: Sequence[bytes], *, cids: Sequence[CID] | None = None
    ) -> tuple[CID, ...]:
        """Store several exact dag-cbor blocks with ONE ``block/put`` request (one
        multipart file per block, unpinned); return their CIDv1s in order, each checked
        against our own (:class:`BlockCIDMismatch`).

        ``cids``: the blocks' CIDs as the caller already computed them from these
        bytes (the sidecar's block store: the core made each when the block arrived),
        so that they are not computed again (a sha256 each).

        Kubo stops at the first block it refuses (too big, ...): the ones before it are
        stored, and its reason comes in an HTTP trailer (which httpx does not read).
        Fewer answers than blocks is therefore a :class:`KuboAPIError` naming the first
        block not stored (and Kubo's reason when read); callers that must know which
        one put the rest one by one.
        An empty ``blocks`` makes no request.
        """
        if not blocks:
            return ()
        endpoint = "block/put"
        if cids is not None and len(cids) != len(blocks):
            raise ValueError(f"{len(cids)} CIDs for {len(blocks)} blocks")
        expected = list(cids) if cids is not None else [dag_cbor_cid(data) for data in blocks]
        params = [*_BLOCK_PUT_PARAMS, ("pin", "false")]
        body, stream_error = await self._call_partial(endpoint, params, parts=blocks)
        docs = _parse_ndjson(endpoint, body)
        if len(docs) > len(blocks):
            raise KuboProtocolError(
                f"{len(docs)} answers for {len(blocks)} blocks", endpoint=endpoint
            )
        got = tuple(_checked_key(doc, cid) for doc, cid in zip(docs, expected, strict=False))
        if len(got) < len(blocks):
            reason = f": {stream_error.decode('utf-8', 'replace')}" if stream_error else ""
            raise KuboAPIError(
                f"Kubo stored {len(got)} of {len(blocks)} blocks and refused block "
                f"{len(got)} ({expected[len(got)]}, {len(blocks[len(got)])} bytes){reason}",
                endpoint=endpoint,
                status=200,
            )
        if stream_error:
            raise error_from_response(endpoint, 500, stream_error)
        return got

    async def block_import_many(
        self, blocks: Sequence[bytes], *, cids: Sequence[CID] | None = None
    ) -> tuple[CID, ...]:
        """Store several exact dag-cbor blocks with ONE ``dag/import`` of a CARv1 that
        names no roots (``pin-roots=false``: nothing pinned); return their CIDs.

        What :meth:`block_put_many` does, for a quarter of the CPU on both sides: Kubo
        answers nothing and keeps the connection (:mod:`pulsarcast_ipfs.kubo._car`).
        ``cids``: the blocks' CIDs as the caller computed them (else computed here).
        Kubo hashes every block and refuses the archive if one does not match its CID,
        and stores all of it or none: any refusal (a block over Kubo's limit, a
        mismatch) is a :class:`KuboAPIError` with Kubo's reason, which names the block,
        and nothing of the call was stored. An empty ``blocks`` makes no request.
        """
        if not blocks:
            return ()
        endpoint = "dag/import"
        if cids is None:
            cids = [dag_cbor_cid(data) for data in blocks]
        elif len(cids) != len(blocks):
            raise ValueError(f"{len(cids)} CIDs for {len(blocks)} blocks")
        archive = encode_car(zip(cids, blocks, strict=True))
        _, stream_error = await self._call_partial(endpoint, _DAG_IMPORT_PARAMS, parts=(archive,))
        if stream_error:
            raise error_from_response(endpoint, 500, stream_error)
        return tuple(cids)

    async def block_get(self, cid: str | CID, *, max_wait: float | None = None) -> bytes:
        """``block/get``: the raw bytes of a block (fetched from the network if needed).

        ``max_wait`` (seconds) is passed to Kubo as its ``timeout`` too, so that a block nobody has
        ends as :class:`KuboTimeout` instead of hanging.
        """
        text = _check_cid(cid, "block/get")
        params = [("arg", text)]
        if max_wait is not None:
            params.append(("timeout", f"{max_wait}s"))
        return await self._call(
            "block/get", params, max_wait=(max_wait + 5.0) if max_wait is not None else None
        )

    async def dag_get(self, cid: str | CID, *, max_wait: float | None = None) -> Any:
        """``dag/get``: the node as dag-json (links as ``{"/": cid}``)."""
        text = _check_cid(cid, "dag/get")
        params = [("arg", text), ("output-codec", "dag-json")]
        if max_wait is not None:
            params.append(("timeout", f"{max_wait}s"))
        body = await self._call(
            "dag/get", params, max_wait=(max_wait + 5.0) if max_wait is not None else None
        )
        try:
            return json.loads(body)
        except json.JSONDecodeError as exc:
            raise KuboProtocolError("unparseable dag-json", endpoint="dag/get") from exc

    async def pin_add(self, cid: str | CID, *, recursive: bool = True) -> tuple[str, ...]:
        """``pin/add``: pin a block (and what it links to if ``recursive``); Kubo
        announces the pinned root at once when its provide strategy covers pins."""
        return await self.pin_add_many([cid], recursive=recursive, fast_provide_root=True)

    async def pin_rm(self, cid: str | CID, *, recursive: bool = True) -> tuple[str, ...]:
        """``pin/rm``: unpin (``KuboNotFound`` if it was not pinned)."""
        return await self.pin_rm_many([cid], recursive=recursive)

    async def pin_add_many(
        self,
        cids: Sequence[str | CID],
        *,
        recursive: bool = False,
        fast_provide_root: bool = False,
        name: str | None = None,
        offline: bool = False,
    ) -> tuple[str, ...]:
        """``pin/add`` of several CIDs in one call (one ``arg=`` each).

        ``fast_provide_root=False`` (Kubo 0.39+): do not announce the pinned roots at
        once (Kubo's default announces each of them). Direct pins by default.
        ``name``: the pins' name (``pin ls --names``; ``pin/update`` keeps it).
        ``offline``: a CID whose block is not in this node's blockstore fails at once
        (``KuboNotFound``, "not found locally") instead of being fetched from the
        network, which waits for as long as no peer has it. Kubo 0.43 honours it for
        the CIDs themselves, not for what a recursive pin walks below them.
        """
        if not cids:
            return ()
        params = [("arg", _check_cid(c, "pin/add")) for c in cids]
        params += [
            ("recursive", "true" if recursive else "false"),
            ("fast-provide-root", "true" if fast_provide_root else "false"),
        ]
        if name is not None:
            params.append(("name", name))
        if offline:
            params.append(("offline", "true"))
        docs = await self._ndjson("pin/add", params, max_wait=self.config.routing_timeout)
        pins: list[str] = []
        for doc in docs:
            if isinstance(doc, dict):
                pins.extend(doc.get("Pins") or ())
        return tuple(pins)

    async def pin_rm_many(
        self, cids: Sequence[str | CID], *, recursive: bool = False
    ) -> tuple[str, ...]:
        """``pin/rm`` of several CIDs in one call.

        Kubo stops at the first CID that is not pinned (``KuboNotFound``), having
        unpinned the ones before it: callers that cannot be sure retry one by one.
        """
        if not cids:
            return ()
        params = [("arg", _check_cid(c, "pin/rm")) for c in cids]
        params.append(("recursive", "true" if recursive else "false"))
        doc = await self._json("pin/rm", params)
        return tuple(doc.get("Pins") or ())

    async def pin_update(
        self,
        old: str | CID,
        new: str | CID,
        *,
        unpin: bool = True,
        fast_provide_root: bool = False,
        max_wait: float | None = None,
    ) -> None:
        """``pin/update``: replace recursive pin ``old`` by ``new`` (keeping its name),
        fetching only what ``new`` links and ``old`` does not; ``unpin``: drop ``old``.
        ``fast_provide_root=False``: do not announce ``new`` (Kubo 0.43 does by
        default: ~3.5 KB of LAN DHT per update among 6 nodes, one provide) nor walk
        its DAG to announce it (``fast-provide-dag``). ``max_wait``: how long to wait
        (default: the routing timeout); a block ``new`` links that no peer has is
        waited for, and Kubo 0.43 ignores ``offline`` here (``KuboTimeout``)."""
        params = [("arg", _check_cid(old, "pin/update")), ("arg", _check_cid(new, "pin/update"))]
        params += [
            ("unpin", "true" if unpin else "false"),
            ("fast-provide-root", "true" if fast_provide_root else "false"),
            ("fast-provide-dag", "false"),
        ]
        wait = self.config.routing_timeout if max_wait is None else max_wait
        await self._json("pin/update", params, max_wait=wait)

    async def pin_names(self, *, pin_type: str = "recursive") -> dict[str, str]:
        """``pin/ls --names``: pinned CIDs of ``pin_type`` and their names (``""``: none)."""
        doc = await self._json("pin/ls", [("type", pin_type), ("names", "true")])
        keys = doc.get("Keys") or {}
        if not isinstance(keys, dict):
            raise KuboProtocolError(f"unexpected answer {doc!r}", endpoint="pin/ls")
        return {str(k): str((v or {}).get("Name") or "") for k, v in keys.items()}

    async def pin_ls(self, *, pin_type: str = "all") -> dict[str, str]:
        """``pin/ls``: pinned CIDs and their pin type (``direct``, ``recursive``, …)."""
        doc = await self._json("pin/ls", [("type", pin_type)])
        keys = doc.get("Keys") or {}
        if not isinstance(keys, dict):
            raise KuboProtocolError(f"unexpected answer {doc!r}", endpoint="pin/ls")
        return {str(k): str((v or {}).get("Type", "")) for k, v in keys.items()}

    async def repo_gc(self) -> int:
        """``repo/gc``: remove every unpinned block; how many were removed."""
        removed = 0
        for doc in await self._ndjson("repo/gc", max_wait=self.config.routing_timeout):
            if isinstance(doc, dict) and doc.get("Error"):
                raise KuboProtocolError(str(doc["Error"]), endpoint="repo/gc")
            if isinstance(doc, dict) and doc.get("Key"):
                removed += 1
        return removed

    # -- DHT ------------------------------------------------------------------------

    async def provide(self, cid: str | CID, *, recursive: bool = False) -> None:
        """``routing/provide``: announce in the DHT that this node has ``cid``.

        Returns when Kubo has finished (it walks the DHT; bounded by ``routing_timeout``).
        """
        text = _check_cid(cid, "routing/provide")
        params = [("arg", text), ("recursive", "true" if recursive else "false")]
        for doc in await self._ndjson(
            "routing/provide", params, max_wait=self.config.routing_timeout
        ):
            if isinstance(doc, dict) and doc.get("Type") == _QUERY_ERROR and doc.get("Extra"):
                extra = str(doc["Extra"])
                if "failed to find any peer in table" in extra:
                    raise KuboNotFound(extra, endpoint="routing/provide")

    async def provide_once(self, cid: str | CID) -> None:
        """``provide/once``: queue ``cid`` for one announcement by Kubo's provider.

        Returns once queued. Unlike ``routing/provide`` it does not add a synchronous
        DHT lookup of its own on top of the provider's (about half the DHT bytes).
        """
        text = _check_cid(cid, "provide/once")
        await self._ndjson("provide/once", [("arg", text)], max_wait=self.config.routing_timeout)

    async def find_providers(
        self, cid: str | CID, *, count: int = 20, max_wait: float | None = None
    ) -> tuple[PeerAddrs, ...]:
        """``routing/findprovs``: peers that announced ``cid`` (up to ``count``)."""
        text = _check_cid(cid, "routing/findprovs")
        params = [("arg", text), ("num-providers", str(count))]
        docs = await self._ndjson(
            "routing/findprovs", params, max_wait=max_wait or self.config.routing_timeout
        )
        found: dict[str, PeerAddrs] = {}
        for doc in docs:
            _providers_in(doc, found)
        return tuple(found.values())

    async def routing_findprovs(
        self, cid: str | CID, num: int = 20, *, max_wait: float | None = None
    ) -> tuple[PeerAddrs, ...]:
        """``routing/findprovs?num-providers=num``, read as a stream: the providers
        found once ``num`` are in, Kubo ends its walk, or ``max_wait`` seconds pass
        (then what was found so far; :class:`KuboTimeout` only if the call itself
        could not start)."""
        endpoint = "routing/findprovs"
        text = _check_cid(cid, endpoint)
        if isinstance(num, bool) or not isinstance(num, int) or num < 1:
            raise ValueError(f"num must be a positive integer, got {num!r}")
        wait = max_wait or self.config.routing_timeout
        request = self._http.build_request(
            "POST",
            f"/api/v0/{endpoint}",
            params=[("arg", text), ("num-providers", str(num)), ("timeout", f"{wait}s")],
            timeout=httpx.Timeout(wait + 5.0, connect=self.config.connect_timeout),
        )
        found: dict[str, PeerAddrs] = {}
        with anyio.move_on_after(wait):
            with map_transport_errors(endpoint):
                response = await self._http.send(request, stream=True)
            try:
                if response.status_code != 200:
                    with map_transport_errors(endpoint):
                        body = await response.aread()
                    raise error_from_response(endpoint, response.status_code, body)
                with map_transport_errors(endpoint):
                    async for line in response.aiter_lines():
                        if not line.strip():
                            continue
                        for doc in _parse_ndjson(endpoint, line.encode()):
                            _providers_in(doc, found)
                        if len(found) >= num:
                            break
            finally:
                with anyio.CancelScope(shield=True):
                    await response.aclose()
        return tuple(found.values())

    async def find_peer(self, peer_id: str, *, max_wait: float | None = None) -> PeerAddrs:
        """``routing/findpeer``: the addresses of a peer (``KuboNotFound`` if nobody knows it)."""
        endpoint = "routing/findpeer"
        docs = await self._ndjson(
            endpoint, [("arg", peer_id)], max_wait=max_wait or self.config.routing_timeout
        )
        errors: list[str] = []
        for doc in docs:
            if not isinstance(doc, dict):
                continue
            if doc.get("Type") == _QUERY_FINAL_PEER:
                for r in doc.get("Responses") or ():
                    if r.get("ID") == peer_id:
                        return PeerAddrs(peer_id=peer_id, addresses=tuple(r.get("Addrs") or ()))
            elif doc.get("Type") == _QUERY_ERROR and doc.get("Extra"):
                errors.append(str(doc["Extra"]))
        detail = errors[-1] if errors else "no answer"
        raise KuboNotFound(f"peer {peer_id} not found ({detail})", endpoint=endpoint)

    async def stats_dht(self) -> RoutingTableSnapshot:
        """``stats/dht``: the local routing tables (wan and lan), no network traffic."""
        docs = await self._ndjson("stats/dht")
        try:
            return parse_stats_dht(docs)
        except ValueError as exc:
            raise KuboProtocolError(str(exc), endpoint="stats/dht") from exc

    # -- swarm ----------------------------------------------------------------------

    async def swarm_connect(self, address: str) -> None:
        """``swarm/connect`` to a full multiaddr (``…/p2p/<peer>``)."""
        await self._json("swarm/connect", [("arg", address)])

    async def swarm_disconnect(self, address: str) -> None:
        """``swarm/disconnect`` from a multiaddr (``…/p2p/<peer>`` or ``/p2p/<peer>``)."""
        await self._json("swarm/disconnect", [("arg", address)])

    async def swarm_listen_addresses(self) -> tuple[str, ...]:
        """``swarm/addrs/listen``: the addresses the node really listens on (not announced)."""
        doc = await self._json("swarm/addrs/listen")
        return tuple(doc.get("Strings") or ())

    async def swarm_filters_add(self, multiaddr_filter: str) -> None:
        """``swarm/filters/add``: refuse connections to/from a range (``/ip4/…/ipcidr/32``)."""
        await self._json("swarm/filters/add", [("arg", multiaddr_filter)])

    async def swarm_filters_rm(self, multiaddr_filter: str) -> None:
        """``swarm/filters/rm``: lift a filter added with :meth:`swarm_filters_add`."""
        await self._json("swarm/filters/rm", [("arg", multiaddr_filter)])

    async def swarm_peers(self) -> tuple[PeerInfo, ...]:
        """``swarm/peers``: the currently connected peers."""
        doc = await self._json("swarm/peers", [("latency", "true"), ("direction", "true")])
        return tuple(
            PeerInfo(
                peer_id=str(p["Peer"]),
                address=str(p.get("Addr", "")),
                latency=str(p.get("Latency") or ""),
                direction=int(p.get("Direction") or 0),
            )
            for p in doc.get("Peers") or ()
        )

    # -- p2p stream mounting ----------------------------------------------------------

    async def p2p_listen(
        self,
        protocol: str,
        target: str,
        *,
        report_peer_id: bool = True,
        allow_custom_protocol: bool = False,
    ) -> None:
        """``p2p/listen``: accept ``protocol`` streams and forward them to the TCP ``target``.

        With ``report_peer_id`` every incoming connection starts with the sender's
        peer ID (base58 text) and ``\\n`` (docs/protocol.md §6).
        """
        params = [
            ("arg", protocol),
            ("arg", target),
            ("report-peer-id", "true" if report_peer_id else "false"),
            ("allow-custom-protocol", "true" if allow_custom_protocol else "false"),
        ]
        await self._call("p2p/listen", params)

    async def p2p_forward(
        self, protocol: str, listen: str, peer_id: str, *, allow_custom_protocol: bool = False
    ) -> None:
        """``p2p/forward``: connections to the local ``listen`` address go to ``peer_id``."""
        target = peer_id if peer_id.startswith("/") else f"/p2p/{peer_id}"
        params = [
            ("arg", protocol),
            ("arg", listen),
            ("arg", target),
            ("allow-custom-protocol", "true" if allow_custom_protocol else "false"),
        ]
        await self._call("p2p/forward", params)

    async def p2p_ls(self) -> tuple[P2PListener, ...]:
        """``p2p/ls``: the active listeners and forwards."""
        doc = await self._json("p2p/ls", [("headers", "true")])
        return tuple(
            P2PListener(
                protocol=str(x.get("Protocol", "")),
                listen_address=str(x.get("ListenAddress", "")),
                target_address=str(x.get("TargetAddress", "")),
            )
            for x in doc.get("Listeners") or ()
        )

    async def p2p_close(
        self,
        *,
        protocol: str | None = None,
        listen_address: str | None = None,
        target_address: str | None = None,
        close_all: bool = False,
    ) -> int:
        """``p2p/close``: close the matching listeners; return how many were closed."""
        if not (close_all or protocol or listen_address or target_address):
            raise ValueError("p2p_close: give a protocol, an address, or close_all=True")
        params: list[tuple[str, str]] = []
        if close_all:
            params.append(("all", "true"))
        if protocol:
            params.append(("protocol", protocol))
        if listen_address:
            params.append(("listen-address", listen_address))
        if target_address:
            params.append(("target-address", target_address))
        body = (await self._call("p2p/close", params)).strip()
        try:
            return int(body or b"0")
        except ValueError:
            return 0

    # -- pubsub (Kubo's own, for the baselines) --------------------------------------

    async def pubsub_pub(self, topic: str, data: bytes) -> None:
        """``pubsub/pub``: publish ``data`` on ``topic``."""
        await self._call("pubsub/pub", [("arg", encode_topic(topic))], data=data)

    def pubsub_sub(self, topic: str) -> PubsubSubscription:
        """``pubsub/sub``: ``async with kubo.pubsub_sub(t) as sub: async for m in sub: ...``."""
        return PubsubSubscription(self, topic)

    async def pubsub_ls(self) -> tuple[str, ...]:
        """``pubsub/ls``: the topics this node is subscribed to."""
        doc = await self._json("pubsub/ls")
        return tuple(decode_topic(t) for t in doc.get("Strings") or ())

    async def pubsub_peers(self, topic: str | None = None) -> tuple[str, ...]:
        """``pubsub/peers``: peers seen subscribed (to ``topic`` if given)."""
        params = [("arg", encode_topic(topic))] if topic is not None else []
        doc = await self._json("pubsub/peers", params)
        return tuple(doc.get("Strings") or ())

    # -- keys -------------------------------------------------------------------------

    async def key_sign(self, data: bytes, *, key: str | None = None) -> SignedMessage:
        """``key/sign``: sign ``data`` with the node's key (or the named one)."""
        params = [("key", key)] if key else []
        doc = await self._json("key/sign", params, data=data)
        k = doc.get("Key") or {}
        return SignedMessage(
            key_name=str(k.get("Name", "")),
            key_id=str(k.get("Id", "")),
            signature=_multibase_bytes(doc.get("Signature"), "key/sign"),
        )

    async def key_verify(self, data: bytes, signature: bytes, *, key: str | None = None) -> bool:
        """``key/verify``: whether ``signature`` over ``data`` is valid for the key."""
        params = [("signature", str(multibase.encode(signature, "base64url")))]
        if key:
            params.append(("key", key))
        doc = await self._json("key/verify", params, data=data)
        return bool(doc.get("SignatureValid"))

    # -- bandwidth --------------------------------------------------------------------

    async def stats_bw(
        self, *, protocol: str | None = None, peer: str | None = None
    ) -> BandwidthStats:
        """``stats/bw``: total bytes in/out and rates, for everything or one protocol/peer."""
        params: list[tuple[str, str]] = []
        if protocol:
            params.append(("proto", protocol))
        if peer:
            params.append(("peer", peer))
        doc = await self._json("stats/bw", params)
        return BandwidthStats(
            total_in=int(doc.get("TotalIn") or 0),
            total_out=int(doc.get("TotalOut") or 0),
            rate_in=float(doc.get("RateIn") or 0.0),
            rate_out=float(doc.get("RateOut") or 0.0),
            protocol=protocol,
        )

    async def stats_bw_by_protocol(self, protocols: Sequence[str]) -> dict[str, BandwidthStats]:
        """``stats/bw`` for each of ``protocols``."""
        return {p: await self.stats_bw(protocol=p) for p in protocols}
