"""The clients' routing rules (http_api/client/rules.py) driven step by step.

The rules are plans without I/O: they yield the requests to send and the pauses
to take. Here a scripted cluster answers them, so the situations that a real
cluster produces only now and then (a leader that refused one connection while
it restarted, and is the leader again) are played exactly.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from http_api.client.rules import RetryPolicy, _Resent, _Router
from http_api.client.wire import _Failure, _Outcome, _Plan, _Reply, _Send, _Sleep

A, B, C = "http://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3"

Answer = Callable[[_Send, int], _Reply | _Failure]


def _status(leader: str) -> _Reply:
    body = {"leader": {"url": leader}, "members": [{"url": u} for u in (A, B, C)]}
    return _Reply(200, {}, json.dumps(body).encode())


def _run(plan: _Plan[_Resent], answer: Answer, clock: list[float]) -> tuple[_Resent, list[str]]:
    """Drive ``plan``; pauses advance the fake ``clock``. Returns its result and the
    bases the writes were sent to, in order."""
    sent: list[str] = []
    outcome: _Outcome = None
    writes = 0
    try:
        while True:
            action = plan.send(outcome)
            if isinstance(action, _Sleep):
                clock[0] += action.seconds
                outcome = None
                continue
            assert isinstance(action, _Send)
            if action.target != "/v1/status":
                writes += 1
                sent.append(action.base)
            outcome = answer(action, writes)
    except StopIteration as stop:
        return stop.value, sent


def test_a_resent_write_goes_back_to_a_leader_that_failed_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [1000.0]
    monkeypatch.setattr("http_api.client.rules.time.monotonic", lambda: clock[0])

    asked_a = [0]

    def answer(send: _Send, writes: int) -> _Reply | _Failure:
        if send.base == A:
            asked_a[0] += 1
            if asked_a[0] == 1:
                # The leader was being restarted: the write never reached it.
                return _Failure(ConnectionRefusedError(), sent=False)
            return _status(A) if send.target == "/v1/status" else _Reply(200, {}, b"{}")
        if send.target == "/v1/status":
            return _status(A)
        return _Reply(503, {}, json.dumps({"code": "not_leader", "message": "x"}).encode())

    router = _Router([A, B, C], timeout=3.0, retry=RetryPolicy())
    router.leader = A
    plan = router.call_resendable("PUT", "/v1/kv/k", b"v", {}, deadline=clock[0] + 150.0)
    result, sent = _run(plan, answer, clock)
    assert result.reply is not None and result.reply.status == 200, result.error
    assert sent[0] == A and sent[-1] == A


def test_a_write_with_no_leader_anywhere_gives_up_at_its_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [1000.0]
    monkeypatch.setattr("http_api.client.rules.time.monotonic", lambda: clock[0])

    def answer(send: _Send, writes: int) -> _Reply | _Failure:
        if send.target == "/v1/status":
            return _Reply(200, {}, json.dumps({"leader": None, "members": []}).encode())
        return _Reply(503, {}, json.dumps({"code": "no_leader", "message": "x"}).encode())

    router = _Router([A, B, C], timeout=3.0, retry=RetryPolicy())
    plan = router.call_resendable("PUT", "/v1/kv/k", b"v", {}, deadline=clock[0] + 20.0)
    result, _ = _run(plan, answer, clock)
    assert result.reply is None
    assert result.error is not None and result.error.code == "no_leader"
    assert 1000.0 + 19.0 <= clock[0] <= 1000.0 + 21.0
