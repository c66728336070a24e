"""``pulsarcast dashboard``: the live dashboard of many sidecars (the cluster view)."""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
from typing import Any

from pulsarcast_ipfs.cli._collect import SIDECARS_FILE, add_source_args, api_sources

__all__ = ["add_parser", "parse_listen", "run"]

_DESCRIPTION = f"""\
Serve the live dashboard of several sidecars at http://HOST:PORT/dashboard: every
topic's tree drawn from what each sidecar reports (its parent and children), nodes
coloured by lag, delivery rates and latency, updated every second without reload.
The sidecars are asked for GET /dashboard/snapshot once a second while a page is
open. Examples:
  pulsarcast dashboard --cluster DIR        (DIR holds a local cluster's {SIDECARS_FILE})
  pulsarcast dashboard --api 127.0.0.1:5050 --api 127.0.0.1:5051
It listens on loopback only: it has no token of its own (docs/dashboard.md)."""

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "dashboard",
        help="serve a live dashboard of many sidecars (trees, lag, rates)",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_source_args(p)
    p.add_argument(
        "--listen",
        default="127.0.0.1:8090",
        metavar="HOST:PORT",
        help="where to serve the page (loopback only; port 0: any free port; "
        "default 127.0.0.1:8090)",
    )
    p.set_defaults(handler=run)


def _err(msg: str) -> int:
    print(f"Error: {msg}", file=sys.stderr)
    return 1


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` on loopback (``[::1]:PORT`` for IPv6); raises ValueError."""
    host, sep, port = text.strip().rpartition(":")
    host = host.strip("[]")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--listen must be HOST:PORT, got {text!r}")
    if host not in LOOPBACK:
        raise ValueError(
            f"--listen {text}: the cluster dashboard serves loopback only "
            "(127.0.0.1, localhost or [::1]); it has no token of its own"
        )
    return host, int(port)


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(64)
    except OSError as exc:
        sock.close()
        raise OSError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


async def _serve(sock: socket.socket, urls: list[str], token: str | None) -> None:
    import anyio
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import RedirectResponse, Response
    from starlette.routing import Route

    from pulsarcast_ipfs.dashboard import PAGE_PATH, ClusterView, dashboard_routes

    view = ClusterView(urls, token=token)
    stop = anyio.Event()

    async def root(request: Request) -> Response:
        return RedirectResponse(PAGE_PATH, status_code=307)

    app = Starlette(routes=[Route("/", root), *dashboard_routes(view.snapshot, stop=stop)])
    server = uvicorn.Server(
        uvicorn.Config(
            app, log_level="warning", lifespan="off", access_log=False, timeout_graceful_shutdown=1
        )
    )
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    print(
        f"dashboard of {len(urls)} sidecars on http://{shown}:{port}{PAGE_PATH} (Ctrl-C stops)",
        flush=True,
    )
    try:
        await server.serve(sockets=[sock])
    finally:
        stop.set()
        await view.aclose()


def run(args: argparse.Namespace) -> int:
    try:
        urls = api_sources(args)
        host, port = parse_listen(args.listen)
        sock = _bind(host, port)
    except (ValueError, OSError) as exc:
        return _err(str(exc))
    token = args.token or os.environ.get("PULSARCAST_API_TOKEN") or None
    try:
        asyncio.run(_serve(sock, urls, token))
    except KeyboardInterrupt:
        pass
    return 0
