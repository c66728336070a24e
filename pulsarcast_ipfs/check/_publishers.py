"""The checker's publishers: publish in a loop at mixed acknowledgement levels and
record every call's outcome (:class:`~._analysis.PublishCall`).

A call is

- **acknowledged**: ``200`` with ``status: published`` (and the event's CID);
- **failed**: it never reached the sidecar (connection refused, connect timeout) or
  was refused (an error answer other than ``not_acknowledged``), so no event was made;
- **unknown**: sent, but no answer (timeout, connection cut) or ``not_acknowledged``
  (the level was not reached in time; the event may still go out).

Acknowledgement levels: the call asks for its level with ``ack`` in the body
(``"local"``, or the number of other holders). An API without levels ignores the
field: an answer without ``holders`` counts as ``local`` (the call's ``effective``
level). An API that refuses the field (``400`` naming ``ack``) is asked again
without it, once, and every later call goes without it.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx

from pulsarcast_ipfs.check._analysis import KEY_PREFIX, PublishCall

__all__ = ["Publishers", "ack_value"]


def ack_value(level: str) -> str | int:
    """The JSON value of ``ack`` for a level name: ``"local"`` or a number."""
    return level if level == "local" else int(level)


@dataclass(slots=True, kw_only=True)
class Publishers:
    """Publish from ``nodes`` until :meth:`stop`; ``calls`` grows as they go."""

    api_url: Callable[[int], str]
    topic: str
    run: str
    levels: Sequence[str]
    seed: int
    interval: float = 0.3
    timeout: float = 10.0
    usable: Callable[[int], bool] = lambda _: True
    """Whether a node's API is up (calls to a node known down are skipped)."""
    after_ack: Callable[[int], Awaitable[bool]] | None = None
    """Called right after each acknowledgement; True: the node is gone, stop."""
    calls: list[PublishCall] = field(default_factory=list)
    ack_supported: bool | None = None
    """Whether the API honours ``ack`` (None: not known yet)."""
    _stop: anyio.Event = field(default_factory=anyio.Event)

    def stop(self) -> None:
        self._stop.set()

    async def run_all(self, nodes: Sequence[int]) -> None:
        async with anyio.create_task_group() as tg:
            for i in nodes:
                tg.start_soon(self.publish_from, i)

    async def publish_from(self, i: int) -> None:
        rng = random.Random(f"{self.seed}/publisher{i}")
        n = 0
        async with httpx.AsyncClient(trust_env=False, timeout=self.timeout) as http:
            while not self._stop.is_set():
                if not self.usable(i):
                    await anyio.sleep(self.interval)
                    continue
                n += 1
                call = PublishCall(
                    key=f"{KEY_PREFIX}{self.run}/{i}/{n}", node=i, level=rng.choice(self.levels)
                )
                self.calls.append(call)
                await self.call(http, i, call)
                if (
                    call.outcome == "acknowledged"
                    and self.after_ack is not None
                    and await self.after_ack(i)
                ):
                    return
                await anyio.sleep(self.interval * rng.uniform(0.5, 1.5))

    async def call(self, http: httpx.AsyncClient, i: int, call: PublishCall) -> None:
        body: dict[str, Any] = {"text": call.key}
        if self.ack_supported is not False:
            body["ack"] = ack_value(call.level)
        url = f"{self.api_url(i)}/v1/topics/{self.topic}/publish"
        call.started = time.time()
        try:
            r = await http.post(url, json=body)
            if r.status_code == 400 and "ack" in body and _names_ack(r):
                self.ack_supported = False  # an API that refuses the field: never again
                del body["ack"]
                r = await http.post(url, json=body)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            call.outcome, call.detail = "failed", f"{type(exc).__name__}: {exc}"
        except httpx.HTTPError as exc:
            call.outcome, call.detail = "unknown", f"{type(exc).__name__}: {exc}"
        else:
            self._answer(call, r)
        call.ended = time.time()

    def _answer(self, call: PublishCall, r: httpx.Response) -> None:
        try:
            doc = r.json()
        except ValueError:
            doc = None
        if not isinstance(doc, dict):
            call.outcome, call.detail = "failed", f"HTTP {r.status_code}: {r.text[:200]}"
            return
        if r.status_code == 200 and doc.get("status") == "published":
            call.outcome, call.cid = "acknowledged", str(doc.get("event"))
            if "holders" in doc:
                self.ack_supported = True
                call.effective = call.level
                call.holders = tuple(str(h) for h in doc.get("holders") or ())
            return
        error: dict[str, Any] = doc["error"] if isinstance(doc.get("error"), dict) else {}
        code = str(error.get("code", doc.get("status", "")))
        if code == "not_acknowledged":
            # the event is made and stays offered: its fate is checked at the end
            call.outcome, call.effective = "unknown", call.level
            call.cid = str(error["event"]) if error.get("event") else None
            holders = error.get("holders") or ()
            call.holders = tuple(str(h) for h in holders)
            call.detail = "not_acknowledged"
            return
        call.outcome, call.detail = "failed", f"HTTP {r.status_code} {code}: {r.text[:200]}"


def _names_ack(r: httpx.Response) -> bool:
    """Whether an error answer is about the ``ack`` field."""
    try:
        text = str(r.json().get("error", {}).get("message", ""))
    except (ValueError, AttributeError):
        text = r.text
    return re.search(r"\back\b", text) is not None
