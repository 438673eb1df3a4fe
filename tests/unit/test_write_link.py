"""The writes an HTTP worker has its main process propose (node/cli/write_link.py):
the command and result encodings, the frame payloads, and a real link pair with
main's proposing replaced by a recording function."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable

import pytest

from node.cli.worker_link import FRAME_PIECE_BYTES, Link, Message, link_pair
from node.cli.write_link import (
    RESULTS,
    WRITES,
    WriteClient,
    WriteServer,
    pack_results,
    pack_writes,
    unpack_results,
    unpack_writes,
    worker_write,
)
from node.errors import (
    EntryDecodeError,
    InvalidRequest,
    NotApplied,
    NotLeader,
    Overloaded,
    RequestError,
    Unavailable,
    UnknownOutcome,
)
from node.state.commands import (
    Append,
    Barrier,
    Command,
    Compare,
    CompareTarget,
    Delete,
    Fenced,
    Incr,
    InitProducer,
    Produced,
    Put,
    Txn,
    TxnAppend,
    TxnDelete,
    TxnGet,
    TxnIncr,
    TxnPut,
    decode_command,
    encode_command,
)
from node.state.lease_commands import LeasedPut
from node.state.results import (
    CommandResult,
    OpResult,
    ResultCode,
    decode_result,
    encode_result,
)

TXN = Txn(
    (
        Compare(b"c/v", CompareTarget.VERSION, 3),
        Compare(b"c/x", CompareTarget.VALUE, b"\x00\xff"),
        Compare(b"c/e", CompareTarget.EXISTS, False),
    ),
    (TxnPut(b"k", b"v"), TxnDelete(b"d"), TxnGet(b"g"), TxnIncr(b"n", -4), TxnAppend(b"a", b"s")),
    (TxnGet(b"f"), TxnPut(b"l", b"on a lease", 7)),
    max_result_bytes=1 << 20,
)

WORKER_COMMANDS: list[Command] = [
    Put(b"k", b"v"),
    Put(b"k", b"", 0),
    Put(b"\xff" * 300, b"x" * 100_000, 12),
    Delete(b"k"),
    Delete(b"k", 5),
    Incr(b"n", -(2**63)),
    Incr(b"n", 2**63 - 1),
    Append(b"a", b"tail"),
    Txn(),
    TXN,
    Fenced("lock/a", 9, Put(b"k", b"v", 1)),
    Fenced("lock/a", 9, TXN),
    Produced(11, 2, 40, Put(b"k", b"v")),
    Produced(11, 2, 41, Delete(b"k", 3)),
    Produced(11, 2, 42, Incr(b"n", 1)),
    Produced(11, 2, 43, Append(b"a", b"s")),
    Produced(11, 2, 44, TXN),
    Produced(11, 2, 45, Fenced("lock/a", 9, Append(b"a", b"s"))),
]


@pytest.mark.parametrize("command", WORKER_COMMANDS, ids=lambda c: type(c).__name__)
def test_every_command_a_worker_sends_round_trips(command: Command) -> None:
    assert worker_write(command)
    assert decode_command(encode_command(command)) == command


def test_a_command_no_worker_sends_is_refused_by_main() -> None:
    assert not worker_write(Barrier())
    assert not worker_write(InitProducer(None, 1000))
    assert not worker_write(Produced(1, 0, 1, Fenced("l", 1, LeasedPut(b"k", b"v", None, 3))))


@pytest.mark.parametrize(
    "data", [b"", b"\x09\x90", b"\x01\xc1", b"\x01" + b"\x92\x63\x00", b"\x01\x94\x01\xa1k"]
)
def test_malformed_command_bytes_are_an_entry_decode_error(data: bytes) -> None:
    with pytest.raises(EntryDecodeError):
        decode_command(data)


RESULTS_TO_SEND = [
    CommandResult(ResultCode.OK, 7),
    CommandResult(ResultCode.OK, 8, value=b"42", duplicate=True),
    CommandResult(ResultCode.VERSION_CONFLICT, 0, 5, "expected version 1, found 5"),
    CommandResult(ResultCode.FENCED, current_version=12, message="lock held with token 12"),
    CommandResult(
        ResultCode.OK,
        9,
        succeeded=False,
        op_results=(
            OpResult("get", b"g", True, 4, 2, b"\x00value"),
            OpResult("delete", b"d", False, 0),
            OpResult("incr", b"n", True, 9, 9, b"-3"),
        ),
    ),
    CommandResult(ResultCode.OK, 3, producer_id=77, epoch=2),
    CommandResult(ResultCode.OUT_OF_ORDER_SEQUENCE, message="sequence 5 after 2"),
]


@pytest.mark.parametrize("result", RESULTS_TO_SEND)
def test_every_field_of_a_result_round_trips(result: CommandResult) -> None:
    assert decode_result(encode_result(result)) == result


@pytest.mark.parametrize("data", [b"", b"\x90", b"\x9a" + b"\xc0" * 10, b"\xc1"])
def test_malformed_result_bytes_are_an_entry_decode_error(data: bytes) -> None:
    with pytest.raises(EntryDecodeError):
        decode_result(data)


def test_frame_payloads_hold_their_items_in_order() -> None:
    writes = [(1, b"abc"), (2**64 - 1, b""), (3, b"x" * 70_000)]
    assert list(unpack_writes(pack_writes(writes))) == writes
    results = [(5, 0, b"r"), (6, 1, b'{"kind": "NotLeader"}')]
    assert list(unpack_results(pack_results(results))) == results
    with pytest.raises(EntryDecodeError):
        list(unpack_writes(pack_writes(writes)[:-1]))
    with pytest.raises(EntryDecodeError):
        list(unpack_results(pack_results(results)[:-2]))


class _Pair:
    """A worker's WriteClient and main's WriteServer over a real link pair."""

    def __init__(self, execute: Callable[[Command], Awaitable[CommandResult]]) -> None:
        main_end, worker_end = link_pair()
        self.frames: list[int] = []
        self.proposed: list[Command] = []

        def on_main_frame(kind: int, payload: bytes) -> None:
            assert kind == WRITES
            self.frames.append(len(list(unpack_writes(payload))))
            self.server.on_writes(payload)

        def ignore(message: Message, passed: socket.socket | None) -> None:
            pass

        self.main = Link(main_end, ignore, lambda: None, on_main_frame)
        self.server = WriteServer(self.main, execute)
        self.worker = Link(worker_end, ignore, self._worker_ended, self._on_worker_frame)
        self.client = WriteClient(self.worker)

    def _worker_ended(self) -> None:
        self.client.on_end()

    def _on_worker_frame(self, kind: int, payload: bytes) -> None:
        assert kind == RESULTS
        self.client.on_results(payload)

    def close(self) -> None:
        self.main.close()
        self.worker.close()


@pytest.mark.asyncio
async def test_concurrent_writes_share_one_frame_and_each_gets_its_result() -> None:
    proposed: list[Command] = []

    async def execute(command: Command) -> CommandResult:
        proposed.append(command)
        await asyncio.sleep(0)
        assert isinstance(command, Put)
        return CommandResult(ResultCode.OK, int(command.value))

    pair = _Pair(execute)
    try:
        commands = [Put(b"k%d" % i, b"%d" % i) for i in range(50)]
        results = await asyncio.gather(*(pair.client.propose(c) for c in commands))
        assert [r.version for r in results] == list(range(50))
        assert pair.frames == [50]  # queued in one turn of the loop: one frame
        assert proposed == commands  # each proposed once, in order
        assert pair.server.proposed == 50
    finally:
        pair.close()


@pytest.mark.asyncio
async def test_a_command_larger_than_a_datagram_crosses_in_pieces() -> None:
    async def execute(command: Command) -> CommandResult:
        assert isinstance(command, Put)
        return CommandResult(ResultCode.OK, 1, value=command.value)

    pair = _Pair(execute)
    try:
        value = bytes(range(256)) * (3 * FRAME_PIECE_BYTES // 256 + 7)
        result = await pair.client.propose(Put(b"big", value))
        assert result.value == value
    finally:
        pair.close()


@pytest.mark.parametrize(
    "error",
    [
        NotLeader("this node does not lead", "http://127.0.0.1:9"),
        Overloaded("too many proposals in flight"),
        NotApplied("the leader changed before it was committed"),
        UnknownOutcome("the leader changed after it was sent"),
        InvalidRequest("bad", code="invalid_key"),
    ],
    ids=lambda e: type(e).__name__,
)
@pytest.mark.asyncio
async def test_an_error_main_raises_reaches_the_worker_as_the_same_error(
    error: RequestError,
) -> None:
    async def execute(command: Command) -> CommandResult:
        raise error

    pair = _Pair(execute)
    try:
        with pytest.raises(RequestError) as caught:
            await pair.client.propose(Delete(b"k"))
        got = caught.value
        assert type(got) is type(error)
        assert (got.code, got.message) == (error.code, error.message)
        assert getattr(got, "leader_url", None) == getattr(error, "leader_url", None)
        assert getattr(got, "retry_after", None) == getattr(error, "retry_after", None)
    finally:
        pair.close()


@pytest.mark.asyncio
async def test_main_refuses_a_command_no_worker_may_send() -> None:
    async def execute(command: Command) -> CommandResult:
        raise AssertionError("never proposed")

    pair = _Pair(execute)
    try:
        with pytest.raises(InvalidRequest):
            await pair.client.propose(Barrier())
    finally:
        pair.close()


@pytest.mark.asyncio
async def test_a_link_that_ends_mid_write_is_an_unknown_outcome_never_a_retry() -> None:
    calls: list[Command] = []
    proposing = asyncio.Event()

    async def execute(command: Command) -> CommandResult:
        calls.append(command)
        proposing.set()
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    pair = _Pair(execute)
    try:
        write = asyncio.create_task(pair.client.propose(Put(b"k", b"v")))
        await proposing.wait()
        pair.main.close()  # main's end goes: the worker's link sees its end
        with pytest.raises(UnknownOutcome):
            await asyncio.wait_for(write, 10)
        assert calls == [Put(b"k", b"v")]
        with pytest.raises(Unavailable) as refused:  # and nothing more is sent
            await pair.client.propose(Put(b"k", b"w"))
        assert refused.value.code == "node_stopping"
        assert calls == [Put(b"k", b"v")]
    finally:
        pair.server.cancel()
        pair.close()
