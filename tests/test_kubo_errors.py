"""Unit tests of the client's own logic over httpx.MockTransport (no daemon)."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import pytest

import pulsarcast_ipfs.cluster as cluster_pkg
import pulsarcast_ipfs.kubo as kubo_pkg
import pulsarcast_ipfs.testing as testing_pkg
from pulsarcast_ipfs.kubo import (
    BlockCIDMismatch,
    KuboAPIError,
    KuboClient,
    KuboConfig,
    KuboError,
    KuboInvalidArgument,
    KuboNotFound,
    KuboProtocolError,
    KuboPubsubDisabled,
    KuboStreamMountingDisabled,
    KuboTimeout,
    KuboUnavailable,
    dag_cbor_cid,
    decode_topic,
    encode_topic,
    parse_stats_dht,
)
from pulsarcast_ipfs.kubo._errors import error_from_response

pytestmark = pytest.mark.anyio

Handler = Callable[[httpx.Request], httpx.Response]


def _client(handler: Handler) -> KuboClient:
    return KuboClient(config=KuboConfig(), transport=httpx.MockTransport(handler))


def _kubo_error(message: str, status: int = 500, code: int = 0) -> httpx.Response:
    return httpx.Response(status, json={"Message": message, "Code": code, "Type": "error"})


@pytest.mark.parametrize(
    ("message", "kind"),
    [
        ("libp2p stream mounting not enabled", KuboStreamMountingDisabled),
        ("experimental pubsub feature not enabled, run daemon with ...", KuboPubsubDisabled),
        ("block was not found locally (offline): ipld: could not find x", KuboNotFound),
        ("not pinned or pinned indirectly", KuboNotFound),
        ('invalid path "x": path does not have enough components', KuboInvalidArgument),
        ("failed to parse peer ID: invalid cid", KuboInvalidArgument),
        ("something else broke", KuboAPIError),
    ],
)
def test_kubo_messages_map_to_typed_errors(message: str, kind: type[KuboAPIError]) -> None:
    body = json.dumps({"Message": message, "Code": 0, "Type": "error"}).encode()
    err = error_from_response("x/y", 500, body)
    assert type(err) is kind
    assert isinstance(err, KuboAPIError)
    assert err.message == message and err.endpoint == "x/y" and err.status == 500


def test_plain_text_and_deadline_errors() -> None:
    err = error_from_response("key/sign", 400, b"file argument 'data' is required\n")
    assert isinstance(err, KuboInvalidArgument) and err.status == 400
    assert isinstance(error_from_response("block/get", 500, b""), KuboAPIError)
    assert isinstance(
        error_from_response("block/get", 500, b'{"Message":"context deadline exceeded"}'),
        KuboTimeout,
    )


async def test_rpc_calls_are_post_with_repeated_args() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, text="")

    async with _client(handler) as kubo:
        await kubo.p2p_forward("/x/p", "/ip4/127.0.0.1/tcp/1", "12D3KooWabc")
        await kubo.pubsub_pub("a/b c", b"data")
    assert [r.method for r in seen] == ["POST", "POST"]
    assert seen[0].url.path == "/api/v0/p2p/forward"
    assert seen[0].url.params.get_list("arg") == [
        "/x/p",
        "/ip4/127.0.0.1/tcp/1",
        "/p2p/12D3KooWabc",
    ]
    assert seen[1].url.params.get_list("arg") == [encode_topic("a/b c")]
    assert encode_topic("a/b c").startswith("u") and decode_topic(encode_topic("a/b c")) == "a/b c"


async def test_http_errors_become_typed_errors() -> None:
    def refused(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    def slow(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    def failing(request: httpx.Request) -> httpx.Response:
        return _kubo_error("libp2p stream mounting not enabled")

    async with _client(refused) as kubo:
        with pytest.raises(KuboUnavailable) as down:
            await kubo.id()
    assert isinstance(down.value.__cause__, httpx.ConnectError)
    async with _client(slow) as kubo:
        with pytest.raises(KuboTimeout):
            await kubo.version()
    async with _client(failing) as kubo:
        with pytest.raises(KuboStreamMountingDisabled) as exc:
            await kubo.p2p_ls()
    assert exc.value.endpoint == "p2p/ls"


async def test_block_put_checks_the_returned_cid() -> None:
    data = b"\xa1aa\x01"
    wrong = str(dag_cbor_cid(b"\xa0"))

    async with _client(lambda r: httpx.Response(200, json={"Key": wrong, "Size": 4})) as kubo:
        with pytest.raises(BlockCIDMismatch) as exc:
            await kubo.block_put(data)
    assert exc.value.expected == str(dag_cbor_cid(data)) and exc.value.got == wrong
    async with _client(lambda r: httpx.Response(200, text="not json")) as kubo:
        with pytest.raises(KuboProtocolError):
            await kubo.block_put(data)


async def test_block_put_many_takes_the_callers_cids_and_still_checks_them() -> None:
    """``cids=``: the store's own CIDs of the bytes, not computed again; Kubo's answer
    is still checked against them, and a count that does not match is refused."""
    blocks = [b"\xa1aa\x01", b"\xa1aa\x02"]
    right = [dag_cbor_cid(b) for b in blocks]

    def answer(keys: list[str]) -> Handler:
        def handler(request: httpx.Request) -> httpx.Response:
            return httpx.Response(200, text="".join(json.dumps({"Key": k}) + "\n" for k in keys))

        return handler

    async with _client(answer([str(c) for c in right])) as kubo:
        assert await kubo.block_put_many(blocks, cids=right) == tuple(right)
        with pytest.raises(ValueError, match="1 CIDs for 2 blocks"):
            await kubo.block_put_many(blocks, cids=right[:1])
    async with _client(answer([str(c) for c in right])) as kubo:
        with pytest.raises(BlockCIDMismatch):  # the caller's CIDs are what Kubo must answer
            await kubo.block_put_many(blocks, cids=right[::-1])


async def test_block_put_many_sends_one_request_and_checks_every_cid() -> None:
    blocks = [b"\xa1aa\x01", b"\xa1aa\x02", b"\xa1aa\x03"]
    seen: list[httpx.Request] = []

    def answer(keys: list[str]) -> Handler:
        def handler(request: httpx.Request) -> httpx.Response:
            seen.append(request)
            lines = "".join(json.dumps({"Key": k, "Size": 4}) + "\n" for k in keys)
            return httpx.Response(200, text=lines)

        return handler

    right = [str(dag_cbor_cid(b)) for b in blocks]
    async with _client(answer(right)) as kubo:
        assert await kubo.block_put_many([]) == ()
        assert not seen  # no request for nothing
        assert await kubo.block_put_many(blocks) == tuple(dag_cbor_cid(b) for b in blocks)
    (request,) = seen
    assert request.url.path == "/api/v0/block/put"
    assert request.url.params.get_list("cid-codec") == ["dag-cbor"]
    assert request.url.params.get_list("pin") == ["false"]
    body = request.read()
    assert body.count(b'filename="data"') == 3
    assert body.index(blocks[0]) < body.index(blocks[1]) < body.index(blocks[2])

    swapped = [right[0], right[2], right[1]]
    async with _client(answer(swapped)) as kubo:
        with pytest.raises(BlockCIDMismatch) as exc:
            await kubo.block_put_many(blocks)
    assert exc.value.expected == right[1] and exc.value.got == right[2]
    async with _client(answer(right[:2])) as kubo:  # Kubo stopped at block 2
        with pytest.raises(KuboAPIError, match="stored 2 of 3 blocks and refused block 2"):
            await kubo.block_put_many(blocks)
    async with _client(answer(right + right[:1])) as kubo:
        with pytest.raises(KuboProtocolError, match="4 answers for 3 blocks"):
            await kubo.block_put_many(blocks)


def test_stats_dht_parsing() -> None:
    peer = "12D3KooWQYhTNQdmr3ArTeUHRYzFg94BKyTkoWBDWez9kSCVe2Xo"
    docs = [
        {"Name": "wan", "Buckets": []},
        {
            "Name": "lan",
            "Buckets": [{"Peers": None}, {"Peers": [{"ID": peer, "Connected": True}]}],
        },
    ]
    snap = parse_stats_dht(docs)
    assert [(e.dht, e.bucket, e.peer_id, e.connected) for e in snap.entries] == [
        ("lan", 1, peer, True)
    ]
    with pytest.raises(ValueError):
        parse_stats_dht([{"Name": "lan", "Buckets": [{"Peers": [{"no": "id"}]}]}])


def test_config_validation() -> None:
    with pytest.raises(ValueError):
        KuboConfig(base_url="127.0.0.1:5001")
    with pytest.raises(ValueError):
        KuboConfig(timeout=0)
    assert KuboConfig.from_multiaddr("/ip4/127.0.0.1/tcp/5001\n").base_url == (
        "http://127.0.0.1:5001"
    )
    with pytest.raises(ValueError):
        KuboConfig.from_multiaddr("/unix/x")


@pytest.mark.parametrize("package", [kubo_pkg, cluster_pkg, testing_pkg])
def test_public_names_are_exported(package: object) -> None:
    """Every public class/function of the private modules is in ``__all__`` (httpx-style)."""
    exported = set(package.__all__)  # type: ignore[attr-defined]
    for name in exported:
        assert hasattr(package, name), name
    for name, value in vars(package).items():
        if name.startswith("_") or not hasattr(value, "__module__"):
            continue
        if str(getattr(value, "__module__", "")).startswith(package.__name__ + "._"):  # type: ignore[attr-defined]
            assert name in exported, f"{name} is public but not in __all__"
    assert issubclass(KuboUnavailable, KuboError) and issubclass(BlockCIDMismatch, KuboError)


def test_dag_cbor_cid_is_multiformats_cid() -> None:
    """The fast CID (the core's codec) is the CID multiformats computes, and the
    CID text sent to Kubo is its canonical base32 form."""
    import hashlib

    from multiformats import CID, multihash

    from pulsarcast_ipfs.kubo import dag_cbor_cid
    from pulsarcast_ipfs.kubo._client import _check_cid

    for data in (b"", b"\xa0", bytes(range(256)) * 7):
        slow = CID("base32", 1, "dag-cbor", multihash.digest(data, "sha2-256"))
        fast = dag_cbor_cid(data)
        assert fast == slow and bytes(fast) == bytes(slow)
        assert _check_cid(fast, "block/get") == str(slow)
        assert bytes(fast)[-32:] == hashlib.sha256(data).digest()
    assert _check_cid("not-a-cid", "block/get") == "not-a-cid"
