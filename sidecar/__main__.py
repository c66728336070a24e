"""``pulsarcast-sidecar``: run the Pulsarcast sidecar beside a Kubo daemon."""

from __future__ import annotations

import argparse
import asyncio
import functools
import importlib.util
import logging
import signal
import socket
import sys
from pathlib import Path

import anyio

from pulsarcast_ipfs.core._descriptors import set_decode_cache_size
from pulsarcast_ipfs.kubo import KuboError, KuboStreamMountingDisabled, KuboUnavailable

from ._api import bind_api, serve_api
from ._config import ANNOUNCE_MODES, ConfigError, SidecarConfig, load_config
from ._driver import Driver
from ._preflight import STREAM_MOUNTING_FIX, StartupRefused
from ._state import StateError
from ._version import VERSION

log = logging.getLogger("pulsarcast.sidecar")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pulsarcast-sidecar",
        description=(
            "Run the Pulsarcast sidecar beside a Kubo daemon: topic-based pub/sub with "
            "persistence and eventual delivery over IPFS. Configuration: --config FILE "
            "(TOML), PULSARCAST_* environment variables, then these flags."
        ),
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {VERSION}")
    p.add_argument("--config", type=Path, help="TOML configuration file")
    p.add_argument(
        "--kubo-api",
        help="Kubo RPC API: URL or multiaddr (default http://127.0.0.1:5001)",
    )
    p.add_argument(
        "--api", help="HOST:PORT (or multiaddr) of the HTTP API (default 127.0.0.1:5050)"
    )
    p.add_argument("--api-token", help="bearer token (required off loopback)")
    p.add_argument("--state-dir", help="state directory (default ~/.pulsarcast)")
    p.add_argument("--p2p-port", type=int, help="local TCP port behind `p2p listen` (default free)")
    p.add_argument("--metrics-dir", help="metric records directory (default <state-dir>/metrics)")
    p.add_argument("--run", help="run identifier written into metric records")
    p.add_argument("--system", help="system name written into metric records")
    p.add_argument(
        "--metrics-topics",
        type=int,
        help='topics labelled by name in /metrics; later ones count as topic="other" '
        "(default 32, at most 1000)",
    )
    p.add_argument(
        "--routing-k",
        type=int,
        help="keep at most K known peers per k-bucket (default: all; 1-2 makes "
        "deeper trees in small clusters)",
    )
    p.add_argument("--routing-interval", type=float, help="seconds between routing-table reads")
    p.add_argument(
        "--resource-interval", type=float, help="seconds between resource samples (0: never)"
    )
    p.add_argument("--kubo-pid", type=int, help="Kubo's pid, for its resource samples")
    p.add_argument("--ping-interval", type=float, help="tree keep-alive interval (seconds)")
    p.add_argument(
        "--require-signatures",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="sign what this node authors and publishes, and drop unsigned, forged or "
        "tampered events at this hop (default: on; off only for a network of "
        "1.0.0 peers)",
    )
    p.add_argument(
        "--delegate-ttl",
        type=float,
        help="seconds a delegated signing key is valid: Kubo signs one delegation and the "
        "sidecar then signs its own events in memory, renewing at half-time (default "
        "86400; 0: every event signed through Kubo key/sign)",
    )
    p.add_argument(
        "--announce",
        choices=ANNOUNCE_MODES,
        help="how own blocks are announced in the DHT: pinning (Kubo's provider announces "
        "them) or pinning plus provide/once; auto (default) reads Kubo's Provide.Strategy",
    )
    p.add_argument(
        "--topic-announcers",
        type=int,
        help="subscribers per topic, besides its author, that announce it in the DHT: "
        "those closest to the topic among its tree's members (default 4; 0: all)",
    )
    p.add_argument(
        "--retain-events",
        type=int,
        help="events kept (pinned) per subscribed topic, newest first (default 10000)",
    )
    p.add_argument(
        "--retain-age",
        type=float,
        help="seconds an event is kept after its creation (default 2592000: 30 days)",
    )
    p.add_argument(
        "--retain-bytes",
        type=int,
        help="bytes of events kept per subscribed topic (default 67108864: 64 MiB)",
    )
    p.add_argument(
        "--retain-pin",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="keep the retained events pinned, by one recursive pin of the retention "
        "index (default: on); --no-retain-pin keeps them in Kubo's blockstore unpinned, "
        "where Kubo's garbage collection may remove them",
    )
    p.add_argument(
        "--uvloop",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run on uvloop's event loop when it is installed (default: on); "
        "--no-uvloop runs on asyncio's own",
    )
    p.add_argument(
        "--tree-filters",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="tell tree parents what this node's subtree wants (its subscriptions' "
        "filters) and send events down only where they are wanted (default: on; every "
        "node of a cluster alike)",
    )
    p.add_argument(
        "--flat-fanout",
        type=int,
        help="flat trees: nodes below the root's children move up to the root while it "
        "has fewer than this many (default 64, at most 64; 0: off)",
    )
    p.add_argument(
        "--group-capacity",
        type=int,
        help="fast groups: peers this node sends each of its events to directly, helpers "
        "included; beyond, members help (default 16; 0: no groups)",
    )
    p.add_argument(
        "--group-spare",
        type=int,
        help="fast groups: members of another publisher's group this node offers to "
        "forward to as a helper (default 8, at most 64; 0: never)",
    )
    p.add_argument(
        "--group-refresh",
        type=float,
        help="fast groups: seconds between membership refreshes (default 10; a membership "
        "expires after three)",
    )
    p.add_argument(
        "--consumer-grace",
        type=float,
        metavar="SECONDS",
        help="seconds an anonymous consumer with no open delivery stream is kept before "
        'it is closed (default 60; docs/http-api.md "Consumers")',
    )
    p.add_argument(
        "--consumer-retention",
        type=float,
        metavar="SECONDS",
        help="seconds a named (durable) consumer with no open stream is kept "
        "(default 604800: 7 days)",
    )
    p.add_argument(
        "--witnesses",
        type=int,
        help="relays that lie: peers asked to announce a topic's events, so that a parent "
        "withholding them is noticed and left (default 2, at most 8; 0: off)",
    )
    p.add_argument(
        "--penalty-ttl",
        type=float,
        metavar="SECONDS",
        help="relays that lie: how long a peer caught lying is avoided and its JOINs "
        "refused (default 600)",
    )
    p.add_argument(
        "--misbehave",
        metavar="SPEC",
        help="TEST ONLY: be a relay that lies (blackhole, silent, censor=PEER or "
        "delay=SECONDS), or drop the N-th delivery (lose=N, a planted bug for the "
        "checker's test); refused unless PULSARCAST_ALLOW_MISBEHAVE=1 is set",
    )
    p.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    return p


def config_from_args(argv: list[str] | None = None) -> SidecarConfig:
    args = vars(build_parser().parse_args(argv))
    file = args.pop("config")
    return load_config(file=file, flags=args)


async def _run(config: SidecarConfig, api: socket.socket) -> str | None:
    """Run until stopped, serving the API on ``api`` (bound ahead); the reason if the
    sidecar stopped on its own (else None)."""
    set_decode_cache_size(config.decode_cache)  # one node per process: a small memo
    driver = Driver(config)

    async def started() -> None:
        # logged once running: a refused start prints its one line and nothing else
        await driver.ready.wait()
        loop = type(asyncio.get_running_loop())
        log.info("event loop: %s.%s", loop.__module__, loop.__qualname__)

    async def signals() -> None:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as received:
            async for sig in received:
                log.info("received %s: stopping", signal.Signals(sig).name)
                driver.stop()
                return

    async with anyio.create_task_group() as tg:
        tg.start_soon(signals)
        tg.start_soon(started)
        await driver.run(services=[functools.partial(serve_api, sock=api)])
        tg.cancel_scope.cancel()
    return driver.fatal


def _first_leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _loop_options(config: SidecarConfig) -> dict[str, bool]:
    """anyio's asyncio backend options: uvloop when configured and installed."""
    return {"use_uvloop": config.uvloop and importlib.util.find_spec("uvloop") is not None}


def main(argv: list[str] | None = None) -> int:
    try:
        config = config_from_args(argv)
    except ConfigError as exc:
        print(f"pulsarcast-sidecar: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=config.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    for noisy in ("httpx", "httpcore", "uvicorn.error"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLogger().level))
    # Bound first: a busy port fails before anything changes in Kubo.
    try:
        api = bind_api(config.api_host, config.api_port)
    except OSError as exc:
        print(f"pulsarcast-sidecar: {exc}", file=sys.stderr)
        return 1
    try:
        try:
            fatal = anyio.run(_run, config, api, backend_options=_loop_options(config))
        except BaseExceptionGroup as group:
            raise _first_leaf(group) from group
    except (StartupRefused, StateError, OSError) as exc:
        print(f"pulsarcast-sidecar: {exc}", file=sys.stderr)
        return 1
    except KuboError as exc:
        hint = ""
        if isinstance(exc, KuboUnavailable):
            hint = " (is the ipfs daemon running?)"
        elif isinstance(exc, KuboStreamMountingDisabled):
            hint = f"; fix: {STREAM_MOUNTING_FIX}"
        print(f"pulsarcast-sidecar: Kubo at {config.kubo_api}: {exc}{hint}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a bug: one line, the traceback in the log at debug level
        log.debug("unexpected error", exc_info=exc)
        print(
            f"pulsarcast-sidecar: unexpected error: {type(exc).__name__}: {exc} "
            "(--log-level debug shows where)",
            file=sys.stderr,
        )
        return 3
    finally:
        api.close()
    if fatal is not None:
        print(f"pulsarcast-sidecar: {fatal}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
