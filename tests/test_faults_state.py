"""A full disk or an unwritable state directory: a clear ``StateError``,
the previous state left intact. Real OS errors: ``/dev/full`` gives ENOSPC on every
write, ``chattr +i`` gives EPERM even to root (skipped where the file system or the
user cannot set it)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sidecar._state import StateError, StateStore

PEER = "12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN"


def delivery(n: int) -> dict[str, object]:
    return {"cid": f"bafy{n}", "topic_root": "bafyroot"}


@pytest.fixture
def store(tmp_path: Path) -> StateStore:
    s = StateStore(tmp_path / "state")
    s.load(PEER)
    s.state.subscriptions["bafyroot"] = 1.0
    s.save()
    for n in range(3):
        s.append_delivery(delivery(n))
    return s


@pytest.fixture
def immutable(store: StateStore) -> Iterator[None]:
    targets = [str(store.dir), str(store.log_file)]
    try:
        done = subprocess.run(["chattr", "+i", *targets], capture_output=True, check=False)
    except FileNotFoundError:
        pytest.skip("chattr is not installed")
    if done.returncode != 0:
        pytest.skip(f"chattr +i not possible here: {done.stderr.decode().strip()}")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", *targets], check=True)


def test_full_disk_on_the_delivery_log(store: StateStore) -> None:
    before = store.log_file.read_bytes()
    store.log_file.rename(store.dir / "saved.ndjson")
    os.symlink("/dev/full", store.log_file)  # every write: ENOSPC
    with pytest.raises(StateError, match=r"cannot append to .*No space left on device"):
        store.append_delivery(delivery(9))
    assert "bafy9" not in store.delivered and store.state.next_seq == 4
    store.log_file.unlink()
    (store.dir / "saved.ndjson").rename(store.log_file)
    assert store.log_file.read_bytes() == before
    # The next append (disk fixed) gets the seq the failed one did not use.
    assert store.append_delivery(delivery(9))["seq"] == 4


def test_unwritable_dir_keeps_state_json(store: StateStore, immutable: None) -> None:
    state_before = store.state_file.read_bytes()
    log_before = store.log_file.read_bytes()
    store.state.subscriptions["bafyother"] = 2.0
    with pytest.raises(StateError, match=r"cannot write .*state\.json.*intact"):
        store.save()
    with pytest.raises(StateError, match="cannot append to"):
        store.append_delivery(delivery(7))
    assert store.state_file.read_bytes() == state_before
    assert store.log_file.read_bytes() == log_before
    assert not [p for p in store.dir.iterdir() if p.name.endswith(".tmp")]
    # A sidecar starting on it: refused with the same clear error, files unchanged.
    fresh = StateStore(store.dir)
    with pytest.raises(StateError, match="cannot write"):
        fresh.load(PEER)
    assert store.state_file.read_bytes() == state_before


def test_torn_tail_is_cut_before_the_next_append(store: StateStore) -> None:
    with open(store.log_file, "a") as f:
        f.write('{"cid":"bafy-torn","se')  # a crash or ENOSPC in the middle of a line
    again = StateStore(store.dir)
    again.load(PEER)
    assert "bafy-torn" not in again.delivered
    again.append_delivery(delivery(5))
    third = StateStore(store.dir)
    third.load(PEER)  # would raise on a corrupt line in the middle
    lines = store.log_file.read_text().splitlines()
    assert [json.loads(x)["cid"] for x in lines] == ["bafy0", "bafy1", "bafy2", "bafy5"]


def test_an_earlier_snapshot_never_replaces_a_later_one(store: StateStore) -> None:
    """The sidecar writes ``state.json`` from a worker thread (two fsyncs off the
    event loop); a snapshot taken earlier but written later must not win."""
    store.state.subscriptions["bafyold"] = 1.0
    early = store.snapshot()
    store.state.subscriptions["bafynew"] = 2.0
    late = store.snapshot()
    store.write(*late)
    store.write(*early)  # finishes last: skipped
    on_disk = json.loads(store.state_file.read_text())
    assert set(on_disk["subscriptions"]) == {"bafyroot", "bafyold", "bafynew"}
    store.state.subscriptions.pop("bafyold")
    store.save()  # a newer one is written
    assert set(json.loads(store.state_file.read_text())["subscriptions"]) == {"bafyroot", "bafynew"}
