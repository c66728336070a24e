"""Addresses as Kubo users write them (:mod:`pulsarcast_ipfs.addresses`): the SDK and
CLI's ``--api``, the sidecar's ``--api`` and ``--kubo-api``, one form or another."""

from __future__ import annotations

import pytest

from pulsarcast_ipfs.addresses import TcpAddress, host_port, http_url, tcp_multiaddr
from sidecar import ConfigError, SidecarConfig


@pytest.mark.parametrize(
    ("text", "addr"),
    [
        ("/ip4/127.0.0.1/tcp/5150", TcpAddress("127.0.0.1", 5150)),
        ("/ip6/::1/tcp/5150", TcpAddress("::1", 5150)),
        ("/dns4/node.example/tcp/80/http", TcpAddress("node.example", 80, "http")),
        ("/dns/node.example/tcp/443/https", TcpAddress("node.example", 443, "https")),
        ("/ip4/127.0.0.1/udp/5150", None),
        ("/ip4/127.0.0.1/tcp/5150/ws", None),
        ("127.0.0.1:5150", None),
    ],
)
def test_tcp_multiaddr(text: str, addr: TcpAddress | None) -> None:
    assert tcp_multiaddr(text) == addr


def test_a_multiaddr_with_a_bad_port_says_so() -> None:
    with pytest.raises(ValueError, match="not a number"):
        tcp_multiaddr("/ip4/127.0.0.1/tcp/http")
    with pytest.raises(ValueError, match="bad host or port"):
        tcp_multiaddr("/ip4/127.0.0.1/tcp/70000")


def test_http_url_and_host_port() -> None:
    assert http_url("/ip6/::1/tcp/5050") == "http://[::1]:5050"
    assert http_url("127.0.0.1:5050") == "http://127.0.0.1:5050"
    assert http_url("https://x.example:1/") == "https://x.example:1"
    with pytest.raises(ValueError, match="not a TCP multiaddr"):
        http_url("/unix/tmp/sock")
    assert host_port("http://[::1]:5050") == ("::1", 5050)
    assert host_port("/dns4/x.example/tcp/7") == ("x.example", 7)
    assert host_port("127.0.0.1:5050") is None  # the caller's own form
    assert host_port("http://x.example/path") is None


@pytest.mark.parametrize(
    ("api", "kept"),
    [
        ("127.0.0.1:5050", "127.0.0.1:5050"),
        ("/ip4/127.0.0.1/tcp/5151", "127.0.0.1:5151"),
        ("http://127.0.0.1:5152", "127.0.0.1:5152"),
        ("/ip6/::1/tcp/5153", "[::1]:5153"),
    ],
)
def test_the_sidecar_api_takes_every_form(api: str, kept: str) -> None:
    """So that one ``PULSARCAST_API`` serves the sidecar and the CLI alike."""
    assert SidecarConfig(api=api).api == kept


def test_the_sidecar_kubo_api_takes_a_multiaddr() -> None:
    assert SidecarConfig(kubo_api="/ip4/127.0.0.1/tcp/5001").kubo_api == "http://127.0.0.1:5001"
    with pytest.raises(ConfigError, match="kubo_api"):
        SidecarConfig(kubo_api="/ip4/127.0.0.1/udp/5001")
