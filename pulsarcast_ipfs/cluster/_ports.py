"""Loopback ports for the daemons, proxies and sidecars of a cluster."""

from __future__ import annotations

import collections
import random
import socket
from pathlib import Path

__all__ = ["free_port"]

_HANDED_OUT: collections.deque[int] = collections.deque(maxlen=4096)


def _ephemeral_low() -> int:
    """The lowest port the kernel hands out to outgoing connections (Linux), else 32768."""
    try:
        text = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text()
        return int(text.split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


_PORT_RNG = random.SystemRandom()


def free_port() -> int:
    """A free loopback port not handed out recently by this process.

    Ports are chosen before the processes bind them, so two picks in a row may
    get the same free port from the kernel; the second process would then fail
    to bind while requests meant for it reached the first. They are also taken
    *below* the kernel's ephemeral range: a restarted sidecar or proxy binds its
    port again, and in the ephemeral range an outgoing connection of any process
    may hold it meanwhile ("address already in use", seen in CI).
    """
    low = _ephemeral_low()
    for _ in range(2000 if low > 12_000 else 0):
        port = _PORT_RNG.randrange(10_000, low)
        if port in _HANDED_OUT:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED_OUT.append(port)
        return port
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in _HANDED_OUT:
            _HANDED_OUT.append(port)
            return port
