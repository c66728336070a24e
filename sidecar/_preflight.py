"""One sidecar per Kubo, and the Kubo settings a sidecar needs, checked before it
changes anything in Kubo.

A Kubo daemon has one ``p2p listen`` per protocol: the sidecar that registers
``/x/pulsarcast/2.12.0`` receives every tree RPC sent to the node. A second sidecar
beside the same Kubo would take that listener from the first one (and close it on
its way out), so a starting sidecar first reads ``p2p/ls``:

- no listener for the protocol: the node is free;
- a listener whose target address answers a TCP connection: a live sidecar (or
  something else) is there, and the start is refused (:class:`ProtocolInUse`);
- a listener whose target does not answer: a stale one, left by a sidecar that
  crashed; it may be taken over (the caller says so in its log).

The running sidecar's watchdog (:mod:`._transport`) uses the same look
(:func:`find_listener`, :func:`answers`) to say what it saw when its listener is
no longer its own.

Kubo's configuration is checked the same way, by reading it (``config KEY``):
each problem is one line with the ``ipfs config`` command that fixes it
(:class:`KuboMisconfigured`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import anyio

from pulsarcast_ipfs.addresses import tcp_multiaddr
from pulsarcast_ipfs.kubo import KuboClient, KuboError, KuboStreamMountingDisabled

__all__ = [
    "STREAM_MOUNTING_FIX",
    "KuboMisconfigured",
    "Listener",
    "ProtocolInUse",
    "StartupRefused",
    "answers",
    "check_kubo_config",
    "claim_protocol",
    "find_listener",
]

log = logging.getLogger("pulsarcast.sidecar.preflight")

PROBE_TIMEOUT = 1.0
"""Longest wait for a TCP connection to a listener's target (a live sidecar accepts at once)."""

STREAM_MOUNTING_FIX = (
    "ipfs config --json Experimental.Libp2pStreamMounting true (then restart the ipfs daemon)"
)


class StartupRefused(Exception):
    """The sidecar will not start beside this Kubo; the message is one line for the user."""


class ProtocolInUse(StartupRefused):
    """Another live sidecar (or something else that answers) holds the protocol's listener."""


class KuboMisconfigured(StartupRefused):
    """A setting of Kubo's that the sidecar needs is off; the message says how to fix it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Listener:
    """The ``p2p listen`` registered in Kubo for a protocol, and whether its target answers."""

    target: str
    live: bool

    def describe(self) -> str:
        there = "something answers there" if self.live else "nothing answers there"
        return f"{self.target} ({there})"


async def answers(multiaddr: str) -> bool:
    """Whether something accepts a TCP connection at ``multiaddr`` (closed at once)."""
    try:
        target = tcp_multiaddr(multiaddr)
    except ValueError:
        target = None
    if target is None:
        return True  # not a TCP target: cannot tell, so do not take it over
    host, port, _ = target
    with anyio.move_on_after(PROBE_TIMEOUT):
        try:
            stream = await anyio.connect_tcp(host, port)
        except OSError:
            return False
        await stream.aclose()
        return True
    return False


async def find_listener(kubo: KuboClient, protocol: str) -> Listener | None:
    """The ``p2p listen`` of ``protocol`` in Kubo, probed; None if there is none."""
    for x in await kubo.p2p_ls():
        # a listen: ListenAddress is /p2p/<self>; a forward's is a local address
        if x.protocol == protocol and x.listen_address.startswith("/p2p/"):
            return Listener(target=x.target_address, live=await answers(x.target_address))
    return None


async def check_kubo_config(kubo: KuboClient) -> None:
    """Refuse (:class:`KuboMisconfigured`) if Kubo lacks a setting the sidecar needs."""
    try:
        mounting = await kubo.config_get("Experimental.Libp2pStreamMounting")
    except KuboError as exc:
        log.warning("cannot read Kubo's Experimental.Libp2pStreamMounting (%s)", exc)
        return  # p2p/ls tells next
    if mounting is not True:
        raise KuboMisconfigured(
            f"Kubo's Experimental.Libp2pStreamMounting is {_shown(mounting)}, the sidecar "
            f"needs it on: {STREAM_MOUNTING_FIX}"
        )


def _shown(value: object) -> str:
    return "not set (off)" if value is None else f"{value!r}".lower()


async def claim_protocol(kubo: KuboClient, protocol: str, *, own_target: str) -> Listener | None:
    """Check that no live sidecar serves ``protocol`` on this Kubo, before any change.

    Returns the stale listener that may be taken over (None if there is none);
    raises :class:`ProtocolInUse` naming the live one, and :class:`KuboMisconfigured`
    when Kubo has stream mounting off at run time."""
    await check_kubo_config(kubo)
    try:
        found = await find_listener(kubo, protocol)
    except KuboStreamMountingDisabled:
        raise KuboMisconfigured(
            f"Kubo has libp2p stream mounting off at run time: {STREAM_MOUNTING_FIX}"
        ) from None
    if found is None:
        return None
    if found.live:
        mine = " (this sidecar's --p2p-port)" if found.target == own_target else ""
        raise ProtocolInUse(
            f"another sidecar serves {protocol} on this Kubo: its p2p listener points to "
            f"{found.target}{mine} and something answers there; stop it first, or run this "
            "one beside another Kubo (--kubo-api)"
        )
    return found
