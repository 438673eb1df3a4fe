"""An idempotent producer's rules, without doing any I/O.

:class:`http_api.client.Producer` (blocking) and
:class:`http_api.client.AsyncProducer` (asyncio) run the plans of
:class:`_ProducerCore`. A producer is registered with ``POST /v1/producers``
(with a transactional id, the same id comes back with the next epoch, which
fences the older ones) and stamps every write with ``Rkv-Producer-Id``,
``Rkv-Producer-Epoch`` and ``Rkv-Sequence``. The server applies each sequence
at most once and answers a repeat with the first result (``Rkv-Duplicate``).
On top of that, the producer:

- numbers its writes 0, 1, 2... per epoch and sends one at a time (a lock);
  use several producers for parallel writes;
- sends a write again, with the same sequence, on every unknown or transient
  outcome (a lost connection, a timeout, ``unknown_outcome``,
  ``not_applied``, ``overloaded``, ``no_leader``, a new leader), with backoff,
  for ``deadline`` seconds per call: the server's deduplication makes this
  safe, where a plain client must not resend a write whose outcome is unknown;
- takes a duplicate answer as that sequence's result (``last_was_duplicate``
  says so);
- takes a business refusal applied under the sequence (``version_conflict``,
  ``not_found``, ``not_an_integer``, ``integer_overflow``, an append past the
  size limit) as its definitive result: raised, and the sequence is used.
  A request refused before it reached the log (a bad key, a value too large
  to send) leaves the sequence unused; an ambiguous refusal (400 or 413) is
  asked once more, and a duplicate answer tells that the sequence was used;
- ``producer_fenced``: raises :class:`ProducerFencedError`, or with
  ``reinit_on_fence`` initialises the next epoch and sends the write again
  (fenced, it was not applied) -- unless an earlier attempt of it, left
  without an answer, may have been applied: then it is not sent again and
  the error says ``outcome_unknown``. ``unknown_producer`` and the sequence
  errors are raised: call ``reinit()``;
- when the deadline passes with the outcome still unknown, raises
  :class:`UnknownOutcomeError` and keeps the write *pending*: the next call
  first sends it again with its sequence to settle it (its answer is
  discarded; it may be applied only then), then sends its own write. So
  sequences never skip and nothing applies twice. If the pending write cannot
  be settled within that call's deadline, the call raises
  :class:`NotAppliedError` without sending its own write. ``reinit()``
  abandons a pending write (the new epoch guarantees it can no longer apply).
  When no attempt was sent at all, the call raises the last error and the
  sequence stays unused.

A sequence names one write: sending another write under a sequence already
used returns the first write's result.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from http_api.client.errors import (
    NotAppliedError,
    ProducerError,
    ProducerFencedError,
    RkvClientError,
    UnknownOutcomeError,
)
from http_api.client.operations import _Core, _Write
from http_api.client.wire import _int_field, _Plan, _Reply, error_from_reply, is_duplicate

T = TypeVar("T")

DEFAULT_DEADLINE = 60.0
"""Seconds one producer call keeps sending its write before giving up."""
MAX_REINITS = 3
"""With ``reinit_on_fence``: at most this many new epochs in one call."""

# Refusals decided while applying the write: the sequence was used, and a retry
# gets them again marked duplicate.
_APPLIED_REFUSALS = frozenset(
    {"version_conflict", "not_found", "not_an_integer", "integer_overflow"}
)
# The producer rules refused the write: nothing was applied under it.
_PRODUCER_REFUSALS = frozenset(
    {"producer_fenced", "unknown_producer", "out_of_order_sequence", "duplicate_sequence_too_old"}
)


def producer_headers(producer_id: int, epoch: int, sequence: int) -> dict[str, str]:
    """The three headers of an idempotent producer's write."""
    return {
        "Rkv-Producer-Id": str(producer_id),
        "Rkv-Producer-Epoch": str(epoch),
        "Rkv-Sequence": str(sequence),
    }


def _code(reply: _Reply) -> str | None:
    body = reply.json()
    code = body.get("code") if isinstance(body, dict) else None
    return code if isinstance(code, str) else None


@dataclass(frozen=True, slots=True)
class _Pending:
    """A write whose outcome is unknown, waiting to be settled under its sequence."""

    request: _Write[Any]
    sequence: int


@dataclass(frozen=True, slots=True)
class _Answer:
    """The definitive answer to one sequence."""

    reply: _Reply
    base: str
    used: bool  # the sequence was applied (this is its result)
    duplicate: bool  # the answer carried Rkv-Duplicate
    maybe_applied: bool  # an earlier attempt, unanswered, may have been applied


class _Undecided(Exception):
    """The deadline passed before a definitive answer."""

    def __init__(self, maybe_applied: bool, error: RkvClientError) -> None:
        super().__init__(error.message)
        self.maybe_applied = maybe_applied
        self.error = error


class _ProducerCore:
    """One producer's id, epoch, sequence and pending write; every call as a plan."""

    def __init__(
        self,
        core: _Core,
        transactional_id: str | None = None,
        *,
        reinit_on_fence: bool = False,
        deadline: float = DEFAULT_DEADLINE,
        producer_id: int = -1,
        epoch: int = -1,
        next_sequence: int = 0,
    ) -> None:
        if transactional_id is not None and not isinstance(transactional_id, str):
            raise TypeError("transactional_id must be a str")
        self.core = core
        self.transactional_id = transactional_id
        self.reinit_on_fence = reinit_on_fence
        self.deadline = deadline
        self.producer_id = producer_id
        self.epoch = epoch
        self.next_sequence = next_sequence
        self.pending: _Pending | None = None
        self.last_was_duplicate = False

    @classmethod
    def resumed(
        cls,
        core: _Core,
        producer_id: int,
        epoch: int,
        next_sequence: int,
        *,
        transactional_id: str | None,
        reinit_on_fence: bool,
        deadline: float,
    ) -> _ProducerCore:
        """A producer registered before, writing from ``next_sequence`` on."""
        for name, number in (
            ("producer_id", producer_id),
            ("epoch", epoch),
            ("next_sequence", next_sequence),
        ):
            if isinstance(number, bool) or not isinstance(number, int) or number < 0:
                raise ValueError(f"{name} must be a non-negative integer")
        return cls(
            core,
            transactional_id,
            reinit_on_fence=reinit_on_fence,
            deadline=deadline,
            producer_id=producer_id,
            epoch=epoch,
            next_sequence=next_sequence,
        )

    @property
    def deadline(self) -> float:
        return self._deadline

    @deadline.setter
    def deadline(self, seconds: float) -> None:
        if not seconds > 0:
            raise ValueError("deadline must be positive")
        self._deadline = float(seconds)

    def _where(self) -> str:
        return f"producer {self.producer_id} epoch {self.epoch}"

    # -- initialisation ------------------------------------------------------------------

    def init(self) -> _Plan[None]:
        """POST /v1/producers: a new producer, or the next epoch of the transactional id.
        Sent again on unknown outcomes (an extra epoch or id is harmless). A pending
        write is abandoned, and sequences start again from 0."""
        return self._init(time.monotonic() + self.deadline)

    def _init(self, deadline: float) -> _Plan[None]:
        body = {} if self.transactional_id is None else {"transactional_id": self.transactional_id}
        resent = yield from self.core.call_resendable(
            "POST",
            "/v1/producers",
            json.dumps(body).encode(),
            {"Content-Type": "application/json"},
            deadline=deadline,
        )
        reply = resent.reply
        if reply is None:
            assert resent.error is not None
            raise resent.error
        assert resent.base is not None
        if not 200 <= reply.status < 300:
            raise error_from_reply(reply, resent.base)
        producer_id = _int_field(reply.json(), "producer_id")
        epoch = _int_field(reply.json(), "epoch")
        if producer_id < 0 or epoch < 0:
            raise RkvClientError("the server sent a negative producer id", code="bad_response")
        self.producer_id, self.epoch = producer_id, epoch
        self.next_sequence = 0
        self.pending = None
        self.last_was_duplicate = False

    # -- writes ----------------------------------------------------------------------------

    def write(self, request: _Write[T]) -> _Plan[T]:
        """Send one write under the next sequence, by the rules in the module docstring."""
        deadline = time.monotonic() + self.deadline
        if self.pending is not None:
            yield from self._settle(deadline)
        reinits = 0
        while True:
            sequence = self.next_sequence
            # Pending until its outcome is known: a call abandoned half-way (a cancelled
            # task, an interrupt) leaves it to be settled by the next call.
            self.pending = _Pending(request, sequence)
            self.next_sequence = sequence + 1
            try:
                answer = yield from self._deliver(request, sequence, deadline)
            except _Undecided as undecided:
                if not undecided.maybe_applied:  # nothing was sent: the sequence is free
                    self.pending, self.next_sequence = None, sequence
                    raise undecided.error from None
                raise UnknownOutcomeError(
                    f"{self._where()} sequence {sequence}: no answer within "
                    f"{self.deadline:g}s ({undecided.error.message}); the write may or may "
                    "not have been applied, and the next call on this producer sends it "
                    "again first",
                    url=undecided.error.url,
                ) from None
            self.pending = None
            self.last_was_duplicate = answer.duplicate
            if answer.used:
                if 200 <= answer.reply.status < 300:
                    return request.decode(answer.reply)
                raise error_from_reply(answer.reply, answer.base)
            self.next_sequence = sequence  # refused before the log: the sequence is free
            error = error_from_reply(answer.reply, answer.base)
            if isinstance(error, ProducerError):
                error.outcome_unknown = answer.maybe_applied
                fenced = isinstance(error, ProducerFencedError)
                if fenced and self.reinit_on_fence and reinits < MAX_REINITS:
                    reinits += 1
                    yield from self._init(deadline)
                    if not answer.maybe_applied:
                        continue  # fenced, so not applied: send it under the new epoch
            raise error

    def _settle(self, deadline: float) -> _Plan[None]:
        """Send the pending write again under its sequence until its outcome is known."""
        pending = self.pending
        assert pending is not None
        sequence = pending.sequence
        try:
            answer = yield from self._deliver(pending.request, sequence, deadline)
        except _Undecided as undecided:
            raise NotAppliedError(
                f"{self._where()}: the earlier write with sequence {sequence} is still "
                f"without an answer ({undecided.error.message}); this write was not sent",
                url=undecided.error.url,
            ) from None
        self.pending = None
        if answer.used:
            return
        self.next_sequence = sequence
        error = error_from_reply(answer.reply, answer.base)
        if not isinstance(error, ProducerError):
            return  # refused before the log: the sequence is free for the next write
        # The earlier write can no longer be settled: its outcome stays unknown.
        if isinstance(error, ProducerFencedError) and self.reinit_on_fence:
            yield from self._init(deadline)
            return
        raise type(error)(
            f"{error.message} (the earlier write with sequence {sequence}, whose outcome "
            "was unknown, could not be settled; this write was not sent)",
            code=error.code,
            status=error.status,
            url=error.url,
        )

    def _deliver(self, request: _Write[Any], sequence: int, deadline: float) -> _Plan[_Answer]:
        """Send ``request`` as ``sequence`` until its answer is definitive."""
        headers: Mapping[str, str] = {
            **request.headers,
            **producer_headers(self.producer_id, self.epoch, sequence),
        }
        maybe_applied = False
        first: tuple[_Reply, str] | None = None
        while True:
            resent = yield from self.core.call_resendable(
                request.method, request.target, request.body, headers, deadline=deadline
            )
            maybe_applied = maybe_applied or resent.maybe_applied
            reply, base = resent.reply, resent.base
            if reply is None or base is None:
                assert resent.error is not None
                raise _Undecided(maybe_applied, resent.error)
            code = _code(reply)
            duplicate = is_duplicate(reply)
            if 200 <= reply.status < 300 or duplicate or code in _APPLIED_REFUSALS:
                # After asking again (below), a duplicate is the first answer's confirmation.
                return _Answer(reply, base, True, duplicate and first is None, maybe_applied)
            if first is not None:
                # Refused again, not as a duplicate: refused before the log both times.
                return _Answer(*first, False, False, maybe_applied)
            if code in _PRODUCER_REFUSALS:
                return _Answer(reply, base, False, False, maybe_applied)
            # A refusal that is either decided before the log (a bad key, a body too
            # large: the sequence is unused) or while applying (an append past the size
            # limit: the sequence is used). Asking again tells: only the second kind
            # comes back marked duplicate.
            first = (reply, base)


class _ProducerView:
    """What both producers (:class:`http_api.client.Producer`,
    :class:`http_api.client.AsyncProducer`) show of their state."""

    _state: _ProducerCore

    @property
    def producer_id(self) -> int:
        return self._state.producer_id

    @property
    def epoch(self) -> int:
        return self._state.epoch

    @property
    def transactional_id(self) -> str | None:
        return self._state.transactional_id

    @property
    def next_sequence(self) -> int:
        """The sequence the next new write gets (a pending write holds the one before)."""
        return self._state.next_sequence

    @property
    def pending_sequence(self) -> int | None:
        """The sequence of the write whose outcome is unknown, which the next call
        settles first; None when there is none."""
        pending = self._state.pending
        return None if pending is None else pending.sequence

    @property
    def last_was_duplicate(self) -> bool:
        """The last write's answer repeated an earlier result of its sequence
        (``Rkv-Duplicate``): nothing was applied by that call."""
        return self._state.last_was_duplicate

    @property
    def reinit_on_fence(self) -> bool:
        return self._state.reinit_on_fence

    @property
    def deadline(self) -> float:
        """Seconds each call keeps sending its write (settable)."""
        return self._state.deadline

    @deadline.setter
    def deadline(self, seconds: float) -> None:
        self._state.deadline = seconds

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} id={self.producer_id} epoch={self.epoch} "
            f"next_sequence={self.next_sequence} pending={self.pending_sequence}>"
        )
