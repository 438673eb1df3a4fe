"""The client's lease, lock and election rules without a network: the error table,
the requests built, the keepalive schedule and thread, the lock waits, the observe
stream's lines, and the `rkv lock` command line. Real nodes: tests/cluster/
test_client_leases.py and test_cli_leases.py."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from http_api.client import (
    ClusterUnreachableError,
    Fenced,
    Fencing,
    KeyNotFoundError,
    Lease,
    LeaseLost,
    LeaseNotFoundError,
    LockHeldError,
    LockHolder,
    LockLost,
    NoElectionLeaderError,
    NotAppliedError,
    NotLockHolderError,
    Op,
    RetryPolicy,
)
from http_api.client.lease_keeper import KeepaliveSchedule, LeaseKeeper
from http_api.client.lease_model import fencing_headers
from http_api.client.lease_plans import _LeasePlans
from http_api.client.locks import HeldLock, KeptLease, LockContext
from http_api.client.observing import Observer, Skip, StreamEnded
from http_api.client.operations import _Core
from http_api.client.wire import _Failure, _Outcome, _Plan, _Reply, _Send, _Sleep, error_from_reply

A = "http://127.0.0.1:1"


def _reply(status: int, body: dict[str, Any]) -> _Reply:
    return _Reply(status, {}, json.dumps(body).encode())


def _drive(plan: _Plan[Any], answer: Callable[[_Send], _Reply | _Failure]) -> Any:
    outcome: _Outcome = None
    try:
        while True:
            action = plan.send(outcome)
            outcome = None if isinstance(action, _Sleep) else answer(action)
    except StopIteration as stop:
        return stop.value


def _core() -> _Core:
    core = _Core(A, 5.0, RetryPolicy(max_attempts=2, initial_backoff=0, max_backoff=0))
    core.leader = A
    return core


# -- the error table ---------------------------------------------------------------------


def test_new_codes_map_to_their_exceptions() -> None:
    fenced = error_from_reply(_reply(409, {"code": "fenced", "message": "m", "token": 42}), A)
    assert isinstance(fenced, Fenced) and fenced.token == 42 and fenced.code == "fenced"
    nobody = error_from_reply(_reply(409, {"code": "fenced", "message": "m", "token": None}), A)
    assert isinstance(nobody, Fenced) and nobody.token is None
    held = error_from_reply(_reply(409, {"code": "lock_held", "message": "m", "token": 7}), A)
    assert isinstance(held, LockHeldError) and held.token == 7
    not_holder = error_from_reply(_reply(409, {"code": "not_lock_holder", "message": "m"}), A)
    assert isinstance(not_holder, NotLockHolderError)
    for code in ("lease_expired", "lease_not_found"):
        gone = error_from_reply(_reply(404, {"code": code, "message": "m"}), A)
        assert isinstance(gone, LeaseNotFoundError) and gone.code == code
        assert not isinstance(gone, KeyNotFoundError)
    # no_leader: a 404 is an election without a leader, a 503 a cluster without one.
    no_leader = error_from_reply(_reply(404, {"code": "no_leader", "message": "m"}), A)
    assert isinstance(no_leader, NoElectionLeaderError)
    assert isinstance(error_from_reply(_reply(503, {"code": "no_leader"}), A), NotAppliedError)


# -- requests ------------------------------------------------------------------------------


def test_writes_carry_fencing_lease_and_ttl() -> None:
    holder = LockHolder("jobs/compactor", 12, 99)
    held = HeldLock(holder, lease=None)  # type: ignore[arg-type]
    assert fencing_headers(held) == {"Rkv-Fencing": "jobs/compactor=99"}
    assert fencing_headers(("a", 1)) == {"Rkv-Fencing": "a=1"}
    assert fencing_headers(Fencing("a", 1)) == {"Rkv-Fencing": "a=1"}
    assert fencing_headers(None) == {}
    for bad in (("bad name", 1), ("a", -1), ("a=b", 1), ("x\r\nEvil: 1", 1)):
        with pytest.raises(ValueError):
            fencing_headers(bad)

    put = _Core.put_request("k", "v", None, False, lease=Lease(5, 10), fencing=held)
    assert put.target == "/v1/kv/k?lease=5"
    assert put.headers["Rkv-Fencing"] == "jobs/compactor=99"
    assert _Core.put_request("k", "v", None, False, ttl=30).target == "/v1/kv/k?ttl=30"
    with pytest.raises(ValueError):
        _Core.put_request("k", "v", None, False, lease=5, ttl=30)
    with pytest.raises(ValueError):
        _Core.put_request("k", "v", None, False, ttl=0)
    for request in (
        _Core.delete_request("k", None, ("n", 3)),
        _Core.incr_request("k", 1, ("n", 3)),
        _Core.append_request("k", "v", ("n", 3)),
        _Core.txn_request([], [], [], ("n", 3)),
        _Core.txn_raw_request({}, "base64", ("n", 3)),
    ):
        assert request.headers["Rkv-Fencing"] == "n=3"
    assert Op.put("k", "v", lease=7).to_json()["lease"] == 7
    assert "lease" not in Op.put("k", "v").to_json()


def test_lock_names_are_checked_and_escaped() -> None:
    plans = _LeasePlans(_core())
    sent: list[_Send] = []

    def answer(send: _Send) -> _Reply:
        sent.append(send)
        return _reply(200, {"name": "a/b:c@d", "key": "a/b:c@d/5", "token": 9, "lease": 5})

    holder = _drive(plans.lock("a/b:c@d", 5, 3), answer)
    assert holder == LockHolder("a/b:c@d", 5, 9)
    assert sent[0].target == "/v1/locks/a%2Fb%3Ac%40d"
    assert json.loads(sent[0].body or b"") == {"lease": 5, "timeout": 3.0}
    assert sent[0].timeout > 3  # the HTTP timeout covers the server's wait
    for bad in ("", "a b", "x" * 201, "a=b", "a//b", "/a", "a/", "./a", "a/.."):
        with pytest.raises(ValueError):
            _drive(plans.lock(bad, 5, 3), answer)


# -- waiting for a lock --------------------------------------------------------------------


def test_a_lock_wait_asks_again_until_had_and_learns_the_servers_limit() -> None:
    plans = _LeasePlans(_core())
    waits: list[float] = []

    def answer(send: _Send) -> _Reply:
        wait = json.loads(send.body or b"")["timeout"]
        waits.append(wait)
        if wait > 60:
            return _reply(
                400,
                {
                    "code": "invalid_request",
                    "message": "timeout is 0 to 60 seconds (--max-lock-wait)",
                },
            )
        if len(waits) < 4:
            return _reply(409, {"code": "lock_held", "message": "held", "token": 3})
        return _reply(200, {"name": "n", "token": 4, "lease": 5})

    fields = {"lease": 5}
    plan = plans.wait_until("locks", "n", fields, timeout=None, chunk=300, gone=lambda: None)
    assert _drive(plan, answer).token == 4
    assert waits == [300, 60, 60, 60]


def test_a_lock_wait_gives_up_at_its_timeout_and_when_the_lease_is_lost() -> None:
    plans = _LeasePlans(_core())
    asked = [0]

    def held(send: _Send) -> _Reply:
        asked[0] += 1
        return _reply(409, {"code": "lock_held", "message": "held", "token": 3})

    plan = plans.wait_until("locks", "n", {"lease": 5}, timeout=0, chunk=300, gone=lambda: None)
    with pytest.raises(LockHeldError) as caught:
        _drive(plan, held)
    assert caught.value.token == 3 and asked[0] == 1

    lost = LeaseLost("gone", lease_id=5, code="lease_expired")
    plan = plans.wait_until("locks", "n", {"lease": 5}, timeout=None, chunk=300, gone=lambda: lost)
    with pytest.raises(LeaseLost):
        _drive(plan, held)
    assert asked[0] == 1  # nothing more was asked


# -- keeping a lease alive -----------------------------------------------------------------


def test_the_schedule_renews_at_a_third_and_counts_from_the_send() -> None:
    schedule = KeepaliveSchedule(7, 9, sent_at=100.0)
    assert (schedule.due, schedule.valid_until) == (103.0, 109.0)
    schedule.renewed(9, sent_at=103.5)
    assert (schedule.due, schedule.valid_until) == (106.5, 112.5)
    schedule.failed(now=107.0)
    assert schedule.due == pytest.approx(107.9)
    assert not schedule.expired(112.4) and schedule.expired(112.5)
    schedule.failed(now=112.45)
    assert schedule.due == 112.5  # wakes when the lease may have expired
    assert schedule.request_timeout(111.0, 10.0) == 1.5
    assert schedule.request_timeout(112.4, 10.0) == 0.5

    gone = schedule.outcome(LeaseNotFoundError("x", code="lease_expired"))
    assert isinstance(gone, LeaseLost) and gone.code == "lease_expired" and gone.lease_id == 7
    assert schedule.outcome(ClusterUnreachableError("down")) is None
    assert schedule.timed_out(None).code == "keepalive_failed"


def _kept(renew: Callable[[int, float], Lease], ttl: int = 1) -> tuple[KeptLease, list[int]]:
    revoked: list[int] = []

    def revoke(lease_id: int) -> int:
        revoked.append(lease_id)
        return 0

    keeper = LeaseKeeper(KeepaliveSchedule(5, ttl, time.monotonic()), renew, 1.0)
    keeper.start()
    return KeptLease(5, keeper, revoke), revoked


def test_the_keeper_renews_until_revoked() -> None:
    renewed = threading.Event()
    calls: list[int] = []

    def renew(lease_id: int, timeout: float) -> Lease:
        calls.append(lease_id)
        if len(calls) >= 3:
            renewed.set()
        return Lease(lease_id, 1)

    kept, revoked = _kept(renew)
    with kept:
        assert renewed.wait(30)
        assert not kept.lost.is_set()
    assert revoked == [5] and kept.ended and kept.reason is None
    sent = len(calls)
    time.sleep(0.5)
    assert len(calls) == sent  # no keepalive after the revocation


def test_a_lease_that_ended_is_lost_and_the_block_raises() -> None:
    def renew(lease_id: int, timeout: float) -> Lease:
        raise LeaseNotFoundError("gone", code="lease_expired")

    kept, revoked = _kept(renew)
    with pytest.raises(LeaseLost) as caught, kept:
        assert kept.lost.wait(30)
    assert caught.value.code == "lease_expired" and caught.value.lease_id == 5
    assert revoked == []  # it has ended: nothing to revoke


def test_keepalives_failing_for_a_ttl_lose_the_lease() -> None:
    calls: list[float] = []

    def renew(lease_id: int, timeout: float) -> Lease:
        calls.append(timeout)
        raise ClusterUnreachableError("no node")

    kept, revoked = _kept(renew)
    assert kept.lost.wait(30)
    assert kept.reason is not None and kept.reason.code == "keepalive_failed"
    assert len(calls) >= 2  # it tried again before giving up
    sent = len(calls)
    with pytest.raises(LeaseLost):
        kept.__exit__(None, None, None)
    assert revoked == [5]  # it may still exist: revoked to free what it holds
    assert len(calls) == sent


def test_a_lock_lost_is_raised_on_leaving_even_over_the_blocks_own_error() -> None:
    stop = threading.Event()

    def renew(lease_id: int, timeout: float) -> Lease:
        if stop.is_set():
            raise LeaseNotFoundError("gone", code="lease_expired")
        return Lease(lease_id, 1)

    class Client:
        kept: KeptLease

        def lease(self, ttl: int) -> KeptLease:
            self.kept, _ = _kept(renew, ttl)
            return self.kept

        def lock_acquire(self, name: str, lease: Any, timeout: Any = None, **_: Any) -> LockHolder:
            return LockHolder(name, lease.id, 41)

        def unlock(self, name: str, lease: Any) -> None:
            raise AssertionError("a lock under its own lease is released by revoking it")

    client = Client()
    lock = LockContext(client, "n", ttl=1, timeout=None, lease=None, wait_chunk=300)
    with pytest.raises(LockLost) as caught, lock as held:
        assert (held.token, held.key, held.fencing) == (41, "n/5", Fencing("n", 41))
        stop.set()
        assert held.lost.wait(30)
        raise RuntimeError("the block's own failure")
    assert (caught.value.name, caught.value.token) == ("n", 41)
    assert isinstance(caught.value.__context__, RuntimeError)
    assert client.kept.ended


# -- the observe stream --------------------------------------------------------------------


def test_observe_lines_skip_keepalives_and_repeats() -> None:
    observer = Observer(_core(), "e")
    leader = {"name": "e", "lease": 5, "token": 9, "value": "a", "since_ms": 1}
    assert isinstance(observer.line(b"{}\n"), Skip)
    assert observer.line(b'{"leader": null}\n') is None
    assert observer.line(json.dumps(leader).encode()) == LockHolder("e", 5, 9, "a", 1)
    assert isinstance(observer.line(json.dumps({"leader": leader}).encode()), Skip)
    changed = observer.line(json.dumps({**leader, "value": "b"}).encode())
    assert isinstance(changed, LockHolder) and changed.value == "b"
    with pytest.raises(StreamEnded):
        observer.line(b'{"error": {"code": "stalled", "message": "m"}}')


def test_observe_raises_refusals_and_pauses_on_failures() -> None:
    observer = Observer(_core(), "e")
    with pytest.raises(Exception) as refused:
        observer.broken(A, _reply(403, {"code": "permission_denied", "message": "no"}))
    assert getattr(refused.value, "code", None) == "permission_denied"
    assert observer.broken(A, _reply(503, {"code": "no_leader"})) >= 0
    assert observer.broken(A, _Failure(ConnectionRefusedError(), sent=False)) >= 0
