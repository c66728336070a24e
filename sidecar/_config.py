"""Sidecar configuration: defaults < TOML file < ``PULSARCAST_*`` environment < flags.

The defaults work beside a default ``ipfs daemon`` (docs/http-api.md, last section):
Kubo's RPC API at ``http://127.0.0.1:5001``, the application API on
``127.0.0.1:5050``, state in ``~/.pulsarcast``.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Final

from pulsarcast_ipfs.addresses import host_port, http_url
from pulsarcast_ipfs.testing._misbehave import (
    ALLOW_ENV,
    Misbehaviour,
    MisbehaviourError,
    parse_misbehaviour,
)

from ._announce import TOPIC_ANNOUNCERS

__all__ = ["ConfigError", "SidecarConfig", "load_config", "parse_hostport"]

ENV_PREFIX = "PULSARCAST_"
ANNOUNCE_MODES = ("auto", "pin", "provide-once")


class ConfigError(ValueError):
    """The configuration (file, environment or flags) is invalid; the message says where."""


def parse_hostport(text: str, what: str = "address") -> tuple[str, int]:
    """``"127.0.0.1:5050"`` → ``("127.0.0.1", 5050)``, also from ``http://127.0.0.1:5050``
    or ``/ip4/127.0.0.1/tcp/5050`` (:mod:`pulsarcast_ipfs.addresses`); a clear
    :class:`ConfigError` otherwise."""
    try:
        found = host_port(text)
    except ValueError as exc:
        raise ConfigError(f"{what}: {exc}") from None
    if found is not None:
        return found
    host, sep, port = text.rpartition(":")
    if not sep or not host:
        raise ConfigError(f"{what}: expected HOST:PORT, got {text!r}")
    try:
        number = int(port)
    except ValueError:
        raise ConfigError(f"{what}: port {port!r} is not a number") from None
    if not 0 <= number <= 65535:
        raise ConfigError(f"{what}: port {number} out of range")
    return host.strip("[]"), number


DEFAULT_DELEGATE_TTL: Final = 24 * 3600.0
DELEGATE_TTL_MIN: Final = 600.0
"""Shortest delegation: renewed at half-time, and unused in its last minute."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SidecarConfig:
    """Everything the sidecar needs to run (all times in seconds)."""

    kubo_api: str = "http://127.0.0.1:5001"
    api: str = "127.0.0.1:5050"
    api_token: str | None = None
    state_dir: Path = Path("~/.pulsarcast")
    p2p_port: int = 0
    """Local TCP port behind ``p2p listen`` (0: a free port)."""
    metrics_dir: Path | None = None
    """Metric records (default ``<state-dir>/metrics``)."""
    run: str = "default"
    metrics_topics: int = 32
    """Topics labelled by their own name in ``/metrics``; later ones are counted under
    ``topic="other"`` (the bound on label cardinality, :mod:`._prometheus`)."""
    system: str = "pulsarcast"
    routing_k: int | None = None
    """Keep at most this many known peers per k-bucket (by common-prefix length with
    this node) when feeding the core's closest-peer routing. ``None``: every peer of
    Kubo's routing table plus the connected peers. A small value (1-2) gives deeper
    trees in small clusters; joins still always make progress towards the author."""
    routing_interval: float = 5.0
    """How often Kubo's routing table is read (``stats/dht`` + ``swarm/peers``)."""
    resource_interval: float = 10.0
    """How often a ``resource_sample`` record is written (0: never)."""
    kubo_pid: int | None = None
    """Kubo's process id, for its resource samples (optional)."""
    max_body: int = 2 * 1024 * 1024
    """Largest accepted HTTP request body (bytes)."""
    connect_attempts: int = 5
    """Bounded retries of a neighbour connection before the neighbour is given up."""
    connect_backoff: float = 0.2
    """First retry delay; doubled on every attempt (capped at 5 s)."""
    fetch_timeout: float = 10.0
    announce: str = "auto"
    """How this node's own blocks get into the DHT (docs/protocol.md §5 "Persistence";
    docs/sidecar.md "Providing"). ``pin``: pin them and let Kubo announce them, as
    its ``Provide.Strategy`` ``pinned``, ``roots`` or ``all`` does at once;
    ``provide-once``: pin them and also call ``provide/once`` (for strategies that
    would not announce a pin, such as ``mfs``); ``auto``: read Kubo's
    ``Provide.Strategy`` at start and choose (``provide-once`` if it cannot be read)."""
    topic_announcers: int = TOPIC_ANNOUNCERS
    """Subscribers per topic, besides its author, that announce it in the DHT: the
    ones whose peer IDs are closest to the topic among the members its root lists
    (docs/sidecar.md "Providing", ``sidecar._announce``). 0: every subscriber."""
    delivery_log_max: int = 100_000
    """Deliveries kept in the persisted log (older ones are rotated out)."""
    decode_cache: int = 256
    """Decoded descriptors the process memoises by their bytes (0: none). The core's
    default (8,192) suits a process that runs many nodes; one node gains little from
    it and would hold ~35 MiB of decoded events (docs/sidecar.md "Memory")."""
    consumer_grace: float = 60.0
    """An anonymous consumer (docs/http-api.md "Consumers") with no open delivery
    stream for this many seconds went away without closing: it is closed, and the
    node leaves the topic with its last consumer."""
    consumer_retention: float = 7 * 24 * 3600.0
    """A named (durable) consumer with no open stream for this long is closed."""
    ping_interval: float = 5.0
    heads_interval: float = 5.0
    join_timeout: float = 2.0
    slow_parent_after: float = 1.0
    """A tree parent that answers PINGs later than this (after a probe) is left for
    another peer closer to the topic's author, if there is one (a slow or
    bandwidth-starved node must not hold back its subtree; docs/protocol-notes.md)."""
    retain_events: int = 10_000
    """Retention policy per topic (docs/sidecar.md "Retention"): a subscriber keeps
    (pins) at most this many of the topic's events, the newest in the history order."""
    retain_age: float = 30 * 24 * 3600.0
    """... none created more than this many seconds ago ..."""
    retain_bytes: int = 64 * 1024 * 1024
    """... and at most this many bytes of encoded events."""
    retain_pin: bool = True
    """Keep the retained events pinned, through one recursive pin of the retention
    index (docs/sidecar.md "Retention"). Off: they are kept in Kubo's blockstore
    unpinned, served and walked as before, but a Kubo garbage collection (``ipfs repo
    gc``, ``ipfs daemon --enable-gc``) may remove them; the author's and publishers'
    pins remain."""
    tree_filters: bool = True
    """Filters in the tree (docs/protocol-notes.md "Filters in the tree"): tell the
    parent what this node's subtree wants and send events down only into subtrees
    whose summary matches (``NodeConfig.tree_filters``). Off: every event goes to
    every tree neighbour."""
    uvloop: bool = True
    """Run on uvloop's event loop when it is installed (it is a dependency on Linux and
    macOS), asyncio's own otherwise. 3-4 % less sidecar CPU per delivery on a 20-node
    cluster at 20 events/s (``benchmarks/cluster_cpu.py``, session 17). Off: asyncio's."""
    flat_fanout: int = 64
    """Flat trees (docs/protocol-notes.md "Flat trees"): a node below a child of a
    topic's root moves up to the root while the root's MEMBERS list names fewer than
    this many peers (at most 64). 0: trees keep the shape the JOINs gave them."""
    witnesses: int = 2
    """Relays that lie (docs/protocol-notes.md "Relays that lie"): a node whose tree
    parent is not the topic's author asks this many peers its parent does not feed to
    announce the topic's events to it, and leaves a parent that withholds them
    (``NodeConfig.witnesses``; 0: off, at most 8)."""
    penalty_ttl: float = 600.0
    """Seconds a peer caught lying (a withholding parent left, a silent child dropped) is
    avoided and its JOINs refused (``NodeConfig.penalty_ttl``; 1 to 86,400)."""
    misbehave: str = ""
    """Test only (docs/sidecar.md "Misbehaving on purpose"): ``blackhole``, ``silent``,
    ``censor=PEER`` or ``delay=SECONDS`` makes this sidecar a relay that lies, for
    fault tests of the defence; ``lose=N`` drops its N-th delivery for good (the
    checker's planted bug). Refused unless ``PULSARCAST_ALLOW_MISBEHAVE=1`` is set.
    Empty (the default): honest."""
    group_capacity: int = 16
    """Fast groups (docs/protocol-notes.md "Fast groups"): peers this node sends each
    of its events to directly along its group of a topic (direct members and
    helpers); beyond that it recruits helpers among the members (0: no groups)."""
    group_spare: int = 8
    """Members of another publisher's group this node offers to forward to, as a
    helper, when it subscribes with ``fast`` (0: never a helper; at most 64)."""
    group_refresh: float = 10.0
    """A fast subscription refreshes each group membership this often; a membership
    not refreshed for three times this long expires."""
    log_level: str = "info"
    require_signatures: bool = True
    """Sign what this node authors and publishes with its own key through Kubo
    (``key/sign``, protocolVersion 1.1.0) and refuse unsigned, forged or tampered
    events at every hop (docs/security.md "Signatures"). Off (TOML
    ``require_signatures = false``, ``PULSARCAST_REQUIRE_SIGNATURES=false``): unsigned
    1.0.0 descriptors, for a cluster with peers that cannot sign."""
    delegate_ttl: float = DEFAULT_DELEGATE_TTL
    """With signatures on: how long the delegated signing key made at start is valid
    (docs/security.md "Delegated signing keys"). Kubo signs the delegation once; the
    sidecar signs its own events in memory, and renews the delegation (a new key) at
    half this time. 0: every event is signed through Kubo ``key/sign``, as before."""

    def __post_init__(self) -> None:
        host, port = parse_hostport(self.api, "api")
        if self.api.startswith(("/", "http://", "https://")):  # kept as HOST:PORT
            object.__setattr__(self, "api", f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
        if self.kubo_api.startswith("/"):  # Kubo's own form: /ip4/127.0.0.1/tcp/5001
            try:
                object.__setattr__(self, "kubo_api", http_url(self.kubo_api))
            except ValueError as exc:
                raise ConfigError(f"kubo_api: {exc}") from None
        if not self.kubo_api.startswith(("http://", "https://")):
            raise ConfigError(
                f"kubo_api: expected an http:// URL or a multiaddr, got {self.kubo_api!r}"
            )
        if not 0 <= self.p2p_port <= 65535:
            raise ConfigError("p2p_port: out of range")
        if self.routing_k is not None and self.routing_k < 1:
            raise ConfigError("routing_k: must be at least 1")
        for name in (
            "routing_interval",
            "connect_backoff",
            "fetch_timeout",
            "ping_interval",
            "heads_interval",
            "join_timeout",
            "slow_parent_after",
            "retain_events",
            "retain_age",
            "retain_bytes",
            "group_refresh",
            "consumer_grace",
            "consumer_retention",
        ):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name}: must be positive")
        if self.delegate_ttl != 0 and self.delegate_ttl < DELEGATE_TTL_MIN:
            raise ConfigError(
                f"delegate_ttl: 0 (off) or at least {DELEGATE_TTL_MIN:.0f} s, "
                f"got {self.delegate_ttl}"
            )
        if not 0 <= self.topic_announcers <= 64:
            raise ConfigError(f"topic_announcers: between 0 and 64, got {self.topic_announcers}")
        if not 0 <= self.metrics_topics <= 1000:
            raise ConfigError(f"metrics_topics: between 0 and 1000, got {self.metrics_topics}")
        if not 0 <= self.flat_fanout <= 64:
            raise ConfigError(f"flat_fanout: between 0 and 64, got {self.flat_fanout}")
        if not 0 <= self.witnesses <= 8:
            raise ConfigError(f"witnesses: between 0 and 8, got {self.witnesses}")
        if not 1.0 <= self.penalty_ttl <= 86_400.0:
            raise ConfigError(f"penalty_ttl: between 1 and 86400 s, got {self.penalty_ttl}")
        if self.misbehave:
            if os.environ.get(ALLOW_ENV) != "1":
                raise ConfigError(
                    f"misbehave: a test-only option, refused unless {ALLOW_ENV}=1 is set"
                )
            try:
                parse_misbehaviour(self.misbehave)
            except MisbehaviourError as exc:
                raise ConfigError(f"misbehave: {exc}") from None
        if self.group_capacity < 0 or not 0 <= self.group_spare <= 64:
            raise ConfigError("group_capacity: must be >= 0; group_spare: between 0 and 64")
        if self.group_refresh > 1200:
            raise ConfigError("group_refresh: at most 1200 seconds")
        if self.resource_interval < 0:
            raise ConfigError("resource_interval: must not be negative")
        if self.connect_attempts < 1 or self.max_body < 1024 or self.delivery_log_max < 10:
            raise ConfigError("connect_attempts, max_body or delivery_log_max too small")
        if self.decode_cache < 0:
            raise ConfigError("decode_cache: must not be negative")
        if self.announce not in ANNOUNCE_MODES:
            raise ConfigError(
                f"announce: expected one of {', '.join(ANNOUNCE_MODES)}, got {self.announce!r}"
            )
        if self.log_level.lower() not in ("debug", "info", "warning", "error"):
            raise ConfigError(f"log_level: unknown level {self.log_level!r}")
        host, _ = parse_hostport(self.api)
        if host not in ("127.0.0.1", "localhost", "::1") and not self.api_token:
            raise ConfigError(
                f"api: binding to {host} (not loopback) requires an API token (--api-token)"
            )

    @property
    def misbehaviour(self) -> Misbehaviour | None:
        """The parsed ``misbehave`` (None: honest)."""
        return parse_misbehaviour(self.misbehave) if self.misbehave else None

    @property
    def api_host(self) -> str:
        return parse_hostport(self.api)[0]

    @property
    def api_port(self) -> int:
        return parse_hostport(self.api)[1]

    @property
    def state_path(self) -> Path:
        return self.state_dir.expanduser()

    @property
    def metrics_path(self) -> Path:
        return (self.metrics_dir or self.state_dir / "metrics").expanduser()


_FIELDS = {f.name: f for f in fields(SidecarConfig)}


def _coerce(name: str, value: Any, where: str) -> Any:
    """Turn a TOML/env/flag value into the field's type, with a clear error."""
    default = _FIELDS[name].default
    kind = _FIELDS[name].type
    try:
        if value is None:
            return None
        if name in ("state_dir", "metrics_dir"):
            return Path(str(value))
        if isinstance(default, bool):
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off"):
                return False
            raise ValueError("expected true or false")
        if name in (
            "routing_k",
            "kubo_pid",
            "p2p_port",
            "connect_attempts",
            "max_body",
            "delivery_log_max",
            "decode_cache",
            "retain_events",
            "retain_bytes",
            "group_capacity",
            "group_spare",
            "flat_fanout",
            "witnesses",
            "topic_announcers",
            "metrics_topics",
        ):
            if isinstance(value, bool):
                raise ValueError("not an integer")
            if isinstance(value, str) and value.lower() in ("", "none"):
                if name in ("routing_k", "kubo_pid"):
                    return None
            return int(value)
        if isinstance(default, float):
            if isinstance(value, bool):
                raise ValueError("not a number")
            return float(value)
        if not isinstance(value, str):
            raise ValueError("not a string")
        return value
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: invalid value {value!r} for {name} ({kind}): {exc}") from None


def load_config(
    *,
    file: Path | None = None,
    env: Mapping[str, str] | None = None,
    flags: Mapping[str, Any] | None = None,
) -> SidecarConfig:
    """Merge defaults, the TOML ``file``, ``PULSARCAST_*`` variables and ``flags`` (winning).

    Keys use underscores (``state_dir``) in TOML and flags, upper case in the
    environment (``PULSARCAST_STATE_DIR``); dashes are accepted in TOML.
    """
    values: dict[str, Any] = {}
    if file is not None:
        try:
            doc = tomllib.loads(Path(file).expanduser().read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"config file {file}: {exc.strerror or exc}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {file}: not valid TOML: {exc}") from None
        section = doc.get("sidecar", doc)
        if not isinstance(section, dict):
            raise ConfigError(f"config file {file}: [sidecar] must be a table")
        for key, value in section.items():
            name = key.replace("-", "_")
            if name not in _FIELDS:
                raise ConfigError(f"config file {file}: unknown key {key!r}")
            values[name] = _coerce(name, value, f"config file {file}")
    environ = os.environ if env is None else env
    for name in _FIELDS:
        var = ENV_PREFIX + name.upper()
        if var in environ:
            values[name] = _coerce(name, environ[var], f"environment {var}")
    for name, value in (flags or {}).items():
        if value is None:
            continue
        if name not in _FIELDS:
            raise ConfigError(f"unknown option {name!r}")
        values[name] = _coerce(name, value, f"--{name.replace('_', '-')}")
    try:
        return replace(SidecarConfig(), **values)
    except ConfigError:
        raise
    except (TypeError, ValueError) as exc:
        raise ConfigError(str(exc)) from None
