"""DAG-CBOR codec and CID costs on the protocol's own blocks — not a test.

Theory of operation
-------------------
The core encodes and decodes three kinds of bytes: topic descriptors, event
descriptors and RPC frame bodies (docs/protocol.md §4, §6). This script builds real ones
(a signed topic, a signed event with 16 parents, a 64-entry HEADS, an EVENT frame
carrying its event block, a JOIN carrying its topic block) and times, in µs per call
(the best of ``--repeat`` rounds of ``--number`` calls, ``timeit``):

codec rows   ``encode`` of the block's IPLD value and ``decode`` of its bytes, for
             each candidate codec that is installed: ``core`` (the core's own
             ``_dagcbor``), ``dag_cbor`` (the reference library of the differential
             test) and ``cbrrr`` (a C DAG-CBOR codec; its CIDs are the core's, through
             ``cid_ctor`` / ``cid_type``). CIDs met while decoding are memoised
             (warm), as in a running node.
rpc rows     the core's ``encode_rpc`` / ``decode_rpc`` (what the sidecar and the
             simulator call) on the frame bodies.
CID rows     what the CID type costs: building the CID of bytes never seen (a
             memo miss: ``compute_cid`` of a new block, ``cid_from_bytes`` of a new
             link), a dict lookup keyed by a CID, ``bytes(cid)``.
hot path     a publisher building a new signed event (a draft, then the signed
             event: two encodings) and taking its CID, and a subscriber decoding a
             new event block (strict decode, validation) and taking its CID (the
             node keys everything by it; the parents' CIDs are known), each with
             fresh bytes per call.

The codec and CID rows use private helpers of the core on purpose (that is what
is measured). Nothing is written; the figures are for the machine it runs on.

    .venv/bin/python benchmarks/codec_bench.py                 # table
    .venv/bin/python benchmarks/codec_bench.py --json          # one JSON object
    .venv/bin/python benchmarks/codec_bench.py --number 2000 --repeat 7
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import sys
import timeit
from collections.abc import Callable
from typing import Any

import dag_cbor

from pulsarcast_ipfs.core import (
    SIGNED_VERSION,
    Ed25519Signer,
    Event,
    EventDescriptor,
    Heads,
    Join,
    TopicDescriptor,
    _dagcbor,
    compute_cid,
    decode_rpc,
    encode_rpc,
    format_created,
)
from pulsarcast_ipfs.core._cid import CID
from pulsarcast_ipfs.core.testing import make_signers

T0 = 1_800_000_000.0


def _blocks() -> tuple[TopicDescriptor, EventDescriptor, Ed25519Signer]:
    (key,) = make_signers(1, seed=14)
    draft = TopicDescriptor.new(
        name="bench", author=key.peer_id, now=T0, protocol_version=SIGNED_VERSION
    )
    topic = draft.with_signature(key.sign(draft.signing_bytes()))
    parents = tuple(sorted((compute_cid(bytes([i])) for i in range(16)), key=bytes))
    ev = _event(topic, key, parents, b"x" * 200, 0)
    return topic, ev, key


def _event(
    topic: TopicDescriptor,
    key: Ed25519Signer,
    parents: tuple[CID, ...],
    payload: bytes,
    i: int,
) -> EventDescriptor:
    created = format_created(T0 + i / 1000)
    draft = EventDescriptor(
        topic=topic.cid,
        author=key.peer_id,
        publisher=key.peer_id,
        parents=parents,
        clock=1 if parents else 0,
        payload=payload,
        created=created,
        protocol_version=SIGNED_VERSION,
    )
    sig = bytes(64)  # the shape of a signature: the codec does not verify it
    return draft.with_signatures(author=sig, publisher=sig)


def _time(fn: Callable[[], object], number: int, repeat: int) -> float:
    """Best µs per call over ``repeat`` rounds of ``number`` calls."""
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def _codecs() -> dict[str, tuple[Callable[[Any], bytes], Callable[[bytes], Any]]]:
    cid_type = type(compute_cid(b"codec bench"))
    out: dict[str, tuple[Callable[[Any], bytes], Callable[[bytes], Any]]] = {
        "core": (_dagcbor.encode, _dagcbor.decode),
        "dag_cbor": (dag_cbor.encode, dag_cbor.decode),
    }
    try:
        import cbrrr  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return out
    out["cbrrr"] = (
        lambda v: cbrrr.encode_dag_cbor(v, cid_type=cid_type),
        lambda b: cbrrr.decode_dag_cbor(b, cid_ctor=_dagcbor.cid_from_bytes),
    )
    return out


def measure(number: int, repeat: int) -> dict[str, dict[str, float]]:
    topic, ev, key = _blocks()
    heads = Heads(topic=topic.cid, heads=tuple((p, T0 + i) for i, p in enumerate(ev.parents)) * 4)
    event_rpc = Event(topic=topic.cid, event=ev.encode())
    join_rpc = Join(topic=topic.cid, descriptor=topic.encode())
    values: dict[str, Any] = {
        "topic descriptor": topic.to_ipld(),
        "event descriptor": ev.to_ipld(),
        "HEADS body (64)": heads.to_ipld(),
        "EVENT body": event_rpc.to_ipld(),
        "JOIN body": join_rpc.to_ipld(),
    }
    rows: dict[str, dict[str, float]] = {}
    for name, (enc, dec) in _codecs().items():
        for what, value in values.items():
            data = _dagcbor.encode(value)
            assert enc(value) == data, f"{name} encodes {what} differently"
            assert dec(data) == _dagcbor.decode(data), f"{name} decodes {what} differently"
            rows.setdefault(f"encode {what}", {})[name] = _time(
                lambda e=enc, v=value: e(v), number, repeat
            )
            rows.setdefault(f"decode {what}", {})[name] = _time(
                lambda d=dec, b=data: d(b), number, repeat
            )
    for what, rpc in (("HEADS (64)", heads), ("EVENT", event_rpc), ("JOIN", join_rpc)):
        body = encode_rpc(rpc)
        rows[f"encode_rpc {what}"] = {"core": _time(lambda r=rpc: encode_rpc(r), number, repeat)}
        rows[f"decode_rpc {what}"] = {"core": _time(lambda b=body: decode_rpc(b), number, repeat)}

    fresh = itertools.count()
    rows["CID of a new block (compute_cid, memo miss)"] = {
        "core": _time(lambda: compute_cid(b"new %d" % next(fresh)), number, repeat)
    }
    prefix = b"\x01\x71\x12\x20"
    rows["CID of a new link (cid_from_bytes, memo miss)"] = {
        "core": _time(
            lambda: _dagcbor.cid_from_bytes(
                prefix + hashlib.sha256(b"link %d" % next(fresh)).digest()
            ),
            number,
            repeat,
        )
    }
    table = {compute_cid(bytes([i])): i for i in range(16)}
    probe = _dagcbor.cid_from_bytes(bytes(compute_cid(bytes([7]))))
    rows["dict lookup keyed by a CID"] = {"core": _time(lambda: table[probe], number, repeat)}
    rows["bytes(cid)"] = {"core": _time(lambda: bytes(probe), number, repeat)}

    rows["publish: a new signed event (draft + signed)"] = {
        "core": _time(
            lambda: _event(topic, key, ev.parents, b"p%d" % next(fresh), 1).cid, number, repeat
        )
    }
    # Event blocks whose CID no one has computed yet (encoded directly, not built).
    ipld = ev.to_ipld()
    blocks = iter(
        [_dagcbor.encode({**ipld, "payload": b"r%d" % i}) for i in range(number * repeat)]
    )
    rows["receive: decode a new event block (strict, new CID)"] = {
        "core": _time(lambda: EventDescriptor.decode(next(blocks)).cid, number, repeat)
    }
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--number", type=int, default=1000, help="calls per round (default 1000)")
    p.add_argument("--repeat", type=int, default=5, help="rounds; the best is kept (default 5)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(argv)
    rows = measure(args.number, args.repeat)
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    names = sorted({n for r in rows.values() for n in r}, key=["core", "dag_cbor", "cbrrr"].index)
    width = max(map(len, rows))
    print(f"{'µs per call':<{width}}  " + "  ".join(f"{n:>9}" for n in names))
    for what, r in rows.items():
        cells = (f"{r[n]:9.1f}" if n in r else f"{'':>9}" for n in names)
        print(f"{what:<{width}}  " + "  ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
