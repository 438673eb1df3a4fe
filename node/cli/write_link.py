"""Key-value writes served by an HTTP worker, proposed by the node's main process.

The worker parses, checks and authorizes the request and builds the command as
main's route would (node/service/kv_writes.py, shared by both); it sends only
the command over the link (node/cli/worker_link.py, binary frames) and main
proposes it (``KvService.execute``) and sends back the raw CommandResult, or the
RequestError proposing raised (NotLeader, Overloaded, UnknownOutcome...).

Frame payloads (big-endian), items back to back:

- ``WRITES`` (1, worker -> main): per command ``id: u64, length: u32``, then
  :func:`node.state.commands.encode_command`'s bytes;
- ``RESULTS`` (2, main -> worker): per answer ``id: u64, status: u8,
  length: u32``, then for status 0 :func:`node.state.results.encode_result`'s
  bytes, for status 1 the error as UTF-8 JSON
  (:func:`node.cli.worker_link.encode_error`).

Batching: commands queued while the worker's event loop runs go out in one
frame on its next turn, and so do the results main has at hand; main's
proposer then groups them into raft entries as it does its own.

A command is sent at most once: once sent, nothing retries it. When the link
ends before its result came, the write's outcome is unknown (503
``unknown_outcome``); one that had not been sent yet was not applied (503
``node_stopping``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import struct
from collections.abc import Awaitable, Callable, Iterator

from node.cli.worker_link import Link, decode_error, encode_error
from node.errors import (
    EntryDecodeError,
    InvalidRequest,
    RequestError,
    Unavailable,
    UnknownOutcome,
)
from node.state.commands import (
    Append,
    Command,
    Delete,
    Fenced,
    Incr,
    Produced,
    Put,
    Txn,
    decode_command,
    encode_command,
)
from node.state.results import CommandResult, decode_result, encode_result

logger = logging.getLogger(__name__)

WRITES = 1
RESULTS = 2
_WRITE_HEAD = struct.Struct(">QI")
_RESULT_HEAD = struct.Struct(">QBI")
_OK = 0
_ERROR = 1
BATCH_BYTES = 256 * 1024
"""A frame is cut after the item that takes it past this many bytes."""

WORKER_WRITES = (Put, Delete, Incr, Append, Txn)
"""What a worker may ask main to propose (each may be Fenced, then Produced)."""


def pack_writes(items: list[tuple[int, bytes]]) -> bytes:
    return b"".join(_WRITE_HEAD.pack(ident, len(data)) + data for ident, data in items)


def unpack_writes(payload: bytes) -> Iterator[tuple[int, bytes]]:
    view = memoryview(payload)
    at = 0
    while at < len(view):
        ident, length = _WRITE_HEAD.unpack_from(view, at)
        at += _WRITE_HEAD.size
        if at + length > len(view):
            raise EntryDecodeError("a write frame ends inside a command")
        yield ident, bytes(view[at : at + length])
        at += length


def pack_results(items: list[tuple[int, int, bytes]]) -> bytes:
    return b"".join(
        _RESULT_HEAD.pack(ident, status, len(data)) + data for ident, status, data in items
    )


def unpack_results(payload: bytes) -> Iterator[tuple[int, int, bytes]]:
    view = memoryview(payload)
    at = 0
    while at < len(view):
        ident, status, length = _RESULT_HEAD.unpack_from(view, at)
        at += _RESULT_HEAD.size
        if at + length > len(view):
            raise EntryDecodeError("a result frame ends inside a result")
        yield ident, status, bytes(view[at : at + length])
        at += length


def worker_write(command: Command) -> bool:
    """Whether ``command`` is one a worker may send (WORKER_WRITES, maybe wrapped)."""
    if isinstance(command, Produced):
        command = command.command
    if isinstance(command, Fenced):
        command = command.command
    return isinstance(command, WORKER_WRITES)


class _Outbox:
    """Items queued during one turn of the event loop, sent as frames on the next."""

    def __init__(self, send: Callable[[list[bytes]], None]) -> None:
        self._send = send
        self._items: list[bytes] = []
        self._scheduled = False

    def add(self, item: bytes) -> None:
        self._items.append(item)
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._scheduled = False
        frame: list[bytes] = []
        size = 0
        for item in self._items:
            frame.append(item)
            size += len(item)
            if size >= BATCH_BYTES:
                self._send(frame)
                frame, size = [], 0
        if frame:
            self._send(frame)
        self._items.clear()


class WriteClient:
    """The worker's side: :meth:`propose` sends a command and waits for its result."""

    def __init__(self, link: Link) -> None:
        self._link = link
        self._next_id = 0
        self._waiting: dict[int, asyncio.Future[CommandResult]] = {}
        self._unsent: set[int] = set()
        self._outbox = _Outbox(self._send)

    async def propose(self, command: Command) -> CommandResult:
        if self._link.ended:
            raise Unavailable("the node's main process is gone", code="node_stopping")
        self._next_id += 1
        ident = self._next_id
        data = encode_command(command)
        future: asyncio.Future[CommandResult] = asyncio.get_running_loop().create_future()
        self._waiting[ident] = future
        self._unsent.add(ident)
        self._outbox.add(_WRITE_HEAD.pack(ident, len(data)) + data)
        try:
            return await future
        finally:
            self._waiting.pop(ident, None)
            self._unsent.discard(ident)

    def _send(self, items: list[bytes]) -> None:
        for item in items:
            self._unsent.discard(_WRITE_HEAD.unpack_from(item)[0])
        self._link.send_frame(WRITES, b"".join(items))

    def on_results(self, payload: bytes) -> None:
        try:
            answers = list(unpack_results(payload))
        except (EntryDecodeError, struct.error) as exc:
            logger.error("dropped a malformed result frame: %s", exc)
            return
        for ident, status, data in answers:
            future = self._waiting.get(ident)
            if future is None or future.done():
                continue
            try:
                if status == _OK:
                    future.set_result(decode_result(data))
                else:
                    future.set_exception(decode_error(json.loads(data)))
            except (EntryDecodeError, ValueError) as exc:
                future.set_exception(
                    UnknownOutcome(f"the node's answer to this write is unreadable: {exc}")
                )

    def on_end(self) -> None:
        """The link ended: writes sent have an unknown outcome; the rest were not sent."""
        for ident, future in self._waiting.items():
            if future.done():
                continue
            if ident in self._unsent:
                future.set_exception(
                    Unavailable("the node's main process is gone", code="node_stopping")
                )
            else:
                future.set_exception(
                    UnknownOutcome(
                        "the node's main process ended before answering: the write may or "
                        "may not have been applied"
                    )
                )


class WriteServer:
    """Main's side, for one worker: proposes what it sends and answers each."""

    def __init__(self, link: Link, execute: Callable[[Command], Awaitable[CommandResult]]) -> None:
        self._link = link
        self._execute = execute
        self._tasks: set[asyncio.Task[None]] = set()
        self._outbox = _Outbox(lambda items: link.send_frame(RESULTS, b"".join(items)))
        self.proposed = 0
        """Commands proposed for this worker (/v1/status ``http_workers``: ``writes``)."""

    def on_writes(self, payload: bytes) -> None:
        try:
            writes = list(unpack_writes(payload))
        except (EntryDecodeError, struct.error) as exc:
            logger.error("dropped a malformed write frame: %s", exc)
            return
        for ident, data in writes:
            task = asyncio.create_task(self._run(ident, data))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run(self, ident: int, data: bytes) -> None:
        try:
            command = decode_command(data)
            if not worker_write(command):
                raise InvalidRequest(f"a worker may not propose {type(command).__name__}")
            self.proposed += 1
            result = await self._execute(command)
        except asyncio.CancelledError:
            raise
        except EntryDecodeError as exc:
            self._answer(ident, _ERROR, InvalidRequest(f"malformed command: {exc}"))
        except RequestError as exc:  # the worker answers it as main would
            self._answer(ident, _ERROR, exc)
        except Exception as exc:
            logger.exception("proposing a worker's write failed")
            self._answer(ident, _ERROR, UnknownOutcome(f"proposing the write failed: {exc}"))
        else:
            self._answer(ident, _OK, result)

    def _answer(self, ident: int, status: int, answer: CommandResult | BaseException) -> None:
        if isinstance(answer, BaseException):
            data = json.dumps(encode_error(answer)).encode()
        else:
            data = encode_result(answer)
        self._outbox.add(_RESULT_HEAD.pack(ident, status, len(data)) + data)

    def cancel(self) -> None:
        for task in list(self._tasks):
            task.cancel()
