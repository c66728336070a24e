"""The cluster's port allocation, on its own: no Kubo daemon needed."""

from __future__ import annotations

from pulsarcast_ipfs.cluster._ports import free_port


def test_free_ports_are_never_handed_out_twice() -> None:
    """Ports are picked before their processes bind them; 2,000 picks from the
    kernel's ephemeral range would repeat some (birthday bound) without the memory
    of what was handed out — a repeat made one sidecar answer for another."""
    ports = [free_port() for _ in range(2000)]
    assert len(set(ports)) == len(ports)
