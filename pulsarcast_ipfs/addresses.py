"""Addresses as Kubo users write them: TCP multiaddrs (``/ip4/127.0.0.1/tcp/5150``,
``/ip6/::1/tcp/5150``, ``/dns4/node.example/tcp/5150``, optionally ending in
``/http`` or ``/https``), ``HOST:PORT`` and ``http(s)://HOST:PORT`` URLs.

The SDK and the CLI's ``--api`` take any of them (:func:`http_url`), the sidecar's
``--api`` too (:func:`host_port`), and the sidecar reads the targets of Kubo's
``p2p`` listeners with :func:`tcp_multiaddr`.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["TcpAddress", "host_port", "http_url", "tcp_multiaddr"]

_HOST_PROTOCOLS = ("ip4", "ip6", "dns", "dns4", "dns6")


class TcpAddress(NamedTuple):
    """A TCP multiaddr's host, port and, if it ends in ``/http(s)``, scheme."""

    host: str
    port: int
    scheme: str | None = None


def tcp_multiaddr(text: str) -> TcpAddress | None:
    """``/ip4|ip6|dns|dns4|dns6/HOST/tcp/PORT[/http|/https]``; None if ``text`` is not one
    (a ``ValueError`` if it is one with a bad port)."""
    parts = text.strip().split("/")
    if len(parts) < 5 or parts[0] or parts[1] not in _HOST_PROTOCOLS or parts[3] != "tcp":
        return None
    rest = [p for p in parts[5:] if p]
    if rest not in ([], ["http"], ["https"]):
        return None
    try:
        port = int(parts[4])
    except ValueError:
        raise ValueError(f"{text!r}: port {parts[4]!r} is not a number") from None
    if not 0 <= port <= 65535 or not parts[2]:
        raise ValueError(f"{text!r}: bad host or port")
    return TcpAddress(parts[2], port, rest[0] if rest else None)


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def http_url(text: str) -> str:
    """A multiaddr (as above) or ``HOST:PORT`` as an ``http://HOST:PORT`` URL; a URL
    is returned as it is (without a trailing ``/``)."""
    text = text.strip().rstrip("/")
    if text.startswith("/"):
        addr = tcp_multiaddr(text)
        if addr is None:
            raise ValueError(
                f"{text!r} is not a TCP multiaddr (/ip4/HOST/tcp/PORT, /ip6/..., /dns4/...)"
            )
        return f"{addr.scheme or 'http'}://{_url_host(addr.host)}:{addr.port}"
    if text and "://" not in text:
        return f"http://{text}"
    return text


def host_port(text: str) -> tuple[str, int] | None:
    """The host and port of a multiaddr or of an ``http://HOST:PORT`` URL; None if
    ``text`` is neither (a ``HOST:PORT`` is left to the caller)."""
    if text.startswith("/"):
        addr = tcp_multiaddr(text)
        return None if addr is None else (addr.host, addr.port)
    if text.startswith(("http://", "https://")):
        rest = text.split("://", 1)[1].rstrip("/")
        if "/" in rest:
            return None
        host, sep, port = rest.rpartition(":")
        if not sep or not host or not port.isdigit():
            return None
        return host.strip("[]"), int(port)
    return None
