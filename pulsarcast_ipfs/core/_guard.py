"""Relays that lie: witnesses, parent scores, silent children (docs/protocol-notes.md
"Relays that lie").

Theory of operation
-------------------
A dissemination tree gives every relay power over its subtree: a relay that drops
EVENTs (a *black hole*), also its DIGESTs and HEADS (a *silent relay*), only one
publisher's events (a *censor*) or forwards them seconds late (a *slow drip*)
would, without this module, hold back or cut off everyone below it, since
anti-entropy runs along the same tree edges it controls.

**Witnesses** (the watcher's side). A node whose parent is not the topic's author
asks ``witnesses`` peers that its parent does not feed — members of the root's
MEMBERS list (the root's children, fed by the root and the publishers' first hop),
else the author itself — to announce the topic's events to it: ``WATCH`` (with its
subtree's filters), refreshed before its ``ttl`` runs out. A witness sends one HEADS
entry per event it accepts (a lazy push, as Plumtree's IHAVE). For each announced
event that has not come, the watcher starts a fetch after ``witness_grace`` (so the
parent's copy normally wins, and nothing is fetched twice), and ``witness_grace +
blame_window`` after the announcement it scores the parent:

- the parent sent it (any time, even after the fetch: a parent that was itself
  repairing), or this node sent or advertised it to the parent before the
  announcement (it came here by another path, a publisher's first hop, and went
  up: the parent then rightly does not send it back) -> a delivery. Told to the
  parent only after the announcement, it came from the fetch: no delivery (a
  parent's DIGEST claiming to miss everything draws such HEADS);
- it did not -> a miss.

**Scores** (cf. gossipsub's mesh-delivery score P3, but on evidence the parent
does not control). The last ``SCORE_WINDOW`` (16) announced events of a parent, and
of each publisher through that parent, are kept (each event once, whichever
witness announced it); ``SCORE_LIMIT`` (12) misses among them make the parent
*bad*: the node LEAVEs it, avoids it for ``penalty_ttl`` and
re-joins through another peer (children kept). Lost frames cost an honest parent a
miss now and then, never twelve of sixteen.

**Silent witnesses.** A witness answers every WATCH at once with a HEADS of its
newest few events (maybe none): one that has not answered ``ACK_WAIT`` after a
WATCH, or that announced nothing while ``QUIET_LIMIT`` events arrived by other
paths, is dropped and another chosen; a witness dropped so puts the author first
in line (the one peer an attacker does not control), and may itself be chosen again
after ``REJECT_TTL`` (an honest one's answer is lost now and then). A node below a silent parent
whose witnesses are silent too thus still moves on to honest ones.

**Witnesses from the author** (wire 2.12). The list a node holds came through its
parent, which may have made it (an attacker acting as root passes its own), and
Sybils that watch fill a witness's table, the author's first. So a witness takes at
most ``subnet_watchers`` watchers of one network per topic and, full, drops a
watcher it has penalised to make room; the author, refusing a WATCH because its
table is full, sends the root's list instead (:meth:`author_list`), and the
watcher chooses from it before the list its parent passed on once a witness has
failed.

**Own events seen** (the publisher's side, wire 2.11). A publisher below a parent
that is not the author cannot tell from the tree whether its event got out: a
withholding parent, a root's list naming few honest members, one direct push lost,
and the event would sit with the attacker. So it waits for a witness to announce it
back (a witness announces a watcher's own event to it too, although it came from
it). Not announced within ``witness_grace + blame_window``, the event is pushed
again, straight to the witnesses and the author (``pushed`` epoch 0: the receivers
send it up and down), after twice the wait each time, ``OWN_TRIES`` times at most.
In a clean run every own event is announced back: no push is repeated.

**Silent children** (the parent's side). A live event forwarded to a child changes
its DIGEST window, so an honest child sends a DIGEST within a round or two. A child
that was sent live events in ``silent_rounds`` heads rounds and sent no DIGEST or
HEADS since the first of them takes part in no anti-entropy: a silent relay, or a
Sybil holding a slot near the root. It is dropped (LEAVE) and its JOINs are
refused for ``penalty_ttl``. (Counted in rounds with traffic, not in seconds: an
honest child whose last DIGEST before the topic went idle was lost stays.)

**Idle probes** (the parent's side, wire 2.10). In a topic where nothing flows no
child owes anything, so a silent Sybil near the root of an idle topic would never
be counted. A child not heard from in ``silent_rounds`` heads rounds is *probed*:
the parent sends it a HEADS with no entries, which a child answers at once with a
HEADS with no entries (``_antientropy._on_heads``). Each round that ends with a
probe of the previous round unanswered counts as a silent round (at most one a
round, fed or probed), and the child is probed again; ``silent_rounds`` of them in
a row drop it. An honest idle child that answered is probed again after
``PROBE_REST + 1`` times as many quiet rounds: two small frames every two minutes;
with 5 % loss each way it would need six probes in a row lost.

Bounds: ``MAX_WATCHERS`` watchers per topic at a witness, ``MAX_PENDING``
announcements waiting, ``SCORE_WINDOW`` outcomes per (parent, publisher) for at
most ``MAX_SCORED`` pairs, penalties for at most ``MAX_PENALISED`` peers (LRU).

This object owns its state and touches no other part's; the node routes inputs to
it and carries out what it answers (:class:`~._node.PulsarcastNode`).
"""

from __future__ import annotations

import enum
import heapq
import random
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from pulsarcast_ipfs.core._cid import CID

from ._filters import Filter

__all__ = ["ACK_HEADS", "Blame", "RelayGuard", "WatchPlan", "WatchVerdict"]

SCORE_WINDOW = 16
"""Announced events remembered per parent (and per publisher through it)."""
SCORE_LIMIT = 12
"""Misses among the last ``SCORE_WINDOW`` that make a parent bad. A frame lost on
the parent's link is a miss: with 5 % loss, 12 of 16 happen about once in 10^12
windows; seen in the simulator, 6 of 8 (bursts of loss on one link, and a lost
event announced by two witnesses) penalised honest parents now and then."""
QUIET_LIMIT = 8
"""Events that came by other paths, none announced by a witness: it is dropped."""
ACK_WAIT = 3.0
"""Seconds a witness has to answer a WATCH (a HEADS, maybe empty)."""
ACK_HEADS = 8
"""Newest events a witness lists in its answer to a WATCH."""
WATCH_TTL = 60
"""Seconds a WATCH asks for; refreshed at a third of it."""
PROBE_REST = 3
"""A child that answered an idle probe is probed again after ``(PROBE_REST + 1) *
silent_rounds`` quiet rounds, not ``silent_rounds``: an idle honest child costs
two empty HEADS every two minutes (``silent_child_after`` 30 s), a silent one is
dropped as fast."""
MAX_WATCHERS = 64
MAX_PENDING = 4096
MAX_SCORED = 4096
MAX_PENALISED = 4096
MAX_REJECTED = 64
MAX_OFFERED = 64
"""Peers of the author's own list kept as witness candidates."""
REJECT_TTL = 60.0
"""Seconds a witness dropped as silent is not chosen again in that topic. Not for
good: an honest one's answer to a WATCH refresh is lost now and then (5 % loss each
way: one refresh in ten), and a node whose every witness was dropped so, the author
included, would watch nobody below a withholding parent."""
OWN_TRIES = 4
"""Direct pushes again of an own event no witness announced back."""
STALE_ANNOUNCE = 10.0
"""An announcement of an event created longer ago than this is not scored (the
witness itself got it late, by repair): it may still be fetched."""


@dataclass(slots=True)
class _Watched:
    """A witness this node watches in one topic."""

    since: float
    refresh_at: float
    ack_due: float | None = None
    """A WATCH is unanswered: the witness is dropped if still so then."""
    quiet: int = 0
    """Events accepted by other paths since its last announcement."""


@dataclass(slots=True)
class _Pending:
    tree: CID
    parent: str
    witness: str
    due: float


@dataclass(slots=True)
class _Own:
    """An event this node published, until a witness announces it back."""

    tree: CID
    due: float
    wait: float
    tries: int = 0


class WatchVerdict(enum.Enum):
    """What a witness did with a WATCH."""

    TAKEN = "taken"
    STOPPED = "stopped"
    FULL = "full"
    COLOCATED = "colocated"


@dataclass(frozen=True, slots=True)
class WatchPlan:
    """WATCH messages to send for one topic: ``(peer, ttl)`` (ttl 0: stop)."""

    sends: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class Blame:
    """A parent that crossed the score limit in a topic."""

    tree: CID
    parent: str
    publisher: str | None
    """The publisher whose events it withheld (a censor), or None (all of them)."""
    misses: int


@dataclass(slots=True)
class _TreeGuard:
    watching: dict[str, _Watched] = field(default_factory=dict)
    rejected: OrderedDict[str, float] = field(default_factory=OrderedDict)
    """Witnesses dropped as silent: not chosen again in this topic until then."""
    former: OrderedDict[str, None] = field(default_factory=OrderedDict)
    """Witnesses stopped (a HEADS of theirs still on its way is not a tree edge's)."""
    watchers: dict[str, tuple[float, tuple[Filter, ...] | None, str | None]] = field(
        default_factory=dict
    )
    """(witness side) Peer -> (until, its filters, its colocation key)."""
    offered: tuple[str, ...] = ()
    """The root's list as the author itself sent it, refusing a WATCH (its table
    full): witnesses this node's parent did not choose."""
    scored: OrderedDict[CID, None] = field(default_factory=OrderedDict)
    """Events already scored (or waiting to be): a second witness's announcement of
    one is not scored again."""
    from_parent: OrderedDict[CID, str] = field(default_factory=OrderedDict)
    """Events a parent sent (CID -> that parent), newest last (bounded)."""
    child_fed: set[str] = field(default_factory=set)
    """(parent side) Children sent a live event this heads round."""
    child_owed: dict[str, int] = field(default_factory=dict)
    """(parent side) Per child: heads rounds with live events for it since it was
    last heard from (a DIGEST or HEADS)."""
    child_quiet: dict[str, int] = field(default_factory=dict)
    """(parent side) Per child: heads rounds since it was last heard from (or came)."""
    child_probed: set[str] = field(default_factory=set)
    """(parent side) Children sent an idle probe last round, unanswered so far."""
    child_gone: dict[str, int] = field(default_factory=dict)
    """(parent side) Children that left owing rounds: heads rounds since. Their count
    is kept ``silent_rounds`` rounds, so that LEAVE and re-JOIN does not clear it."""


class RelayGuard:
    """The witness, scoring and silent-child state of one node (see module doc)."""

    def __init__(
        self,
        *,
        witnesses: int,
        witness_grace: float,
        blame_window: float,
        penalty_ttl: float,
        silent_rounds: int,
        subnet_watchers: int,
        rng: random.Random,
    ) -> None:
        self.witnesses = witnesses
        self.subnet_watchers = subnet_watchers
        self.witness_grace = witness_grace
        self.blame_window = blame_window
        self.penalty_ttl = penalty_ttl
        self.silent_rounds = silent_rounds
        self._rng = rng
        self._trees: dict[CID, _TreeGuard] = {}
        self._pending: OrderedDict[CID, _Pending] = OrderedDict()
        self._scores: OrderedDict[tuple[CID, str, str | None], deque[bool]] = OrderedDict()
        self._penalised: OrderedDict[str, float] = OrderedDict()
        self._penalised_low = float("inf")
        """No entry of ``_penalised`` ends before this (a lower bound)."""
        self._own: OrderedDict[CID, _Own] = OrderedDict()
        self._own_heap: list[tuple[float, int, CID]] = []
        self._own_seq = 0
        self.detections = 0
        """Parents found bad (and left)."""
        self.evictions = 0
        """Silent children dropped."""
        self.witness_drops = 0
        """Witnesses dropped as silent."""
        self.probes = 0
        """Idle probes sent to children not heard from."""
        self.fetches = 0
        """Announced events fetched (not come from the parent within the grace)."""
        self.own_pushes = 0
        """Own events pushed again to the witnesses and the author (none announced)."""
        self.watches_refused = 0
        """WATCHes not taken: the table full, or the watcher's network at its bound."""

    # ------------------------------------------------------------ state

    @property
    def counts(self) -> dict[str, int]:
        """Parents left as withholding, silent children dropped, silent witnesses, own
        events pushed again, WATCHes refused."""
        return {
            "detections": self.detections,
            "evictions": self.evictions,
            "witness_drops": self.witness_drops,
            "own_pushes": self.own_pushes,
            "watches_refused": self.watches_refused,
        }

    def _tg(self, key: CID) -> _TreeGuard:
        tg = self._trees.get(key)
        if tg is None:
            tg = self._trees[key] = _TreeGuard()
        return tg

    def forget(self, key: CID) -> None:
        """The node left the topic."""
        self._trees.pop(key, None)

    def next_due(self) -> float | None:
        """The earliest pending score or own-event check, if any."""
        best = None
        for p in self._pending.values():
            best = p.due  # insertion order is due order: due = now + a constant
            break
        heap = self._own_heap
        while heap and self._own.get(heap[0][2]) is None:
            heapq.heappop(heap)  # announced back (or forgotten) meanwhile
        if heap and (best is None or heap[0][0] < best):
            best = heap[0][0]
        return best

    # ------------------------------------------------------------ own events

    def published(self, now: float, key: CID, cid: CID) -> None:
        """(publisher) An event this node published below a parent that is not the
        author: a witness must announce it back (:meth:`own_due`)."""
        if self.witnesses == 0:
            return
        wait = self.witness_grace + self.blame_window
        self._own[cid] = _Own(tree=key, due=now + wait, wait=wait)
        self._arm(cid, now + wait)
        while len(self._own) > MAX_PENDING:
            self._own.popitem(last=False)

    def _arm(self, cid: CID, due: float) -> None:
        self._own_seq += 1
        heapq.heappush(self._own_heap, (due, self._own_seq, cid))

    def own_due(self, now: float) -> list[tuple[CID, CID]]:
        """``(topic, event)`` of the own events no witness announced back in time:
        to push again, straight to the witnesses and the author. Each is checked
        again after twice the wait, ``OWN_TRIES`` times at most."""
        out: list[tuple[CID, CID]] = []
        heap = self._own_heap
        while heap and heap[0][0] <= now:
            due, _, cid = heapq.heappop(heap)
            own = self._own.get(cid)
            if own is None or own.due != due:
                continue  # announced back, or re-armed
            out.append((own.tree, cid))
            own.tries += 1
            self.own_pushes += 1
            if own.tries >= OWN_TRIES:
                del self._own[cid]
                continue
            own.wait *= 2
            own.due = now + own.wait
            self._arm(cid, own.due)
        return out

    # ------------------------------------------------------------ penalties

    def penalised(self, now: float, peer: str) -> bool:
        until = self._penalised.get(peer)
        if until is None:
            return False
        if until <= now:
            del self._penalised[peer]
            return False
        return True

    def penalised_peers(self, now: float) -> list[str]:
        """Every peer still penalised (few: each was caught lying)."""
        if not self._penalised:
            return []
        if now < self._penalised_low:  # none has ended: no check per peer (a JOIN hop's)
            return list(self._penalised)
        out = [p for p in list(self._penalised) if self.penalised(now, p)]
        self._penalised_low = min(self._penalised.values(), default=float("inf"))
        return out

    def penalise(self, now: float, peer: str) -> None:
        until = now + self.penalty_ttl
        self._penalised_low = min(self._penalised_low, until)
        self._penalised[peer] = until
        self._penalised.move_to_end(peer)
        while len(self._penalised) > MAX_PENALISED:
            self._penalised.popitem(last=False)

    # ------------------------------------------------------------ watcher side

    def watched(self, key: CID) -> tuple[str, ...]:
        tg = self._trees.get(key)
        return tuple(sorted(tg.watching)) if tg is not None else ()

    def is_witness(self, key: CID, peer: str) -> bool:
        tg = self._trees.get(key)
        return tg is not None and peer in tg.watching

    def plan(
        self,
        now: float,
        key: CID,
        *,
        eligible: bool,
        members: tuple[str, ...],
        author: str,
        exclude: set[str],
    ) -> WatchPlan:
        """The WATCHes to send for a topic this heads round. ``eligible``: this node
        should watch (joined below a parent that is not the author); ``members``:
        the root's list as held; ``exclude``: itself, its parent, its children."""
        tg = self._trees.get(key)
        if not eligible or self.witnesses == 0:
            if tg is None or not tg.watching:
                return WatchPlan(())
            stops = tuple((p, 0) for p in sorted(tg.watching))
            for p, _ in stops:
                self._note_former(tg, p)
            tg.watching.clear()
            return WatchPlan(stops)
        tg = self._tg(key)
        sends: list[tuple[str, int]] = []
        for peer in sorted(tg.watching):
            w = tg.watching[peer]
            bad = peer in exclude or self.penalised(now, peer)
            if not bad and (w.quiet >= QUIET_LIMIT or (w.ack_due is not None and w.ack_due <= now)):
                bad = True
                self.witness_drops += 1
                tg.rejected[peer] = now + REJECT_TTL
                tg.rejected.move_to_end(peer)
                while len(tg.rejected) > MAX_REJECTED:
                    tg.rejected.popitem(last=False)
            if bad:
                del tg.watching[peer]
                self._note_former(tg, peer)
                sends.append((peer, 0))
            elif w.refresh_at <= now:
                w.refresh_at = now + WATCH_TTL / 3
                w.ack_due = now + ACK_WAIT
                sends.append((peer, WATCH_TTL))
        want = self.witnesses - len(tg.watching)
        if want > 0:
            taken = set(tg.watching)
            while tg.rejected and next(iter(tg.rejected.values())) <= now:
                tg.rejected.popitem(last=False)  # chosen again: one lost answer is no lie

            def usable(p: str) -> bool:
                return (
                    p not in exclude
                    and p not in taken
                    and p not in tg.rejected
                    and not self.penalised(now, p)
                )

            picks: list[str] = []
            if tg.rejected and usable(author):
                picks.append(author)  # a witness failed: the one peer no attacker holds
            # The author's own list first (the parent did not choose it), then the
            # list the parent passed on.
            offered = [p for p in tg.offered if p != author and usable(p)]
            self._rng.shuffle(offered)
            picks += offered[: max(0, want - len(picks))]
            candidates = [p for p in members if p != author and usable(p) and p not in picks]
            self._rng.shuffle(candidates)
            picks += candidates[: max(0, want - len(picks))]
            if len(picks) < want and usable(author) and author not in picks:
                picks.append(author)
            for peer in picks[:want]:
                tg.watching[peer] = _Watched(
                    since=now, refresh_at=now + WATCH_TTL / 3, ack_due=now + ACK_WAIT
                )
                sends.append((peer, WATCH_TTL))
        return WatchPlan(tuple(sends))

    @staticmethod
    def _note_former(tg: _TreeGuard, peer: str) -> None:
        tg.former[peer] = None
        tg.former.move_to_end(peer)
        while len(tg.former) > MAX_REJECTED:
            tg.former.popitem(last=False)

    def was_witness(self, key: CID, peer: str) -> bool:
        """``peer`` is, or lately was, a witness of this node in the topic."""
        tg = self._trees.get(key)
        return tg is not None and (peer in tg.watching or peer in tg.former)

    def parent_sent(self, key: CID, parent: str, cid: CID, *, up: bool = False) -> None:
        """``cid`` crossed the edge to the tree parent: an EVENT from it (new or a
        duplicate), or (``up``) an EVENT or HEADS entry to it. Sent up after a
        witness announced it while this node lacked it, it came from elsewhere (a
        fetch on the witness's word): no delivery by the parent, which could
        otherwise game its score by claiming to miss everything (a DIGEST listing
        nothing draws HEADS of all this node has)."""
        tg = self._trees.get(key)
        if tg is None or not tg.watching:
            return
        if up:
            pending = self._pending.get(cid)
            if pending is not None and pending.tree == key:
                return
        tg.from_parent[cid] = parent
        tg.from_parent.move_to_end(cid)
        while len(tg.from_parent) > MAX_PENDING:
            tg.from_parent.popitem(last=False)

    def accepted_elsewhere(self, key: CID, sender: str | None) -> None:
        """A new event accepted in the tree, not announced by (or from) a witness."""
        tg = self._trees.get(key)
        if tg is None:
            return
        for peer, w in tg.watching.items():
            if peer != sender:
                w.quiet += 1

    def announced(
        self,
        now: float,
        key: CID,
        witness: str,
        entries: tuple[tuple[CID, float], ...],
        *,
        parent: str | None,
        publisher_of: Callable[[CID], str | None],
        seen: Callable[[CID], bool],
    ) -> list[CID]:
        """A witness's HEADS: the CIDs to fetch after ``witness_grace`` (those not
        seen; the caller filters). Each fresh announcement of an event this node
        lacks is scored later (one it already has by another path, a publisher's
        direct push, says nothing of the parent)."""
        tg = self._trees.get(key)
        if tg is None or witness not in tg.watching:
            return []
        w = tg.watching[witness]
        w.quiet = 0
        w.ack_due = None
        out: list[CID] = []
        own = self._own
        for cid, created in entries:
            if own and own.pop(cid, None) is not None:
                continue  # our own event, announced back: it got out
            out.append(cid)
            if parent is None or now - created > STALE_ANNOUNCE or cid in tg.scored:
                continue
            tg.scored[cid] = None
            while len(tg.scored) > MAX_PENDING:
                tg.scored.popitem(last=False)
            if tg.from_parent.get(cid) == parent:
                self._score(key, parent, publisher_of(cid), miss=False)
                continue
            if seen(cid):
                continue
            self._pending[cid] = _Pending(
                tree=key,
                parent=parent,
                witness=witness,
                due=now + self.witness_grace + self.blame_window,
            )
            while len(self._pending) > MAX_PENDING:
                self._pending.popitem(last=False)
        return out

    def due(
        self,
        now: float,
        *,
        parent_of: Callable[[CID], str | None],
        event_of: Callable[[CID], tuple[str, float] | None],
    ) -> list[Blame]:
        """Score the announcements whose time has come; the parents found bad.
        ``event_of``: the publisher and ``created`` of an event this node holds (it
        was verified), else None. An announced event this node never got (made up, or
        not to be had) or that is old after all (a replayed announcement) scores
        nothing, and a witness that announced one made up is dropped: a lying witness
        cannot frame an honest parent."""
        blames: list[Blame] = []
        while self._pending:
            cid, p = next(iter(self._pending.items()))
            if p.due > now:
                break
            del self._pending[cid]
            if parent_of(p.tree) != p.parent:
                continue  # the parent changed meanwhile: nothing to say of either
            tg = self._trees.get(p.tree)
            if tg is None:
                continue
            info = event_of(cid)
            if info is None:
                w = tg.watching.get(p.witness)
                if w is not None:
                    w.quiet = QUIET_LIMIT  # it announced what nobody has: dropped next round
                continue
            publisher, created = info
            if p.due - created > STALE_ANNOUNCE + self.witness_grace + self.blame_window:
                continue  # an old event announced as new
            got = tg.from_parent.get(cid) == p.parent
            blame = self._score(p.tree, p.parent, publisher, miss=not got)
            if blame is not None:
                blames.append(blame)
        return blames

    def _score(self, key: CID, parent: str, publisher: str | None, *, miss: bool) -> Blame | None:
        found: Blame | None = None
        for who in (None, publisher) if publisher is not None else (None,):
            k = (key, parent, who)
            window = self._scores.get(k)
            if window is None:
                window = self._scores[k] = deque(maxlen=SCORE_WINDOW)
                while len(self._scores) > MAX_SCORED:
                    self._scores.popitem(last=False)
            else:
                self._scores.move_to_end(k)
            window.append(miss)
            misses = sum(window)
            if miss and misses >= SCORE_LIMIT and found is None:
                found = Blame(tree=key, parent=parent, publisher=who, misses=misses)
        return found

    def parent_left(self, key: CID, parent: str) -> None:
        """The node left a bad parent: its windows start afresh if it comes back."""
        for k in [k for k in self._scores if k[0] == key and k[1] == parent]:
            del self._scores[k]
        for cid in [c for c, p in self._pending.items() if p.tree == key and p.parent == parent]:
            del self._pending[cid]
        self.detections += 1

    # ------------------------------------------------------------ witness side

    def on_watch(
        self,
        now: float,
        key: CID,
        peer: str,
        ttl: int,
        filters: tuple[Filter, ...] | None,
        *,
        subnet: str | None = None,
    ) -> WatchVerdict:
        """A WATCH: whether it is taken (then answered at once); ``ttl`` 0 ends one.
        A new watcher is refused while ``subnet_watchers`` watchers of the topic share
        its colocation key (Sybil identities are free, networks are not), or while
        the table is full of live watchers this node has not penalised."""
        tg = self._tg(key)
        if ttl == 0:
            tg.watchers.pop(peer, None)
            return WatchVerdict.STOPPED
        watchers = tg.watchers
        if peer not in watchers:
            if subnet is not None and self.subnet_watchers > 0:
                same = sum(1 for until, _, s in watchers.values() if s == subnet and until > now)
                if same >= self.subnet_watchers:
                    self.watches_refused += 1
                    return WatchVerdict.COLOCATED
            if len(watchers) >= MAX_WATCHERS:
                self._expire_watchers(now, tg)
                if len(watchers) >= MAX_WATCHERS:
                    bad = next((p for p in watchers if self.penalised(now, p)), None)
                    if bad is None:
                        self.watches_refused += 1
                        return WatchVerdict.FULL  # the watcher finds another witness
                    del watchers[bad]
        watchers[peer] = (now + ttl, filters, subnet)
        return WatchVerdict.TAKEN

    def author_list(self, now: float, key: CID, author: str, members: tuple[str, ...]) -> None:
        """(watcher) The author refused our WATCH (its table full) and sent the root's
        list instead (MEMBERS ``offer``): choose witnesses from it, and the author not
        again for ``REJECT_TTL``."""
        tg = self._trees.get(key)
        if tg is None:
            return
        tg.offered = members[:MAX_OFFERED]
        if tg.watching.pop(author, None) is not None:
            self._note_former(tg, author)
        tg.rejected[author] = now + REJECT_TTL
        tg.rejected.move_to_end(author)
        while len(tg.rejected) > MAX_REJECTED:
            tg.rejected.popitem(last=False)

    @staticmethod
    def _expire_watchers(now: float, tg: _TreeGuard) -> None:
        for peer in [p for p, (until, _, _) in tg.watchers.items() if until <= now]:
            del tg.watchers[peer]

    def watchers(self, now: float, key: CID) -> list[tuple[str, tuple[Filter, ...] | None]]:
        """Who to announce a new event of the topic to (in a stable order)."""
        tg = self._trees.get(key)
        if tg is None or not tg.watchers:
            return []
        out = []
        expired = False
        for peer, (until, filters, _) in tg.watchers.items():
            if until <= now:
                expired = True
                continue
            out.append((peer, filters))
        if expired:
            self._expire_watchers(now, tg)
        return out

    # ------------------------------------------------------------ parent side

    def child_heard(self, key: CID, child: str) -> None:
        """A DIGEST or HEADS from a child: it takes part in anti-entropy."""
        tg = self._trees.get(key)
        if tg is None:
            return
        tg.child_owed.pop(child, None)
        tg.child_gone.pop(child, None)
        tg.child_fed.discard(child)
        if child in tg.child_probed:
            # It answered a probe: an idle honest child, probed again only after
            # ``PROBE_REST`` times as long (a silent one never gets here).
            tg.child_probed.discard(child)
            tg.child_quiet[child] = -PROBE_REST * self.silent_rounds
        else:
            tg.child_quiet.pop(child, None)

    def forwarded(self, key: CID, child: str) -> None:
        """A live EVENT went down to ``child``."""
        if self.silent_rounds <= 0:
            return
        self._tg(key).child_fed.add(child)

    def silent_children(self, key: CID, children: dict[str, None]) -> list[str]:
        """(every heads round) Children sent live events, or idle probes, in
        ``silent_rounds`` rounds without a word since (see :meth:`child_round`)."""
        return self.child_round(key, children)[0]

    def child_round(self, key: CID, children: dict[str, None]) -> tuple[list[str], list[str]]:
        """(every heads round) The children to drop (fed or probed in
        ``silent_rounds`` rounds without a word since), and those to probe now (not
        heard from in ``silent_rounds`` rounds: an idle topic)."""
        if self.silent_rounds <= 0:
            return [], []
        tg = self._tg(key)
        owed = tg.child_owed
        quiet = tg.child_quiet
        probed = tg.child_probed
        # A round counts once: fed (it owes a DIGEST) or probed and unanswered.
        for child in tg.child_fed | (probed & children.keys()):
            owed[child] = owed.get(child, 0) + 1
        tg.child_fed.clear()
        probed.clear()
        probes: list[str] = []
        for child in children:
            q = quiet.get(child, 0) + 1
            quiet[child] = q
            if q >= self.silent_rounds:
                probes.append(child)
        # A child that left keeps what it owes (and its quiet count) a while (a
        # silent relay that LEAVEs and re-JOINs to dodge the count), then is forgotten.
        gone = tg.child_gone
        for c in [c for c in gone if c in children]:
            del gone[c]
        for c in [c for c in owed.keys() | quiet.keys() if c not in children]:
            rounds = gone.get(c, 0) + 1
            if rounds > self.silent_rounds:
                owed.pop(c, None)
                quiet.pop(c, None)
                gone.pop(c, None)
            else:
                gone[c] = rounds
        out = sorted(
            c for c, rounds in owed.items() if rounds >= self.silent_rounds and c in children
        )
        for c in out:
            del owed[c]
            quiet.pop(c, None)
        self.evictions += len(out)
        dropped = set(out)
        probes = sorted(c for c in probes if c not in dropped)
        probed.update(probes)
        self.probes += len(probes)
        return out, probes
