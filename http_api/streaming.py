"""Writing a streamed answer to a client that may not read it.

``aiohttp`` waits for the socket to drain when its buffers are full, for as long
as it takes: a client that stops reading a snapshot, a log range or a watch would
hold the stream (the snapshot slot, compaction held off for a complete log range,
a read view pinning LMDB pages) for ever. :func:`write_or_give_up` gives a write
``timeout`` seconds (the node's ``--transfer-idle-timeout``), then ends the
connection.
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web

logger = logging.getLogger(__name__)


class ReaderStalled(ConnectionResetError):
    """The client read nothing for the whole timeout: its connection was closed."""


async def write_or_give_up(
    request: web.Request, response: web.StreamResponse, data: bytes, timeout: float
) -> None:
    try:
        await asyncio.wait_for(response.write(data), timeout)
    except TimeoutError:
        logger.info(
            "%s %s: the client read nothing for %.0fs; closing its connection",
            request.method,
            request.path,
            timeout,
        )
        if request.transport is not None:
            request.transport.abort()
        raise ReaderStalled(f"the client read nothing for {timeout:g}s") from None
