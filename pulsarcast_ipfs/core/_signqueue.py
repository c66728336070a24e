"""The signing queue: operations that wait for the driver's signatures.

An operation is a generator that yields ``{label: data to sign}`` and is resumed
with the signatures (docs/security.md "Signatures"). With signatures off it runs
at once; on, operations run one at a time in order, so that a node's own events
chain exactly as they would without signatures. Checking the signatures of
topics and events from outside is here too.

:class:`SigningQueue` owns this state: the queue of operations, the signatures they
wait for, the time of the operation that runs (:attr:`SigningQueue.now`, which an
operation's steps read as their ``now``), the delegated key, and the topic versions
whose signature checked out. It emits its outputs (:class:`SignRequest`,
:class:`OperationDone`) through the ``emit`` it is given and touches nothing of the
node's: the node composes it (``node._signing``) and answers the driver's
``signed`` / ``sign_failed`` through it.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from pulsarcast_ipfs.core._cid import CID

from ._delegation import DelegateKey, verify_delegated, verify_delegation
from ._descriptors import (
    ONE_SIGNATURE_VERSIONS,
    PROTOCOL_VERSION,
    SIGNED_VERSION,
    SIGNED_VERSIONS,
    EventDescriptor,
    TopicDescriptor,
    event_version,
)
from ._errors import LocalProtocolError
from ._io import OperationDone, Output, Pending, SignRequest
from ._signing import verify_signature
from ._tree import LRU, Tree

__all__ = ["SigningQueue"]

_R = TypeVar("_R")


_CHECKED_EVENTS: Final = LRU(16_384)
"""``(event CID, tree key)`` pairs whose signatures checked out, shared by every
node of the process. The verdict is a function of the block's bytes (which its CID
names, signatures and delegation included) and of the tree, so one check serves
every node of a simulation, and every further copy a sidecar receives (a witness's
fetch, a repair): the check was ~20 % of a 1,000-node simulation's time."""


_Steps = Generator[dict[str, bytes], dict[str, bytes], _R]
"""An operation that may wait for signatures: it yields ``{label: data to sign}``
and is resumed with ``{label: signature}`` (docs/security.md "Signatures")."""


@dataclass(slots=True, kw_only=True)
class _Op:
    """An operation waiting in the signing queue (one runs at a time, FIFO)."""

    id: str
    steps: _Steps[Any]
    public: bool
    """An API command: finish with an ``OperationDone`` output."""
    on_fail: Callable[[float, str], None] | None = None
    waiting: dict[str, tuple[str, bytes]] = field(default_factory=dict)  # sign id -> label, data
    got: dict[str, bytes] = field(default_factory=dict)
    started: bool = False


class SigningQueue:
    """The signing queue and the signature checks of one node (see the module)."""

    def __init__(
        self,
        *,
        peer_id: str,
        require_signatures: bool,
        delegate_margin: float,
        emit: Callable[[Output], None],
        now: float,
    ) -> None:
        self.peer_id = peer_id
        self.require_signatures = require_signatures
        self.delegate_margin = delegate_margin
        self._emit = emit
        self.now = now
        """The time of the operation that runs (its steps' ``now``)."""
        self._ops: deque[_Op] = deque()
        self._sign_waits: dict[str, _Op] = {}
        self._seq = 0
        self._delegate: DelegateKey | None = None
        self._verified = LRU(4096)  # CIDs of topic versions whose signature checked out

    @property
    def version(self) -> str:
        """The ``protocolVersion`` this node writes."""
        return SIGNED_VERSION if self.require_signatures else PROTOCOL_VERSION

    def run(
        self,
        now: float,
        steps: _Steps[_R],
        *,
        public: bool = True,
        on_fail: Callable[[float, str], None] | None = None,
    ) -> _R | Pending:
        """Run an operation: at once when signatures are off, else through the queue.

        Signing operations run one at a time, in order, so a node's own events
        chain (LAST_SEEN) exactly as they would without signatures. ``public``: an API
        command, finished with an ``OperationDone``; ``on_fail(now, error)``: called
        when it fails in the queue.
        """
        if not self.require_signatures:
            self.now = now
            try:
                steps.send(None)  # type: ignore[arg-type]
            except StopIteration as stop:
                result: _R = stop.value
                return result
            steps.close()
            raise AssertionError("an operation asked for a signature with signatures off")
        self._seq += 1
        op = _Op(id=f"op-{self._seq}", steps=steps, public=public, on_fail=on_fail)
        self._ops.append(op)
        self._advance(now)
        return Pending(op=op.id)

    def _advance(self, now: float, value: dict[str, bytes] | None = None) -> None:
        """Start or resume the operation at the head of the queue, then the next ones."""
        while self._ops:
            op = self._ops[0]
            if op.started and value is None:
                return  # still waiting for its signatures
            op.started = True
            self.now = now
            try:
                want = op.steps.send(value)  # type: ignore[arg-type]
            except StopIteration as stop:
                self._finish(now, op, stop.value, None)
                value = None
                continue
            except LocalProtocolError as exc:
                self._finish(now, op, None, str(exc))
                value = None
                continue
            op.waiting.clear()
            op.got.clear()
            for label, data in want.items():
                self._seq += 1
                rid = f"sign-{self._seq}"
                op.waiting[rid] = (label, data)
                self._sign_waits[rid] = op
                self._emit(SignRequest(request_id=rid, data=data))
            return

    def _finish(self, now: float, op: _Op, result: Any, error: str | None) -> None:
        if self._ops and self._ops[0] is op:
            self._ops.popleft()
        for rid in op.waiting:
            self._sign_waits.pop(rid, None)
        op.waiting.clear()
        if op.public:
            self._emit(OperationDone(op=op.id, result=result, error=error))
        if error is not None and op.on_fail is not None:
            op.on_fail(now, error)

    def signed(self, now: float, request_id: str, signature: bytes) -> None:
        """The answer to a :class:`SignRequest`: this node's signature over its ``data``.

        A signature that does not verify against this node's peer ID (the driver
        signed with another key) fails the operation, as :meth:`sign_failed` does.
        """
        op = self._sign_waits.pop(request_id, None)
        if op is None:
            return  # its operation failed meanwhile (another signature of it failed)
        label, data = op.waiting.pop(request_id)
        if not isinstance(signature, bytes) or not verify_signature(self.peer_id, data, signature):
            self._abort(now, op, f"the signature for {request_id} is not {self.peer_id}'s")
            return
        op.got[label] = signature
        if not op.waiting:
            self._advance(now, dict(op.got))

    def sign_failed(self, now: float, request_id: str, reason: str) -> None:
        """The driver could not sign (Kubo down, no Ed25519 key): the operation fails."""
        op = self._sign_waits.pop(request_id, None)
        if op is None:
            return
        op.waiting.pop(request_id, None)
        self._abort(now, op, f"signing failed: {reason}")

    def _abort(self, now: float, op: _Op, error: str) -> None:
        op.steps.close()
        self._finish(now, op, None, error)
        self._advance(now)

    @property
    def pending(self) -> int:
        """Operations waiting for (or queued behind) signatures."""
        return len(self._ops)

    def signed_topic(self, draft: TopicDescriptor) -> _Steps[TopicDescriptor]:
        if not draft.is_draft:
            return draft
        sigs = yield {"topic": draft.signing_bytes()}
        return draft.with_signature(sigs["topic"])

    def use_delegate(self, now: float, key: DelegateKey | None) -> None:
        """Sign this node's own events with ``key`` from now on, without a
        :class:`SignRequest` (docs/security.md "Delegated signing keys"), while its
        delegation has more than :attr:`NodeConfig.delegate_margin` seconds to run;
        ``None``: sign through the driver again.

        The delegation must be this node's (its Kubo key signed it) and unexpired
        (``LocalProtocolError`` otherwise).
        """
        if key is not None:
            d = key.delegation
            if d is None or not verify_delegation(self.peer_id, d):
                raise LocalProtocolError(f"the delegation is not signed by {self.peer_id}")
            if d.expires <= now:
                raise LocalProtocolError("the delegation has expired")
        self._delegate = key

    def _delegate_for(self, draft: EventDescriptor) -> DelegateKey | None:
        """The delegated key that may sign ``draft`` now (own event, time to run)."""
        key = self._delegate
        if key is None or key.delegation is None:
            return None
        if draft.author != self.peer_id or draft.publisher != self.peer_id:
            return None
        if key.delegation.expires - self.delegate_margin <= draft.created_ts:
            return None
        return key

    def signed_event(
        self, draft: EventDescriptor, tree: CID, author_signature: bytes | None = None
    ) -> _Steps[EventDescriptor]:
        if not draft.is_draft:
            return draft
        key = self._delegate_for(draft) if author_signature is None else None
        if key is not None and key.delegation is not None:
            version = event_version(
                signed=True,
                attributes=draft.attributes is not None,
                delegated=True,
                one_signature=True,
            )
            draft = dataclasses.replace(draft, protocol_version=version)
            return draft.with_one_signature(
                signature=key.sign(draft.one_statement(tree)), delegation=key.delegation
            )
        want = {"publisher": draft.signing_bytes()}
        if author_signature is None:
            want["author"] = draft.author_statement(tree)
        sigs = yield want
        author = author_signature if author_signature is not None else sigs["author"]
        return draft.with_signatures(author=author, publisher=sigs["publisher"])

    def topic_refused(self, desc: TopicDescriptor) -> str | None:
        """Why a topic version from outside is refused (``unsigned``, ``bad_signature``)."""
        if desc.protocol_version == PROTOCOL_VERSION:
            return "unsigned" if self.require_signatures else None
        if desc.cid in self._verified:
            return None
        assert desc.signature is not None
        if not verify_signature(desc.author, desc.signing_bytes(), desc.signature):
            return "bad_signature"
        self._verified.put(desc.cid)
        return None

    def event_refused(self, tree: Tree, ev: EventDescriptor) -> str | None:
        """Why an event is refused: unsigned, or a signature that does not check out."""
        if ev.protocol_version not in SIGNED_VERSIONS:
            return "unsigned" if self.require_signatures else None
        key = (ev.cid, tree.key)
        if key in _CHECKED_EVENTS:
            return None
        refused = _signatures_refused(tree, ev)
        if refused is None:
            _CHECKED_EVENTS.put(key)
        return refused


def _signatures_refused(tree: Tree, ev: EventDescriptor) -> str | None:
    """Why a signed event's signatures do not check out (``None``: they do)."""
    assert ev.publisher_signature is not None
    if ev.delegation is not None:
        d = ev.delegation
        if not verify_delegation(ev.publisher, d):
            return "bad_signature"
        if ev.created_ts >= d.expires:
            return "delegation_expired"
        if ev.protocol_version in ONE_SIGNATURE_VERSIONS:
            # author == publisher: one signature over the event and its tree.
            if not verify_delegated(d, ev.one_statement(tree.key), ev.publisher_signature):
                return "bad_signature"
            return None
        assert ev.author_signature is not None
        if not verify_delegated(d, ev.signing_bytes(), ev.publisher_signature):
            return "bad_signature"
        if not verify_delegated(d, ev.author_statement(tree.key), ev.author_signature):
            return "bad_signature"
        return None
    assert ev.author_signature is not None
    if not verify_signature(ev.publisher, ev.signing_bytes(), ev.publisher_signature):
        return "bad_signature"
    if not verify_signature(ev.author, ev.author_statement(tree.key), ev.author_signature):
        return "bad_signature"
    return None
