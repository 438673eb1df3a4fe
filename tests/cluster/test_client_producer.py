"""incr, append and idempotent producers in http_api.client, against real node
processes; and the producer's retry rules, driven without a network.

One cluster serves the module (values limited to 1 KiB, so that an append can
outgrow it cheaply). Tests that pause nodes resume them before they end, and
every test uses its own key prefix.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from http_api.client import (
    AsyncRkvClient,
    ClusterUnreachableError,
    Compare,
    IntegerOverflowError,
    InvalidRequestError,
    KeyNotFoundError,
    NotAnIntegerError,
    NotAppliedError,
    Op,
    PayloadTooLargeError,
    Producer,
    ProducerFencedError,
    RetryPolicy,
    RkvClient,
    SequenceError,
    UnknownOutcomeError,
    UnknownProducerError,
    VersionConflictError,
    _Core,
    _Failure,
    _Reply,
    _Send,
    _Sleep,
    producer_headers,
)
from http_api.client.producer import _ProducerCore
from tests.support.cluster import LocalCluster, free_ports, http

pytestmark = pytest.mark.timeout(120)

MAX_VALUE = 1024


@pytest.fixture(scope="module")
def kv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    running = LocalCluster(
        Path(tmp_path_factory.mktemp("producer")) / "cluster",
        extra_args=["--max-value-bytes", str(MAX_VALUE)],
    )
    try:
        running.start()
        yield running
    finally:
        running.stop()


def urls(cluster: LocalCluster) -> list[str]:
    return [node.url for node in cluster.nodes]


def counter(client: RkvClient, key: str) -> int:
    return int(client.get(key).value)


# -- the plain client's incr and append --------------------------------------------------


def test_incr_and_append_on_the_plain_clients(kv: LocalCluster) -> None:
    with RkvClient(urls(kv)) as client:
        assert client.incr("plain/n") == 1
        assert client.incr("plain/n", by=41) == 42
        assert client.incr("plain/n", -50) == -8
        assert client.get("plain/n").value == b"-8"
        assert client.append("plain/s", "ab") == 2
        assert client.append("plain/s", b"\x00cd") == 5
        assert client.get("plain/s").value == b"ab\x00cd"

        with pytest.raises(NotAnIntegerError) as not_int:
            client.incr("plain/s")
        assert not_int.value.code == "not_an_integer" and not_int.value.status == 409
        client.put("plain/max", str(2**63 - 1))
        with pytest.raises(IntegerOverflowError):
            client.incr("plain/max")
        with pytest.raises(ValueError):
            client.incr("plain/n", by=2**63)
        with pytest.raises(ValueError):
            client.incr("plain/n", by=True)
        with pytest.raises(PayloadTooLargeError):  # grows past the limit while applying
            client.append("plain/s", b"x" * (MAX_VALUE - 2))
        assert client.get("plain/s").value == b"ab\x00cd"  # nothing applied

        result = client.txn(
            compare=[Compare.value("plain/n", "-8")],
            success=[Op.incr("plain/n", 10), Op.append("plain/s", "!"), Op.get("plain/s")],
        )
        incr, append, get = result.results
        assert result.succeeded
        assert (incr.op, incr.integer, incr.value, incr.found) == ("incr", 2, b"2", True)
        assert append.op == "append" and append.found and append.version == result.version
        assert get.value == b"ab\x00cd!"
        # A failing incr takes the whole transaction back.
        with pytest.raises(NotAnIntegerError):
            client.txn(success=[Op.put("plain/t", "x"), Op.incr("plain/s")])
        with pytest.raises(KeyNotFoundError):
            client.get("plain/t")

    async def scenario() -> None:
        async with AsyncRkvClient(urls(kv)) as client:
            assert await client.incr("plain/async", 3) == 3
            assert await client.append("plain/async-s", "xyz") == 3

    asyncio.run(scenario())


# -- producers against the cluster ---------------------------------------------------------


def test_producer_writes_and_sequences(kv: LocalCluster) -> None:
    with RkvClient(urls(kv)) as client:
        producer = client.producer()
        assert isinstance(producer, Producer)
        assert producer.producer_id >= 0 and producer.epoch == 0
        assert (producer.next_sequence, producer.pending_sequence) == (0, None)

        version = producer.put("prod/a", "one")
        assert client.get("prod/a").version == version
        assert producer.incr("prod/n") == 1
        assert producer.incr("prod/n", by=9) == 10
        assert producer.append("prod/s", "ab") == 2
        result = producer.txn(
            compare=[Compare.exists("prod/a")],
            success=[Op.incr("prod/n", -3), Op.append("prod/s", "c"), Op.get("prod/s")],
        )
        assert result.succeeded and result.results[0].integer == 7
        assert result.results[2].value == b"abc"
        raw = producer.txn_raw({"success": [{"op": "get", "key": "prod/a"}]}, encoding="utf-8")
        assert raw["results"][0]["value"] == "one"
        assert producer.delete("prod/a", if_version=version) > version
        assert producer.next_sequence == 7 and not producer.last_was_duplicate

        # A business refusal is the sequence's result: it is used, and the next write
        # carries on from the one after (no out_of_order_sequence).
        with pytest.raises(KeyNotFoundError):
            producer.delete("prod/a")
        with pytest.raises(VersionConflictError):
            producer.put("prod/n", "x", create_only=True)
        with pytest.raises(NotAnIntegerError):
            producer.incr("prod/s")
        assert producer.next_sequence == 10
        # An append that outgrows the limit is refused while applying (413, sequence
        # used); a value too large to send is refused before the log (413, unused).
        with pytest.raises(PayloadTooLargeError):
            producer.append("prod/s", b"x" * (MAX_VALUE - 1))
        assert producer.next_sequence == 11
        with pytest.raises(PayloadTooLargeError):
            producer.put("prod/big", b"x" * (MAX_VALUE + 1))
        with pytest.raises(InvalidRequestError):
            producer.put(b"\x00rkv/mine", "x")  # refused before the log: sequence unused
        assert producer.next_sequence == 11
        assert producer.incr("prod/n") == 8
        assert counter(client, "prod/n") == 8 and client.get("prod/s").value == b"abc"


def test_a_retried_sequence_returns_the_first_answer_and_applies_once(kv: LocalCluster) -> None:
    with RkvClient(urls(kv)) as client:
        producer = client.producer()
        assert producer.incr("dup/n", 5) == 5
        with pytest.raises(VersionConflictError):
            producer.put("dup/n", "x", if_version=0)
        assert producer.incr("dup/n") == 6

        # The same sequences again, as a retry after a lost answer would send them:
        # the original answers, marked duplicate, and nothing applied again.
        again = client.resume_producer(producer.producer_id, producer.epoch, 0)
        assert again.incr("dup/n", 5) == 5 and again.last_was_duplicate
        with pytest.raises(VersionConflictError):
            again.put("dup/n", "x", if_version=0)
        assert again.last_was_duplicate
        assert again.incr("dup/n") == 6 and again.last_was_duplicate
        assert counter(client, "dup/n") == 6
        # Then a new sequence: applied.
        assert again.incr("dup/n") == 7 and not again.last_was_duplicate
        assert producer.next_sequence == 3  # the first producer does not know
        with pytest.raises(SequenceError) as behind:  # ... it is told, nothing applied
            client.resume_producer(producer.producer_id, producer.epoch, 5).incr("dup/n")
        assert behind.value.code == "out_of_order_sequence"
        assert counter(client, "dup/n") == 7

        # The raw headers, sent twice by hand.
        leader = kv.leader()
        headers = producer_headers(producer.producer_id, producer.epoch, 4)
        first = http("POST", f"{leader.url}/v1/kv/dup%2Fn?op=incr&by=10", b"", headers)
        second = http("POST", f"{leader.url}/v1/kv/dup%2Fn?op=incr&by=10", b"", headers)
        assert first.status == second.status == 200
        assert first.json()["value"] == second.json()["value"] == 17
        assert "Rkv-Duplicate" not in first.headers
        assert second.headers["Rkv-Duplicate"] == "true"
        assert counter(client, "dup/n") == 17

        with pytest.raises(UnknownProducerError):
            client.resume_producer(10**12, 0).put("dup/x", "never")


def test_fencing_and_reinit_on_fence(kv: LocalCluster) -> None:
    with RkvClient(urls(kv)) as client:
        first = client.producer("fence-app")
        assert first.transactional_id == "fence-app"
        assert first.incr("fence/n") == 1
        second = client.producer("fence-app")
        assert (second.producer_id, second.epoch) == (first.producer_id, first.epoch + 1)

        with pytest.raises(ProducerFencedError) as fenced:
            first.incr("fence/n")
        assert fenced.value.code == "producer_fenced" and not fenced.value.outcome_unknown
        assert counter(client, "fence/n") == 1
        assert second.incr("fence/n") == 2

        # reinit_on_fence: the fenced write is sent again under a new epoch (which in
        # turn fences the other producer).
        resilient = client.resume_producer(
            first.producer_id,
            first.epoch,
            first.next_sequence,
            transactional_id="fence-app",
            reinit_on_fence=True,
        )
        assert resilient.incr("fence/n") == 3
        assert resilient.epoch == second.epoch + 1 and resilient.next_sequence == 1
        with pytest.raises(ProducerFencedError):
            second.incr("fence/n")
        assert counter(client, "fence/n") == 3

        second.reinit()
        assert second.epoch == resilient.epoch + 1 and second.next_sequence == 0
        assert second.incr("fence/n") == 4

        anonymous = client.producer()
        old_id = anonymous.producer_id
        anonymous.reinit()  # no transactional id: a new producer
        assert anonymous.producer_id != old_id and anonymous.epoch == 0


def test_async_producer(kv: LocalCluster) -> None:
    async def scenario() -> None:
        async with AsyncRkvClient(urls(kv)) as client:
            producer = await client.producer("async-app", reinit_on_fence=True)
            assert producer.epoch >= 0 and producer.next_sequence == 0
            assert await producer.put("aprod/k", "v") > 0
            assert await producer.append("aprod/s", "ab") == 2
            # Concurrent calls go one at a time, each under its own sequence.
            values = await asyncio.gather(*(producer.incr("aprod/n") for _ in range(20)))
            assert sorted(values) == list(range(1, 21))
            assert producer.next_sequence == 22
            result = await producer.txn(success=[Op.incr("aprod/n", 5), Op.get("aprod/k")])
            assert result.results[0].integer == 25 and result.results[1].value == b"v"
            assert await producer.delete("aprod/k") > 0
            body = {"success": [{"op": "incr", "key": "aprod/n"}]}
            raw = await producer.txn_raw(body, encoding="utf-8")
            assert raw["results"][0]["value"] == 26

            # The last write again (the server keeps the last five results).
            again = client.resume_producer(producer.producer_id, producer.epoch, 24)
            assert await again.txn_raw(body, encoding="utf-8") == raw
            assert again.last_was_duplicate

            other = await client.producer("async-app")  # fences the first
            assert await producer.incr("aprod/n") == 27  # re-initialised, sent again
            assert producer.epoch == other.epoch + 1
            with pytest.raises(ProducerFencedError):
                await other.incr("aprod/n")
            await other.reinit()
            assert await other.incr("aprod/n") == 28

    asyncio.run(scenario())
    with RkvClient(urls(kv)) as client:
        assert counter(client, "aprod/n") == 28


def test_a_write_left_unknown_is_settled_by_the_next_call(kv: LocalCluster) -> None:
    """With every node paused the write goes out and no answer comes: after the
    deadline it is pending; the next call sends it again first, so the counter
    ends exact whether or not the first attempt was applied."""
    with RkvClient(urls(kv), timeout=0.5) as client:
        producer = client.producer(deadline=1.5)
        assert producer.incr("pending/n") == 1
        paused = []
        try:
            for i in range(len(kv.nodes)):
                kv.pause(i)
                paused.append(i)
            started = time.monotonic()
            with pytest.raises(UnknownOutcomeError) as unknown:
                producer.incr("pending/n")
            assert time.monotonic() - started < 10
            assert "sends it again first" in unknown.value.message
            assert (producer.pending_sequence, producer.next_sequence) == (1, 2)

            # Still unreachable: the pending write stays pending, this one is not sent.
            with pytest.raises(NotAppliedError):
                producer.incr("pending/n", 100)
            assert (producer.pending_sequence, producer.next_sequence) == (1, 2)
        finally:
            for i in paused:
                kv.resume(i)
        kv.wait_ready(nodes=kv.nodes)
        producer.deadline = 30.0
        assert producer.incr("pending/n", 10) == 12  # after the pending +1 (once)
        assert (producer.pending_sequence, producer.next_sequence) == (None, 3)
    with RkvClient(urls(kv)) as client:
        assert counter(client, "pending/n") == 12


# -- the producer's rules, driven without a network --------------------------------------

A, B = "http://a:1", "http://b:1"


def drive(plan: Any, answer: Callable[[_Send], _Reply | _Failure]) -> Any:
    """Run a plan (sleeping for real: the pauses are short); returns its value."""
    outcome: _Reply | _Failure | None = None
    try:
        while True:
            action = plan.send(outcome)
            if isinstance(action, _Sleep):
                time.sleep(action.seconds)
                outcome = None
            else:
                outcome = answer(action)
    except StopIteration as stop:
        return stop.value


def reply(status: int, body: dict[str, Any], **headers: str) -> _Reply:
    return _Reply(
        status,
        {k.lower().replace("_", "-"): v for k, v in headers.items()},
        json.dumps(body).encode(),
    )


class Script:
    """A fake leader A: /v1/status names it; writes and POST /v1/producers get the
    scripted answers in turn; every request is recorded."""

    def __init__(self, *answers: _Reply | _Failure) -> None:
        self.answers = list(answers)
        self.sent: list[_Send] = []

    def __call__(self, send: _Send) -> _Reply | _Failure:
        if send.target == "/v1/status":
            return reply(200, {"leader": {"id": "a", "url": A}, "members": [{"url": A}]})
        self.sent.append(send)
        return self.answers.pop(0)

    def tags(self) -> list[tuple[str, str, str] | None]:
        """(id, epoch, sequence) of each write; None for a POST /v1/producers."""
        return [
            None
            if s.target == "/v1/producers"
            else (
                s.headers["Rkv-Producer-Id"],
                s.headers["Rkv-Producer-Epoch"],
                s.headers["Rkv-Sequence"],
            )
            for s in self.sent
        ]


def producer(
    next_sequence: int = 0, *, reinit_on_fence: bool = False, deadline: float = 5.0
) -> _ProducerCore:
    core = _Core([A], 1.0, RetryPolicy(initial_backoff=0.001, max_backoff=0.01))
    return _ProducerCore.resumed(
        core,
        7,
        2,
        next_sequence,
        transactional_id="t",
        reinit_on_fence=reinit_on_fence,
        deadline=deadline,
    )


def incr(state: _ProducerCore) -> Any:
    return state.write(state.core.incr_request("k", 1))


OK = reply(200, {"key": "aw==", "value": 5, "version": 9})
UNKNOWN = reply(503, {"code": "unknown_outcome", "message": "timed out"})
FENCED = reply(409, {"code": "producer_fenced", "message": "fenced"})


def test_a_producer_resends_the_same_sequence_on_every_unknown_outcome() -> None:
    state = producer(3)
    script = Script(
        UNKNOWN,
        _Failure(ConnectionResetError("reset"), sent=True),
        _Failure(TimeoutError(), sent=True),
        reply(500, {"code": "internal_error"}),
        reply(503, {"code": "overloaded"}, retry_after="0"),
        reply(503, {"code": "not_applied"}),
        reply(200, {"key": "aw==", "value": 5, "version": 9}, rkv_duplicate="true"),
    )
    assert drive(incr(state), script) == 5
    assert script.tags() == [("7", "2", "3")] * 7
    assert state.last_was_duplicate and state.next_sequence == 4 and state.pending is None

    # The plain client never resends a write whose outcome is unknown.
    plain = Script(UNKNOWN)
    with pytest.raises(UnknownOutcomeError):
        drive(state.core.incr("k", 1), plain)
    assert len(plain.sent) == 1 and "Rkv-Sequence" not in plain.sent[0].headers


def test_fenced_writes_are_resent_under_a_new_epoch_only_when_surely_not_applied() -> None:
    state = producer(4, reinit_on_fence=True)
    script = Script(FENCED, reply(200, {"producer_id": 7, "epoch": 3}), OK)
    assert drive(incr(state), script) == 5
    assert script.tags() == [("7", "2", "4"), None, ("7", "3", "0")]
    assert json.loads(script.sent[1].body or b"") == {"transactional_id": "t"}
    assert (state.epoch, state.next_sequence) == (3, 1)

    # An earlier attempt went unanswered: it may have been applied before the fence,
    # so the write is not sent again (the producer still moves to the new epoch).
    state = producer(4, reinit_on_fence=True)
    script = Script(UNKNOWN, FENCED, reply(200, {"producer_id": 7, "epoch": 3}))
    with pytest.raises(ProducerFencedError) as fenced:
        drive(incr(state), script)
    assert fenced.value.outcome_unknown
    assert script.tags() == [("7", "2", "4"), ("7", "2", "4"), None]
    assert (state.epoch, state.next_sequence, state.pending) == (3, 0, None)

    state = producer(4)  # without reinit_on_fence: raised, nothing else sent
    script = Script(FENCED)
    with pytest.raises(ProducerFencedError):
        drive(incr(state), script)
    assert len(script.sent) == 1 and (state.epoch, state.next_sequence) == (2, 4)


def test_an_ambiguous_refusal_is_asked_again_to_learn_whether_the_sequence_was_used() -> None:
    too_large = reply(413, {"code": "payload_too_large", "message": "too large"})
    state = producer(1)
    script = Script(too_large, too_large, OK)  # refused before the log: not a duplicate
    with pytest.raises(PayloadTooLargeError):
        drive(incr(state), script)
    assert drive(incr(state), script) == 5
    assert script.tags() == [("7", "2", "1")] * 3  # the sequence was used only by the OK
    assert not state.last_was_duplicate and state.next_sequence == 2

    state = producer(1)
    script = Script(too_large, reply(413, {"code": "payload_too_large"}, rkv_duplicate="true"), OK)
    with pytest.raises(PayloadTooLargeError):  # refused while applying: the sequence is used
        drive(incr(state), script)
    assert not state.last_was_duplicate  # the caller's own answer was not a repeat
    assert drive(incr(state), script) == 5
    assert script.tags() == [("7", "2", "1"), ("7", "2", "1"), ("7", "2", "2")]


def test_after_the_deadline_the_next_call_settles_the_pending_write_first() -> None:
    state = producer(5, deadline=0.3)
    answers: list[_Reply | _Failure] = [UNKNOWN] * 1000
    script = Script(*answers)
    with pytest.raises(UnknownOutcomeError):
        drive(incr(state), script)
    assert state.pending is not None and state.pending.sequence == 5
    assert state.next_sequence == 6
    assert {tag for tag in script.tags()} == {("7", "2", "5")}

    script = Script(reply(409, {"code": "not_an_integer"}), OK)  # the pending one's result
    assert drive(state.write(state.core.put_request("other", "v", None, False)), script) == 9
    assert script.tags() == [("7", "2", "5"), ("7", "2", "6")]
    assert script.sent[0].target.endswith("op=incr&by=1")  # the pending request itself
    assert script.sent[1].method == "PUT"
    assert state.pending is None and state.next_sequence == 7

    # Nothing was ever sent (no node reachable): the sequence stays free, no pending.
    state = producer(5, deadline=0.3)
    refused: list[_Reply | _Failure] = [_Failure(ConnectionRefusedError(), sent=False)] * 1000

    def unreachable(send: _Send) -> _Reply | _Failure:
        return refused.pop()

    with pytest.raises(ClusterUnreachableError):
        drive(incr(state), unreachable)
    assert state.pending is None and state.next_sequence == 5


def test_producer_arguments_are_checked() -> None:
    (port,) = free_ports(1)
    with RkvClient(f"http://127.0.0.1:{port}") as client:
        for bad in ((-1, 0, 0), (1, -1, 0), (1, 0, -1), (True, 0, 0)):
            with pytest.raises(ValueError):
                client.resume_producer(*bad)
        with pytest.raises(ValueError):
            client.resume_producer(1, 0, deadline=0)
        started = time.monotonic()
        with pytest.raises(ClusterUnreachableError):
            client.producer(deadline=0.5)
        assert time.monotonic() - started < 5
