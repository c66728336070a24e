"""The delivery log written through a descriptor kept open, against the file opened
per line (how ``StateStore.append_delivery`` wrote it before).

A differential test of the fast path against the slow one: the same bytes for every
sequence of deliveries, including after rotations and after the file was moved away
or removed under the store; and a line handed to the kernel before the call returns
(another reader sees it at once, with no flush or close).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar._state import StateStore

PEER = "12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN"


def _slow_append(path: Path, seq: int, delivery: dict[str, Any]) -> None:
    """The previous append: open, write the line, close."""
    line = json.dumps({**delivery, "seq": seq}, separators=(",", ":")) + "\n"
    with open(path, "a", encoding="utf-8") as f:
        f.write(line)


_deliveries = st.lists(
    st.fixed_dictionaries(
        {"cid": st.text(min_size=1, max_size=8), "topic_root": st.text(max_size=6)},
        optional={"payload": st.text(max_size=20), "recovered": st.booleans()},
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=25, deadline=None)
@given(_deliveries, st.integers(min_value=1, max_value=30))
def test_the_kept_descriptor_writes_the_bytes_of_open_per_line(
    tmp_path_factory: Any, deliveries: list[dict[str, Any]], move_at: int
) -> None:
    base = tmp_path_factory.mktemp("log")
    store = StateStore(base / "fast")
    store.load(PEER)
    (base / "slow").mkdir()
    slow = base / "slow" / "deliveries.ndjson"
    for n, delivery in enumerate(deliveries):
        if n == move_at:  # the log moved away under the store: both start a new file
            store.log_file.rename(base / "fast" / "moved.ndjson")
            slow.rename(base / "slow" / "moved.ndjson")
        seq = store.append_delivery(delivery)["seq"]
        _slow_append(slow, seq, delivery)
        assert store.log_file.read_bytes() == slow.read_bytes()  # no flush, no close
    if move_at < len(deliveries):
        moved = (base / "fast" / "moved.ndjson").read_bytes()
        assert moved == (base / "slow" / "moved.ndjson").read_bytes()
    store.close()


def test_rotation_and_removal_reopen_the_log(tmp_path: Path) -> None:
    store = StateStore(tmp_path, log_max=10)
    store.load(PEER)
    for n in range(25):  # two rotations: the file is replaced (atomic_write) each time
        store.append_delivery({"cid": f"c{n}"})
    lines = store.log_file.read_text().splitlines()
    assert [json.loads(x)["seq"] for x in lines] == list(range(25 - len(lines) + 1, 26))
    os.unlink(store.log_file)
    store.append_delivery({"cid": "after"})
    assert [json.loads(x)["cid"] for x in store.log_file.read_text().splitlines()] == ["after"]
    store.close()
    store.close()  # idempotent
    store.append_delivery({"cid": "reopened"})
    assert store.log_file.read_text().splitlines()[-1].startswith('{"cid":"reopened"')
