"""A bulk load (POST /v1/kv:load) from the client side, without the I/O.

The body is JSON Lines, streamed: pairs given as (key, value) are sent as
``{"key": base64, "value": base64}`` lines; a file's lines are sent as they
are, with the ``encoding`` the file uses (base64 or utf-8). Lines go in
blocks of about :data:`BLOCK_BYTES` as they are read, so neither the client
nor the node holds the whole input.

The answer is NDJSON progress (docs/BULK_LOAD.md): :class:`LoadTally`
turns each line into a :class:`LoadProgress` counted from the start of the
input (lines skipped by a resume included), and into :class:`LoadInterrupted`
when the load stopped: its ``progress.lines`` is exactly how many lines of the
input are committed, so ``load(..., skip=error.progress.lines)`` resumes it
(a put of the same value again is harmless).
"""

from __future__ import annotations

import base64
import itertools
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from http_api.client.errors import RkvClientError
from http_api.client.model import BytesLike, to_bytes
from http_api.client.wire import _Reply, error_from_reply

LOAD_PATH = "/v1/kv:load"
_BODY_LINE = re.compile(r"^line \d+: ")
BLOCK_BYTES = 256 * 1024
LoadSource = Iterable[tuple[BytesLike, BytesLike]] | str | Path


@dataclass(frozen=True, slots=True)
class LoadProgress:
    """``lines`` of the input are committed (blank ones and those skipped by a resume
    included), ``loaded`` pairs of them by this call; ``version`` is the offset of the
    last put committed (0: none yet), for reads with ``min_version``."""

    loaded: int
    lines: int
    version: int


class LoadInterrupted(RkvClientError):
    """A bulk load stopped: ``progress`` is what is committed, ``line`` the input line
    that failed (None when the connection broke), ``cause`` the error (typed as any
    other answer: InvalidRequestError for a bad line, PermissionDeniedError...)."""

    default_code = "load_interrupted"

    def __init__(
        self, cause: RkvClientError, progress: LoadProgress, line: int | None = None
    ) -> None:
        # The node numbers the lines of its request's body; ``line`` counts from the
        # start of the input (a resume's skipped lines included).
        reason = _BODY_LINE.sub("", cause.message)
        where = f"line {line}: " if line is not None else ""
        super().__init__(
            f"the load stopped after {progress.lines} lines committed: {where}{reason}",
            code=cause.code,
            status=cause.status,
            url=cause.url,
        )
        self.cause = cause
        self.progress = progress
        self.line = line


def pair_lines(pairs: Iterable[tuple[BytesLike, BytesLike]], skip: int) -> Iterator[bytes]:
    """One base64 JSON line per pair, after the first ``skip`` pairs."""
    b64 = base64.b64encode
    for index, (key, value) in enumerate(pairs):
        if index >= skip:
            yield b'{"key":"%s","value":"%s"}\n' % (
                b64(to_bytes(key, "key")),
                b64(to_bytes(value, "value")),
            )


def file_lines(path: Path, skip: int) -> Iterator[bytes]:
    """The file's lines after the first ``skip`` (each ending with a newline)."""
    with path.open("rb") as source:
        for index, line in enumerate(source):
            if index >= skip:
                yield line if line.endswith(b"\n") else line + b"\n"


def source_lines(source: LoadSource, skip: int) -> Iterator[bytes] | None:
    """The lines to send, or None when there are none (a node refuses an empty load)."""
    lines = (
        file_lines(Path(source), skip)
        if isinstance(source, str | Path)
        else pair_lines(source, skip)
    )
    first = next(lines, None)
    if first is None:
        return None
    return itertools.chain((first,), lines)


def blocks(lines: Iterable[bytes]) -> Iterator[bytes]:
    """The lines joined into blocks of about BLOCK_BYTES."""
    block: list[bytes] = []
    size = 0
    for line in lines:
        block.append(line)
        size += len(line)
        if size >= BLOCK_BYTES:
            yield b"".join(block)
            block, size = [], 0
    if block:
        yield b"".join(block)


class LoadTally:
    """The progress of one load request whose body starts at input line ``skip``."""

    def __init__(self, skip: int) -> None:
        self.skip = skip
        self.progress = LoadProgress(0, skip, 0)
        self.done = False

    def _counts(self, item: dict[str, Any]) -> LoadProgress:
        def number(name: str) -> int:
            value = item.get(name)
            return value if isinstance(value, int) else 0

        return LoadProgress(number("loaded"), self.skip + number("lines"), number("version"))

    def feed(self, raw: bytes, url: str) -> LoadProgress:
        """Take one NDJSON line of the answer; raises LoadInterrupted for an error line."""
        try:
            item = json.loads(raw)
        except ValueError:
            raise LoadInterrupted(
                RkvClientError(f"a progress line is not JSON: {raw[:100]!r}", url=url),
                self.progress,
            ) from None
        if not isinstance(item, dict):
            item = {}
        self.progress = self._counts(item)
        error = item.get("error")
        if isinstance(error, dict):
            raise self.interrupted(error, url)
        if item.get("done") is True:
            self.done = True
        return self.progress

    def refused(self, reply: _Reply, url: str) -> LoadInterrupted:
        """The load answered with a status other than 200 (nothing streamed)."""
        body = reply.json()
        cause = error_from_reply(reply, url)
        if isinstance(body, dict) and "lines" in body:
            self.progress = self._counts(body)
            line = body.get("line")
            return LoadInterrupted(cause, self.progress, self._line(line))
        return LoadInterrupted(cause, self.progress)

    def interrupted(self, error: dict[str, Any], url: str) -> LoadInterrupted:
        """The error line that ended a streamed answer."""
        code = str(error.get("code", "error"))
        reply_status = _STATUS_OF_CODE.get(code, 400)
        cause = error_from_reply(_Reply(reply_status, {}, json.dumps(error).encode()), url)
        return LoadInterrupted(cause, self.progress, self._line(error.get("line")))

    def broken(self, error: BaseException, url: str) -> LoadInterrupted:
        """The connection broke: what the last progress line said is committed."""
        cause = RkvClientError(f"the connection broke: {error!r}", code="unreachable", url=url)
        return LoadInterrupted(cause, self.progress)

    def _line(self, line: object) -> int | None:
        return self.skip + line if isinstance(line, int) else None


# An error after progress was streamed comes as a line: its code tells its kind.
_STATUS_OF_CODE = {
    "permission_denied": 403,
    "payload_too_large": 413,
    "line_too_long": 413,
    "request_timeout": 408,
    "not_applied": 503,
    "no_leader": 503,
    "unknown_outcome": 503,
    "overloaded": 503,
    "node_not_ready": 503,
}
