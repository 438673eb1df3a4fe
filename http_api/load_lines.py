"""The lines of a bulk load body (POST /v1/kv:load): reading and parsing them.

A body is JSON Lines, one ``{"key": K, "value": V}`` per line, keys and values
base64 unless ``?encoding=utf-8`` (as everywhere in the API). Lines end with
``\\n`` (a ``\\r`` before it is JSON whitespace); blank lines are skipped but
counted, so a line number is the line of the file. The body is read a block at a
time, never whole: at most one block and one line are held, and a line longer
than ``max_line`` is refused before more of it is read.
"""

from __future__ import annotations

import asyncio
import binascii
from collections.abc import AsyncIterator, Callable

import orjson
from aiohttp import StreamReader
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError

from node.errors import InvalidRequest, PayloadTooLarge, RequestError, RequestTimeout

READ_BLOCK = 256 * 1024


class LineError(Exception):
    """Line ``line`` (1-based) of the body cannot be loaded: ``error`` says why."""

    def __init__(self, line: int, error: RequestError) -> None:
        super().__init__(f"line {line}: {error.message}")
        self.line = line
        self.error = error


async def body_lines(
    content: StreamReader, max_line: int, read_timeout: float
) -> AsyncIterator[list[bytes]]:
    """The body's lines, a block's worth at a time (without their ``\\n``); the last
    one may lack its ``\\n``. Each read must come within ``read_timeout`` seconds.
    Raises LineError for a line over ``max_line`` bytes (naming it) and
    RequestError for a body that stops arriving or cannot be read."""
    rest = b""
    done = 0  # lines yielded so far
    while True:
        block = await _read(content, read_timeout)
        if not block:
            break
        lines = (rest + block).split(b"\n") if rest else block.split(b"\n")
        rest = lines.pop()
        if lines:
            if max(map(len, lines)) > max_line:
                longest = next(i for i, line in enumerate(lines) if len(line) > max_line)
                yield lines[:longest]  # the lines before it are loaded first
                _too_long(done + longest + 1, max_line)
            done += len(lines)
            yield lines
        if len(rest) > max_line:
            _too_long(done + 1, max_line)
    if rest:
        yield [rest]


def _too_long(line: int, max_line: int) -> None:
    raise LineError(
        line,
        PayloadTooLarge(
            f"the line is longer than {max_line} bytes, the most the largest key and "
            "value take (--max-value-bytes)",
            code="line_too_long",
        ),
    )


async def _read(content: StreamReader, timeout: float) -> bytes:
    try:
        async with asyncio.timeout(timeout):
            return await content.readany()
    except TimeoutError:
        content.feed_eof()
        late = RequestTimeout(
            f"the body sent nothing for {timeout:g} s (--http-read-timeout)",
        )
        late.close_connection = True
        raise late from None
    except (HttpProcessingError, RequestPayloadError) as exc:
        content.feed_eof()
        message = exc.message if isinstance(exc, HttpProcessingError) else str(exc)
        unreadable = InvalidRequest(f"the body cannot be read: {message.strip()}")
        unreadable.close_connection = True
        raise unreadable from None


LineParser = Callable[[bytes], tuple[bytes, bytes]]


def line_parser(encoding: str) -> LineParser:
    """The parser of one non-blank line into (key, value): raises RequestError."""
    decode = _base64 if encoding == "base64" else _utf8

    def parse(line: bytes) -> tuple[bytes, bytes]:
        try:
            item = orjson.loads(line)
        except orjson.JSONDecodeError:
            raise InvalidRequest('not JSON: a line is {"key": K, "value": V}') from None
        if type(item) is not dict or len(item) != 2 or "key" not in item or "value" not in item:
            raise InvalidRequest('a line is an object {"key": K, "value": V} and nothing else')
        return decode(item["key"], "key"), decode(item["value"], "value")

    return parse


def _base64(text: object, what: str) -> bytes:
    if type(text) is not str:
        raise InvalidRequest(f"{what} must be a string")
    try:
        return binascii.a2b_base64(text, strict_mode=True)
    except (binascii.Error, ValueError):
        raise InvalidRequest(f"{what} is not valid base64 (or pass encoding=utf-8)") from None


def _utf8(text: object, what: str) -> bytes:
    if type(text) is not str:
        raise InvalidRequest(f"{what} must be a string")
    try:
        return text.encode()
    except UnicodeEncodeError:  # a lone surrogate escape
        raise InvalidRequest(f"{what} is not valid Unicode text") from None
