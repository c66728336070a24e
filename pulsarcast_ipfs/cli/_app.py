"""The application commands: ``pulsarcast topic|sub|unsub|pub|history|status``.

They talk to a running ``pulsarcast-sidecar`` through the SDK
(:mod:`pulsarcast_ipfs.sdk`, docs/http-api.md) and feel like ``ipfs``: terse
output on stdout (``pub`` prints the event CID, ``topic create`` the topic CID),
``--json`` for scripts, errors as one ``Error: …`` line on stderr with a
non-zero exit code (1 for a refusal or an unreachable sidecar, 2 for bad usage).

``--api URL`` and ``--token`` (env ``PULSARCAST_API``, ``PULSARCAST_API_TOKEN``)
are accepted before the command (``pulsarcast --api … pub …``) and after it; the
address may also be ``HOST:PORT`` or a Kubo-style multiaddr (``/ip4/127.0.0.1/tcp/5050``).

One flag name per meaning: ``--limit N`` stops after N items (``sub``, ``history``),
``--after SEQ`` resumes deliveries after a delivery sequence number (``sub``),
``--cursor CID`` pages a history after an event (``history``). Old spellings
(``sub -n``/``--count``, ``history --after``/``--before``) are hidden aliases.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import functools
import json
import re
import sys
from collections.abc import Callable
from typing import Any, Literal

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from pulsarcast_ipfs.cli._output import table_console
from pulsarcast_ipfs.sdk import (
    ApiError,
    AttributeValue,
    Client,
    ClientConfig,
    Delivery,
    EventLinking,
    HistoryOrder,
    InvalidResponse,
    NotAcknowledged,
    NotAllowed,
    PeerSet,
    SdkError,
    SidecarUnavailable,
    Topic,
    Unauthorized,
)

__all__ = ["add_global_options", "add_parsers", "short_peer"]

Handler = Callable[[argparse.Namespace, Client], int]


def add_global_options(parser: argparse.ArgumentParser, *, suppress: bool = False) -> None:
    """``--api`` and ``--token``; on sub-commands with ``suppress`` so that a value
    given before the command is not overwritten by the sub-command's default."""
    default: Any = argparse.SUPPRESS if suppress else None
    group = parser.add_argument_group("sidecar connection")
    group.add_argument(
        "--api",
        metavar="URL",
        default=default,
        help="the sidecar's HTTP API: a URL, HOST:PORT or a multiaddr such as "
        "/ip4/127.0.0.1/tcp/5050 (env PULSARCAST_API; default http://127.0.0.1:5050)",
    )
    group.add_argument(
        "--token",
        metavar="TOKEN",
        default=default,
        help="bearer token, if the sidecar wants one (env PULSARCAST_API_TOKEN)",
    )


def _command(sub: Any, name: str, handler: Handler, **kw: Any) -> argparse.ArgumentParser:
    """A sub-command of ``sub`` (a ``pulsarcast`` command or a ``topic`` action) that
    talks to the sidecar: it takes the connection options and runs ``handler``."""
    p: argparse.ArgumentParser = sub.add_parser(name, **kw)
    add_global_options(p, suppress=True)
    p.set_defaults(handler=lambda args: _run(args, handler))
    return p


def add_parsers(sub: Any, *, root: argparse.ArgumentParser) -> None:
    """Register ``topic``, ``sub``, ``unsub``, ``pub``, ``history`` and ``status``."""
    add_global_options(root)

    command = functools.partial(_command, sub)

    # topic create|show|update
    topic: argparse.ArgumentParser = sub.add_parser(
        "topic",
        help="create, show and update topics",
        description="Create, show and update topics (docs/protocol.md §5).",
    )
    actions = topic.add_subparsers(dest="action", metavar="ACTION", required=True)

    action = functools.partial(_command, actions)
    create = action(
        "create",
        _topic_create,
        help="create a topic; prints its CID",
        description="Create a topic rooted at this node and print its CID.",
    )
    create.add_argument("name", metavar="NAME", help="the topic's name")
    create.add_argument(
        "--parent",
        metavar="CID",
        help="make it a sub-topic / new version of this topic (shares its meta topic)",
    )
    _topic_options(create)

    show = action(
        "show",
        _topic_show,
        help="show a topic descriptor",
        description="Show a topic descriptor (fetched from IPFS if this node lacks it).",
    )
    show.add_argument("cid", metavar="CID")
    show.add_argument("--json", action="store_true", help="machine-readable output")

    update = action(
        "update",
        _topic_update,
        help="publish a new version of a topic; prints its CID",
        description="Publish a new version of a topic on its meta topic; print the new CID.",
    )
    update.add_argument("cid", metavar="CID", help="the topic (any version)")
    _topic_options(update)

    # sub
    s = command(
        "sub",
        _sub,
        help="subscribe and print deliveries as they come",
        description=(
            "Subscribe to TOPIC and print its deliveries as they come, one per line, until "
            "Ctrl-C. Each sub is a consumer of its own, with its own filter and cursor, "
            "beside other applications on the same sidecar (docs/http-api.md "
            '"Consumers"). Without --name it is closed on exit, and the node leaves the '
            "topic with its last consumer; with --name it is durable and the next "
            "sub --name NAME resumes from its cursor."
        ),
    )
    s.add_argument("topic", metavar="TOPIC", help="the topic CID")
    s.add_argument(
        "--where",
        metavar="FILTER",
        help="deliver only the events this filter matches, e.g. "
        '\'ups >= 10 and user = "alice"\' (grammar: docs/http-api.md "Attributes and '
        'filters"); the consumer keeps it (a named one until sub --name is run again)',
    )
    s.add_argument(
        "--name",
        metavar="NAME",
        help="a durable consumer: its filter and cursor are kept by the sidecar, also "
        "across restarts, and sub --name NAME resumes where it stopped (1-64 of "
        "A-Z a-z 0-9 _ . -)",
    )
    s.add_argument(
        "--after", metavar="SEQ", type=int, help="first replay every delivery after this seq"
    )
    s.add_argument("--no-follow", action="store_true", help="stop after the replay")
    s.add_argument("--limit", dest="count", type=int, metavar="N", help="stop after N deliveries")
    s.add_argument("-n", "--count", dest="count", type=int, help=argparse.SUPPRESS)  # old name
    s.add_argument(
        "-l", "--long", action="store_true", help="also print seq, CID, author and recovered"
    )
    s.add_argument("--json", action="store_true", help="one JSON delivery per line")
    s.add_argument(
        "--fast",
        action="store_true",
        help="also join the fast group of each publisher of the topic: it sends its "
        "events here directly, in two hops at most",
    )

    # unsub
    u = command(
        "unsub",
        _unsub,
        help="unsubscribe from a topic",
        description="Unsubscribe this node from TOPIC (the API's unsubscribe, the SDK's "
        "unsubscribe()): it leaves the topic's tree and receives no more of its events.",
    )
    u.add_argument("topic", metavar="TOPIC", help="the topic CID")
    u.add_argument("--json", action="store_true", help="machine-readable output")

    # pub
    p = command(
        "pub",
        _pub,
        help="publish an event; prints its CID",
        description=(
            "Publish DATA (or standard input, with - or no DATA) on TOPIC and print the "
            "event CID. If this node may only request to publish, prints the request id. "
            "From standard input one trailing newline is dropped (echo x | pulsarcast pub "
            "T publishes x); --raw keeps every byte. A payload is at most 512 KiB "
            "(524288 bytes)."
        ),
    )
    p.add_argument("topic", metavar="TOPIC", help="the topic CID")
    p.add_argument("data", metavar="DATA", nargs="?", default="-", help="the payload, or -")
    p.add_argument(
        "--raw",
        action="store_true",
        help="publish standard input byte for byte (keep its trailing newline)",
    )
    p.add_argument("--parent", metavar="CID", help="the parent event (CUSTOM linking)")
    p.add_argument(
        "--attr",
        metavar="NAME=VALUE",
        action="append",
        default=[],
        help="an attribute of the event, repeatable (at most 16): a VALUE that reads as a "
        "number is a number (12, -0.5, 1e3), any other is a string; NAME='\"12\"' (double "
        "quotes, JSON escapes) forces a string",
    )
    p.add_argument(
        "--ack",
        type=ack_level,
        default=None,
        metavar="LEVEL",
        help="answer once this many OTHER nodes hold the event (stored and pinned), or "
        "'local': once it is in this node (the sidecar's default: 1)",
    )
    p.add_argument(
        "--ack-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="wait at most this long for the holders (the sidecar's default: 10); then "
        "not_acknowledged: the event exists and is offered on",
    )
    p.add_argument(
        "--idempotency-key",
        metavar="KEY",
        help="name this publish: the same KEY again makes no second event (a retry)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")

    # history
    h = command(
        "history",
        _history,
        help="list a topic's events, newest first",
        description="List a topic's events in the history order (Lamport clock, then "
        "CID), the same on every node: newest first, or oldest first with --oldest. "
        "A node that never subscribed to the topic looks up its holders first.",
    )
    h.add_argument("topic", metavar="TOPIC", help="the topic CID")
    h.add_argument(
        "--limit", type=int, default=50, metavar="N", help="at most N events (default 50)"
    )
    h.add_argument("--oldest", action="store_true", help="oldest first")
    h.add_argument(
        "--cursor",
        dest="after",
        metavar="CID",
        help="start after this event in the chosen order (a page cursor: the last CID "
        "of the previous page)",
    )
    h.add_argument("--after", "--before", dest="after", help=argparse.SUPPRESS)  # old names
    h.add_argument(
        "--where",
        metavar="FILTER",
        help='only the events this filter matches (docs/http-api.md "Attributes and filters")',
    )
    h.add_argument(
        "--json", action="store_true", help="one JSON event per line (with parents, clock)"
    )

    # status
    st = command(
        "status",
        _status,
        help="show the sidecar, its Kubo and its topics' tree positions",
        description="Show this node's peer ID, versions and every topic's tree position.",
    )
    st.add_argument("--json", action="store_true", help="machine-readable output")


def _topic_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--allowed-publisher",
        metavar="PEER",
        action="append",
        default=[],
        help="allow this peer to publish (repeatable); restricts publishing to the "
        "listed peers and this node",
    )
    p.add_argument(
        "--restrict",
        action="store_true",
        help="only allowed publishers may publish (this node is always one)",
    )
    rtp = p.add_mutually_exclusive_group()
    rtp.add_argument(
        "--request-to-publish",
        metavar="PEER",
        nargs="*",
        default=None,
        help="let others request to publish: anyone, or only the peers listed",
    )
    rtp.add_argument(
        "--no-request-to-publish",
        action="store_true",
        help="refuse requests to publish",
    )
    p.add_argument(
        "--linking",
        choices=[e.value for e in EventLinking],
        help="how events choose their parent (default LAST_SEEN)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")


# -- running a command -------------------------------------------------------------------


def _fail(message: str, code: int = 1) -> int:
    Console(stderr=True, highlight=False, soft_wrap=True).print(
        f"[bold red]Error:[/bold red] {message}", markup=True
    )
    return code


def _run(args: argparse.Namespace, handler: Handler) -> int:
    try:
        config = ClientConfig.from_env(
            api=getattr(args, "api", None), token=getattr(args, "token", None)
        )
    except ValueError as exc:
        return _fail(str(exc), 2)
    try:
        with Client(config=config) as client:
            return handler(args, client)
    except SidecarUnavailable as exc:
        return _fail(
            f"sidecar not reachable at {exc.api} ({exc.reason}) — is pulsarcast-sidecar running?"
        )
    except Unauthorized as exc:
        return _fail(
            f"the sidecar refused the token ({exc.message}); pass --token or set "
            "PULSARCAST_API_TOKEN"
        )
    except NotAllowed as exc:
        return _fail(f"not allowed: {exc.message}")
    except NotAcknowledged as exc:
        held = ", ".join(exc.holders) or "none"
        return _fail(f"{exc.message} (not_acknowledged; holders: {held})")
    except ApiError as exc:
        return _fail(f"{exc.message} ({exc.code})")
    except InvalidResponse as exc:
        return _fail(f"unexpected answer from the sidecar: {exc}")
    except SdkError as exc:
        return _fail(str(exc))
    except (ValueError, TypeError) as exc:
        return _fail(str(exc), 2)
    except BrokenPipeError:
        return 0


def _emit(doc: Any) -> None:
    print(json.dumps(doc, ensure_ascii=False), flush=True)


def short_peer(peer: str | None) -> str:
    """``12D3KooWAbc…xyz123``-style abbreviation for tables."""
    if not peer:
        return "-"
    return peer if len(peer) <= 16 else f"{peer[:8]}…{peer[-6:]}"


def _text(payload: bytes) -> str:
    """The payload as printed: its UTF-8 text as it is (a text of several lines prints
    as several lines; ``--json`` for exact framing), or ``base64:…`` when it is not text."""
    try:
        return payload.decode("utf-8")
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(payload).decode("ascii")


# -- topic -------------------------------------------------------------------------------


def _policies(args: argparse.Namespace, client: Client) -> dict[str, Any]:
    opts: dict[str, Any] = {}
    if args.restrict or args.allowed_publisher:
        me = client.status().peer_id
        peers = list(dict.fromkeys([me, *args.allowed_publisher]))
        opts["allowed_publishers"] = PeerSet(enabled=True, peers=tuple(peers))
    if args.no_request_to_publish:
        opts["request_to_publish"] = PeerSet(enabled=False)
    elif args.request_to_publish is not None:
        opts["request_to_publish"] = PeerSet.of(args.request_to_publish or True)
    if args.linking:
        opts["event_linking"] = EventLinking(args.linking)
    return opts


def _print_topic_cid(args: argparse.Namespace, topic: Topic) -> int:
    if args.json:
        _emit(topic.to_json())
    else:
        print(topic.cid)
    return 0


def _topic_create(args: argparse.Namespace, client: Client) -> int:
    topic = client.create_topic(args.name, parent=args.parent, **_policies(args, client))
    return _print_topic_cid(args, topic)


def _topic_update(args: argparse.Namespace, client: Client) -> int:
    topic = client.update_topic(args.cid, **_policies(args, client))
    return _print_topic_cid(args, topic)


def _peer_set(ps: PeerSet, off: str, on_empty: str) -> str:
    if not ps.enabled:
        return off
    return ", ".join(ps.peers) if ps.peers else on_empty


def _topic_show(args: argparse.Namespace, client: Client) -> int:
    topic = client.get_topic(args.cid)
    if args.json:
        _emit(topic.to_json())
        return 0
    rows = [
        ("name", topic.name),
        ("cid", topic.cid),
        ("root", topic.root_cid),
        ("latest", topic.latest or topic.cid),
        ("author", topic.author),
        ("parent", topic.parent or "-"),
        ("created", topic.created.isoformat()),
        ("protocol", topic.protocol_version),
        ("publishers", _peer_set(topic.allowed_publishers, "anyone", "nobody")),
        ("requests", _peer_set(topic.request_to_publish, "refused", "anyone")),
        ("linking", topic.event_linking.value),
    ]
    rows += [(f"#{name}", cid) for name, cid in sorted(topic.sub_topics.items())]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    return 0


# -- sub / pub / history -----------------------------------------------------------------


def _delivery_line(d: Delivery, long: bool) -> str:
    if not long:
        return _text(d.payload)
    mark = " (recovered)" if d.recovered else ""
    return f"{d.seq}\t{d.cid}\t{d.event.author}{mark}\t{_text(d.payload)}"


def _sub(args: argparse.Namespace, client: Client) -> int:
    if args.count is not None and args.count < 1:
        raise ValueError("--count must be at least 1")
    consumer = client.open_consumer(
        args.topic, filter=args.where, name=args.name, fast=args.fast, after=args.after
    )
    err = Console(stderr=True, highlight=False)
    if not args.json:
        where = f" where {escape(args.where)}" if args.where is not None else ""
        who = f" as {escape(consumer.id)}, after seq {consumer.cursor}" if args.name else ""
        err.print(
            f"[dim]subscribed to {consumer.topic}{where}{who}; Ctrl-C to stop[/dim]",
            markup=True,
        )
    last: int | None = args.after
    seen = 0
    try:
        for d in client.deliveries(consumer=consumer.id, follow=not args.no_follow):
            last = d.seq
            if args.json:
                _emit(d.to_json())
            else:
                print(_delivery_line(d, args.long), flush=True)
            seen += 1
            if args.count is not None and seen >= args.count:
                break
    except KeyboardInterrupt:
        if args.name is not None:
            err.print(f"[dim]stopped; sub {args.topic} --name {args.name} resumes[/dim]")
        elif last is not None:
            err.print(
                f"[dim]stopped after seq {last} (sub --name NAME keeps a consumer that "
                "resumes where it stopped)[/dim]"
            )
        return 130
    finally:
        if args.name is None:  # an anonymous consumer ends with this process
            with contextlib.suppress(SdkError):
                client.close_consumer(consumer.id)
    return 0


def stdin_payload(raw: bytes, *, keep: bool = False) -> bytes:
    """What ``pub`` publishes from standard input: without the one trailing newline
    (``\n`` or ``\r\n``) that ``echo`` and editors add, unless ``keep`` (``--raw``)."""
    if keep:
        return raw
    if raw.endswith(b"\r\n"):
        return raw[:-2]
    return raw[:-1] if raw.endswith(b"\n") else raw


def _unsub(args: argparse.Namespace, client: Client) -> int:
    root = client.unsubscribe(args.topic)
    if args.json:
        _emit({"topic": root, "subscribed": False})
    else:
        Console(stderr=True, highlight=False).print(f"[dim]unsubscribed from {root}[/dim]")
    return 0


def _pub(args: argparse.Namespace, client: Client) -> int:
    data: bytes | str
    if args.data == "-":
        data = stdin_payload(sys.stdin.buffer.read(), keep=args.raw)
    else:
        data = args.data
    attributes = parse_attrs(args.attr)
    out = client.publish(
        args.topic,
        data,
        parent=args.parent,
        attributes=attributes or None,
        ack=args.ack,
        ack_timeout=args.ack_timeout,
        idempotency_key=args.idempotency_key,
    )
    if args.json:
        _emit(out.to_json())
    elif out.published:
        print(out.event)
    else:
        Console(stderr=True, highlight=False).print(
            "[dim]this node may not publish on the topic: request to publish sent up the tree[/dim]"
        )
        print(out.request_id or "requested")
    return 0


def ack_level(text: str) -> int | Literal["local"]:
    """``--ack``: ``local`` or a number of other nodes from 1 to 64."""
    if text == "local":
        return "local"
    if not text.isdigit() or not 1 <= int(text) <= 64:
        raise argparse.ArgumentTypeError(
            f"'local' or a number of other nodes from 1 to 64, not {text!r}"
        )
    return int(text)


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?\Z")


def parse_attr_value(text: str) -> AttributeValue:
    """``--attr``'s VALUE: a number if it reads as one (``12``, ``-0.5``, ``1e3``; with
    ``.`` or an exponent a float), a JSON string if double-quoted, else the text."""
    if _NUMBER.match(text):
        return float(text) if any(c in text for c in ".eE") else int(text)
    if len(text) >= 2 and text[0] == text[-1] == '"':
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"--attr: bad quoted string {text}: {exc.msg}") from None
        if isinstance(value, str):
            return value
    return text


def parse_attrs(items: list[str]) -> dict[str, AttributeValue]:
    """``--attr NAME=VALUE`` options as a map (the sidecar checks names and values)."""
    out: dict[str, AttributeValue] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ValueError(f"--attr takes NAME=VALUE, got {item!r}")
        if name in out:
            raise ValueError(f"--attr: {name!r} given twice")
        out[name] = parse_attr_value(value)
    return out


def _history(args: argparse.Namespace, client: Client) -> int:
    if args.limit < 1:
        raise ValueError("--limit must be at least 1")
    order: HistoryOrder = "oldest" if args.oldest else "newest"
    left = args.limit
    after: str | None = args.after
    complete = True
    missing = 0
    while left > 0:
        page = client.history(
            args.topic, order=order, after=after, limit=min(left, 500), where=args.where
        )
        complete, missing = complete and page.complete, max(missing, len(page.missing))
        for event in page.events[:left]:
            if args.json:
                _emit(event.to_json())
            else:
                print(f"{event.cid}\t{event.created:%Y-%m-%d %H:%M:%S}\t{_text(event.payload)}")
        left -= len(page.events)
        # a filtered page may be empty and still lead on (next)
        if page.next is None or (not page.events and args.where is None) or page.next == after:
            break
        after = page.next
    if not complete:
        plural = "s" if missing != 1 else ""
        more = f" ({missing} linked event{plural} still being fetched)" if missing else ""
        Console(stderr=True, highlight=False).print(
            f"[yellow]the history is not complete yet{more}: ask again later[/yellow]"
        )
    return 0


# -- status ------------------------------------------------------------------------------


def _status(args: argparse.Namespace, client: Client) -> int:
    status = client.status()
    if args.json:
        _emit(status.to_json())
        return 0
    print(f"peer ID   {status.peer_id}")
    print(f"sidecar   {status.version} (API {status.api})")
    print(f"kubo      {status.kubo_version}")
    if not status.topics:
        print("topics    none")
        return 0
    table = Table(title=f"topics ({len(status.topics)})", title_justify="left")
    table.add_column("name", overflow="fold")
    table.add_column("topic", overflow="fold", min_width=12)
    table.add_column("role", no_wrap=True)
    table.add_column("parent", overflow="fold", min_width=12)
    table.add_column("children", overflow="fold", min_width=12)
    table.add_column("subscribed", no_wrap=True)
    for t in status.topics:
        role = f"{t.role} (acting root)" if t.acting_root else t.role
        subscribed = "yes" if t.subscribed else "no"
        if t.subscribed and t.filter is not None:
            subscribed = f"yes, where {t.filter}"
        table.add_row(
            escape(t.name),
            t.root_cid,
            role,
            t.parent or "-",
            "\n".join(t.children) or "-",
            escape(subscribed),
        )
    table_console().print(table)
    return 0
