"""In-process stand-ins for Kubo's RPC API behind ``httpx.MockTransport`` (no daemon).

:class:`FakeKubo` answers every endpoint a sidecar calls, keeps blocks, pins and provides so
that a run can be checked, and counts its calls; the driver benchmark and the sidecar API
tests run on it. :class:`StrictKubo` answers only the block store's RPCs, asserts their
parameters as Kubo 0.43 takes them, records each call in order and can play Kubo down; the
block store's unit tests run on it.
"""

from __future__ import annotations

import base64
import json
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import anyio
import dag_cbor
import httpx

from pulsarcast_ipfs.core import Ed25519Signer, cid_str, compute_cid
from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.kubo import KuboClient, KuboConfig
from pulsarcast_ipfs.kubo._car import decode_car
from sidecar._retainindex import decode_bucket, decode_root

__all__ = ["FAKE_KUBO_URL", "FakeKubo", "StrictKubo", "multipart_files"]

FAKE_KUBO_URL = "http://fake-kubo.invalid:5001"
"""The address :meth:`FakeKubo.client` and a sidecar on it are given (never connected)."""


def multipart_files(request: httpx.Request) -> list[bytes]:
    """The file parts of a ``multipart/form-data`` request body, in order."""
    _, _, boundary = request.headers.get("content-type", "").partition("boundary=")
    if not boundary:
        return []
    files: list[bytes] = []
    for chunk in request.content.split(b"--" + boundary.strip('"').encode())[1:]:
        if chunk.startswith(b"--"):
            break  # the closing delimiter
        _, _, body = chunk.partition(b"\r\n\r\n")
        files.append(body.removesuffix(b"\r\n"))
    return files


def _json_response(doc: object, status: int = 200) -> httpx.Response:
    return httpx.Response(status, content=json.dumps(doc).encode() + b"\n")


def _kubo_error(message: str) -> httpx.Response:
    return _json_response({"Message": message, "Code": 0, "Type": "error"}, 500)


class FakeKubo:
    """The Kubo RPC endpoints a sidecar calls, answered in process (``httpx.MockTransport``).

    Blocks, pins and provides are kept so that a run can be checked; ``cpu`` is the
    process CPU spent answering (taken out of the sidecar's figure).
    """

    def __init__(
        self, signer: Ed25519Signer, peers: Sequence[str] = (), *, latency: float = 0.0
    ) -> None:
        self.signer = signer
        self.latency = latency
        """Seconds each answer waits (no CPU): a real Kubo's round trip, during which
        the block store's queue fills and its next put takes a batch."""
        self.peers = list(peers)
        """Reported as connected (``swarm/peers``): the driver's known peers."""
        self.blocks: dict[str, bytes] = {}
        self.pinned: set[str] = set()
        """Pinned directly, or linked from a pinned retention index."""
        self.by_hash: dict[bytes, str] = {}
        self.ever_pinned: set[str] = set()
        self.watched: set[str] = set()
        self.watched_stored = 0
        """How many of the watched CIDs were written (cheap to poll while measuring)."""
        self.watched_pinned = 0
        self.provided: list[str] = []
        self.calls: Counter[str] = Counter()
        self.blocks_put = 0
        self.unknown: Counter[str] = Counter()
        self.cpu = 0.0

    def client(self) -> KuboClient:
        handler = self.handle if self.latency <= 0 else self.handle_later
        return KuboClient(
            config=KuboConfig(base_url=FAKE_KUBO_URL), transport=httpx.MockTransport(handler)
        )

    async def handle_later(self, request: httpx.Request) -> httpx.Response:
        await anyio.sleep(self.latency)
        return self.handle(request)

    def watch(self, cids: Sequence[str]) -> None:
        """Count these CIDs in ``watched_stored`` / ``watched_pinned`` (also if done already)."""
        for cid in cids:
            if cid not in self.watched:
                self.watched.add(cid)
                self.watched_stored += cid in self.blocks
                self.watched_pinned += cid in self.ever_pinned

    def _indexed(self, root: str) -> list[str]:
        """The events a retention index root links (``sidecar._retainindex``)."""
        out: list[str] = []
        for bucket in decode_root(self.blocks[root]):
            out += [self.by_hash[mh] for mh in decode_bucket(self.blocks[cid_str(bucket)])]
        return out

    def _pin(self, cids: Sequence[str]) -> None:
        for cid in cids:
            if cid not in self.ever_pinned:
                self.ever_pinned.add(cid)
                self.watched_pinned += cid in self.watched
        self.pinned.update(cids)

    def _store(self, made: CID, data: bytes) -> str:
        cid = cid_str(made)
        self.by_hash[bytes(made)[2:]] = cid
        if cid not in self.blocks and cid in self.watched:
            self.watched_stored += 1
        self.blocks[cid] = data
        self.blocks_put += 1
        return cid

    def handle(self, request: httpx.Request) -> httpx.Response:
        t0 = time.process_time()
        try:
            return self._answer(request)
        finally:
            self.cpu += time.process_time() - t0

    def _answer(self, request: httpx.Request) -> httpx.Response:
        endpoint = request.url.path.removeprefix("/api/v0/")
        self.calls[endpoint] += 1
        params = request.url.params
        args = params.get_list("arg")
        if endpoint == "block/put":
            lines = []
            for part in multipart_files(request):
                cid = self._store(compute_cid(part), part)
                if params.get("pin") == "true":
                    self._pin([cid])
                lines.append(json.dumps({"Key": cid, "Size": len(part)}).encode())
            return httpx.Response(200, content=b"\n".join(lines) + b"\n")
        if endpoint == "dag/import":  # the block store's puts: a CAR that pins nothing
            (archive,) = multipart_files(request)
            for made, data in decode_car(archive)[1]:
                self._store(made, data)
            return httpx.Response(200)
        if endpoint == "block/get":
            block = self.blocks.get(args[0]) if args else None
            if block is None:
                return _kubo_error("block was not found locally (offline)")
            return httpx.Response(200, content=block)
        if endpoint == "pin/add" and params.get("recursive") == "true":  # retention index
            self._pin(self._indexed(args[0]))
            return _json_response({"Pins": args})
        if endpoint == "pin/update":  # the retention index, replaced
            self._pin(self._indexed(args[1]))
            return _json_response({"Pins": args})
        if endpoint == "pin/ls":  # no index pinned before the run
            return _json_response({"Keys": {}})
        if endpoint == "pin/add":
            self._pin(args)
            return _json_response({"Pins": args})
        if endpoint == "pin/rm":
            missing = [a for a in args if a not in self.pinned]
            self.pinned.difference_update(args[: args.index(missing[0])] if missing else args)
            if missing:
                return _kubo_error("not pinned or pinned indirectly")
            return _json_response({"Pins": args})
        if endpoint in ("provide/once", "routing/provide"):
            self.provided.extend(args)
            return httpx.Response(200, content=b"")
        if endpoint == "key/sign":
            (data,) = multipart_files(request)
            signature = "u" + base64.urlsafe_b64encode(self.signer.sign(data)).rstrip(b"=").decode()
            return _json_response(
                {"Key": {"Name": "self", "Id": self.signer.peer_id}, "Signature": signature}
            )
        if endpoint == "id":
            return _json_response(
                {
                    "ID": self.signer.peer_id,
                    "PublicKey": "",
                    "Addresses": [],
                    "AgentVersion": "kubo/fake",
                    "Protocols": [],
                }
            )
        if endpoint == "version":
            return _json_response({"Version": "0.0.0-fake", "Commit": "", "Repo": "0"})
        if endpoint == "config":
            # The local cluster's setting (compose): Kubo announces pinned blocks itself.
            return _json_response({"Key": args[0], "Value": "pinned"})
        if endpoint == "stats/dht":
            return httpx.Response(
                200, content=b'{"Name":"wan","Buckets":[]}\n{"Name":"lan","Buckets":[]}\n'
            )
        if endpoint == "swarm/peers":
            peers = [{"Peer": p, "Addr": "/ip4/127.0.0.1/tcp/4001"} for p in self.peers]
            return _json_response({"Peers": peers})
        if endpoint == "stats/bw":
            return _json_response({"TotalIn": 0, "TotalOut": 0, "RateIn": 0.0, "RateOut": 0.0})
        if endpoint == "routing/findprovs":
            return httpx.Response(200, content=b"")
        if endpoint in ("p2p/close", "p2p/listen", "p2p/forward"):
            return httpx.Response(200, content=b"0")
        self.unknown[endpoint] += 1
        return _kubo_error(f"fake Kubo: no such endpoint {endpoint}")


class StrictKubo:
    """An in-process Kubo for the sidecar's block store alone: the RPCs it makes, answered
    as Kubo 0.43 does over an ``httpx.MockTransport``, their parameters asserted and each
    call recorded in order (no daemon).

    Unlike :class:`FakeKubo` it keys blocks and pins by :class:`CID`, keeps the recursive
    pins by name, can refuse connections (``down``, ``ls_down``, ``put_down``) or blocks
    (``refuse``), and fails the test on any endpoint the block store does not call.
    """

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.blocks: dict[CID, bytes] = {}
        self.pinned: set[CID] = set()
        """Direct pins."""
        self.recursive: dict[CID, str] = {}
        """Recursive pins (the retention index) -> their names."""
        self.down = 0
        """Refuse this many ``pin/add`` connections first (Kubo down)."""
        self.ls_down = 0
        """Refuse this many ``pin/ls`` connections first."""
        self.put_down = 0
        """Refuse this many ``block/put`` connections first."""
        self.refuse: set[bytes] = set()
        """Blocks ``block/put`` refuses (as Kubo does one over 2 MiB)."""

    def client(self) -> KuboClient:
        return KuboClient(config=KuboConfig(), transport=httpx.MockTransport(self.handle))

    def of(self, kind: str) -> list[Any]:
        return [arg for k, arg in self.calls if k == kind]

    def indexed(self) -> set[CID]:
        """The blocks the recursive pins keep, as Kubo's GC finds them: every raw link
        of every bucket of every pinned index, matched by multihash."""
        by_hash = {bytes(c)[2:]: c for c in self.blocks}
        out: set[CID] = set()
        for root in self.recursive:
            for bucket in decode_root(self.blocks[root]):
                out.update(by_hash[mh] for mh in decode_bucket(self.blocks[bucket]))
        return out

    def protected(self) -> set[CID]:
        """What a ``repo gc`` keeps of the events: direct pins and indexed blocks."""
        return self.pinned | self.indexed()

    def unindexed(self, root: CID) -> set[bytes]:
        """The multihashes index ``root`` links whose blocks are not here."""
        here = {bytes(c)[2:] for c in self.blocks}
        links = [mh for b in decode_root(self.blocks[root]) for mh in decode_bucket(self.blocks[b])]
        return set(links) - here

    def collect(self) -> set[CID]:
        """``repo gc``: drop every block no pin keeps (the index's own blocks stay);
        what it dropped."""
        keep = self.protected() | set(self.recursive)
        keep |= {b for root in self.recursive for b in decode_root(self.blocks[root])}
        gone = set(self.blocks) - keep
        for cid in gone:
            del self.blocks[cid]
        return gone

    def handle(self, request: httpx.Request) -> httpx.Response:
        endpoint = request.url.path.removeprefix("/api/v0/")
        params = request.url.params
        args = [CID.decode(a) for a in params.get_list("arg")]
        if endpoint == "dag/import":
            assert params["pin-roots"] == "false"  # pins nothing
            if self.put_down:
                self.put_down -= 1
                raise httpx.ConnectError("connection refused", request=request)
            (archive,) = multipart_files(request)
            roots, blocks = decode_car(archive)  # refuses a block that is not its CID's
            assert roots == []
            return self._import(blocks)
        if endpoint == "pin/add" and params["recursive"] == "true":  # the retention index
            if self.down:
                self.down -= 1
                raise httpx.ConnectError("connection refused", request=request)
            (root,) = args
            assert params["fast-provide-root"] == "false"  # never announced
            self.recursive[root] = params["name"]
            self.calls.append(("pin_index", root))
            self.indexed()  # every block of it is here
            return httpx.Response(200, json={"Pins": [str(root)]})
        if endpoint == "pin/update":
            old, new = args
            assert params["fast-provide-root"] == "false"  # Kubo would announce the new root
            if old not in self.recursive:
                return _kubo_error("'from' cid was not recursively pinned already")
            if self.unindexed(new):  # Kubo 0.43 waits for the network, even offline
                self.calls.append(("pin_update_waits", new))
                raise httpx.ReadTimeout("timed out", request=request)
            self.recursive[new] = self.recursive.pop(old)
            self.calls.append(("pin_update", (old, new)))
            self.indexed()
            return httpx.Response(200, json={"Pins": [str(old), str(new)]})
        if endpoint == "pin/ls":
            assert params["type"] == "recursive" and params["names"] == "true"
            if self.ls_down:
                self.ls_down -= 1
                raise httpx.ConnectError("connection refused", request=request)
            keys = {str(c): {"Type": "recursive", "Name": n} for c, n in self.recursive.items()}
            return httpx.Response(200, json={"Keys": keys})
        if endpoint == "block/get":
            (cid,) = args
            if cid not in self.blocks:
                return _kubo_error("block was not found locally (offline)")
            return httpx.Response(200, content=self.blocks[cid])
        if endpoint == "pin/rm" and params["recursive"] == "true":
            self.calls.append(("unpin_index", args))
            for c in args:
                if self.recursive.pop(c, None) is None:
                    return _kubo_error(f"{c} is not pinned or pinned indirectly")
            return httpx.Response(200, json={"Pins": [str(c) for c in args]})
        if endpoint == "pin/add":
            assert params["recursive"] == "false"  # direct pins only
            if self.down:
                self.down -= 1
                raise httpx.ConnectError("connection refused", request=request)
            assert params["offline"] == "true"  # never waits for the network
            for c in args:  # Kubo stops at the first one missing
                if c not in self.blocks:
                    self.calls.append(("pin_missing", c))
                    return _kubo_error(
                        f"pin: block was not found locally (offline): ipld: could not find {c}"
                    )
            if params["fast-provide-root"] == "true":  # announced at once
                (cid,) = args
                self.calls.append(("pin_own", cid))
            else:
                self.calls.append(("pin", args))
            self.pinned.update(args)
            return httpx.Response(200, json={"Pins": [str(c) for c in args]})
        if endpoint == "pin/rm":
            assert params["recursive"] == "false"
            self.calls.append(("unpin", args))
            for c in args:  # like Kubo: stops at the first that is not pinned
                if c not in self.pinned:
                    return _kubo_error(f"{c} is not pinned or pinned indirectly")
                self.pinned.discard(c)
            return httpx.Response(200, json={"Pins": [str(c) for c in args]})
        if endpoint == "provide/once":
            (cid,) = args
            self.calls.append(("provide", cid))
            return httpx.Response(200)
        raise AssertionError(f"unexpected call {endpoint}")

    def _import(self, blocks: list[tuple[CID, bytes]]) -> httpx.Response:
        index = all(_is_index(data) for _, data in blocks)
        self.calls.append(("put_index_call" if index else "put_call", len(blocks)))
        for cid, data in blocks:
            if data in self.refuse:  # Kubo stores none of the archive then
                return _kubo_error(f'import failed at block "{cid}": produced block is over 2MiB')
        for cid, data in blocks:
            self.calls.append(("put_index" if index else "put", data))
            self.blocks[cid] = data
        return httpx.Response(200)


def _is_index(data: bytes) -> bool:
    """Whether a block is a retention index's (root or bucket), not an event."""
    doc = dag_cbor.decode(data)
    return isinstance(doc, dict) and ("pulsarcast-retained" in doc or set(doc) == {"events"})
