"""The one polling helper (``pulsarcast_ipfs.polling``), and that it is the only one."""

from __future__ import annotations

import re
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from pulsarcast_ipfs.polling import poll_until, wait_until

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parent.parent


async def test_sync_and_async_predicates_and_the_deadline() -> None:
    calls = 0

    def sync() -> bool:
        nonlocal calls
        calls += 1
        return calls >= 3

    async def never() -> bool:
        await anyio.lowlevel.checkpoint()
        return False

    assert await poll_until(sync, deadline=5, interval=0.001) and calls == 3
    with anyio.fail_after(2):
        assert not await poll_until(never, deadline=0.05, interval=0.01)
    with pytest.raises(TimeoutError, match="waiting for the moon"):
        await wait_until(never, deadline=0.05, what="the moon", interval=0.01)


def test_no_other_polling_loop() -> None:
    """A ``while not ...: await anyio.sleep(...)`` loop outside the helper is another
    one (waiting on an event, as ``Driver.wait_for`` does, is not polling)."""
    loop = re.compile(r"while not (await )?[\w.]+\([^)]*\)[^\n]*\n\s+await anyio\.sleep\(")
    offenders = [
        str(path.relative_to(ROOT))
        for folder in ("pulsarcast_ipfs", "sidecar", "benchmarks")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path.name != "polling.py" and loop.search(path.read_text())
    ]
    assert offenders == []
