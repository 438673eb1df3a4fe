"""Downloading another member's state to a file, resuming a cut transfer by key.

``GET /v1/snapshot`` streams the state as its source reads it (one LMDB read
view) and names the transfer (``Rkv-Transfer-Id``). When the connection is cut
before the end (a timeout with no byte for ``idle_timeout`` seconds, a reset, a
body cut short), the file keeps every complete record received: the download
cuts it after the last one and asks for the rest, the keys after that record's
key, from the same read view (``?transfer=ID&after=KEY``; the source holds a cut
transfer's view for a while, node/snapshot/held.py). A part comes with the same
header, which is checked, its records, appended, and a trailer over that header
and those records, which is verified; at the end the file gets the trailer of the
whole (the count of the header, the SHA-256 of every byte before it), so it is
exactly the snapshot the source would have sent in one go, and the reader
(node/snapshot/format.py) verifies every record again before anything is
installed. When the source no longer holds the view (410), or after
``MAX_RESUMES`` cuts, the download fails and the caller starts over.
"""

from __future__ import annotations

import hashlib
import http.client
import logging
import time
import zlib
from pathlib import Path
from typing import BinaryIO

from http_api.client.control import ControlClient, HeadersHook, HttpStatusError
from http_api.client.credentials import Credentials
from node.errors import ReplicationError
from node.snapshot.format import HEADER_BYTES, HEADER_FIELDS, TRAILER, TRAILER_MAGIC
from node.storage.record import BODY_HEADER, PREFIX

logger = logging.getLogger(__name__)

MAX_RESUMES = 5
_READ_BYTES = 1024 * 1024
_PROGRESS_SECONDS = 2.0
_KEY_LENGTH_FIELD = 5  # BODY_HEADER: offset, raft_index, timestamp, create_version, op, key_len
_COUNT_FIELD = 4  # HEADER_FIELDS: magic, format version, index, offset, record count
_MAX_RECORD_BYTES = 65 * 1024 * 1024  # above any record a valid configuration writes


class _Meter:
    """Counts the bytes received and logs the rate every few seconds."""

    def __init__(self, source_url: str) -> None:
        self.source_url = source_url
        self.received = 0
        self.started = self._last = time.monotonic()

    def add(self, size: int) -> None:
        self.received += size
        now = time.monotonic()
        if now - self._last >= _PROGRESS_SECONDS:
            self._last = now
            rate = self.received / max(now - self.started, 1e-9)
            logger.info(
                "catching up: %.1f MB from %s (%.1f MB/s)",
                self.received / 1e6,
                self.source_url,
                rate / 1e6,
            )


def download_snapshot(
    source_url: str,
    path: Path,
    idle_timeout: float,
    *,
    credentials: Credentials | None = None,
    headers: HeadersHook | None = None,  # auth (issue 16): the member token
) -> int:
    """Download ``source_url``'s state to ``path``; returns the bytes received.
    Raises ReplicationError, HttpStatusError or OSError."""
    control = ControlClient([source_url], idle_timeout, credentials, headers)
    meter = _Meter(source_url)
    with open(path, "w+b") as f:
        transfer = ""
        try:
            with control.snapshot(source_url) as response:
                transfer = response.getheader("Rkv-Transfer-Id") or ""
                while chunk := response.read(_READ_BYTES):
                    f.write(chunk)
                    meter.add(len(chunk))
            _release(control, source_url, transfer)
            return meter.received
        except (OSError, http.client.HTTPException) as exc:
            if isinstance(exc, HttpStatusError):
                raise
            if not transfer:
                raise ReplicationError(f"the download from {source_url} failed: {exc!r}") from exc
            cut: Exception = exc
        _resume(control, f, transfer, cut, meter)
    return meter.received


def _resume(
    control: ControlClient, f: BinaryIO, transfer: str, cut: Exception, meter: _Meter
) -> None:
    source_url = meter.source_url
    f.seek(0)
    header_bytes = f.read(HEADER_BYTES)
    if len(header_bytes) < HEADER_BYTES:
        raise ReplicationError(f"the download from {source_url} was cut in its header ({cut})")
    end, last_key, records = _complete_records(f, HEADER_BYTES)
    for attempt in range(1, MAX_RESUMES + 1):
        logger.info(
            "catching up: the download from %s was cut after %d records (%s); "
            "resuming after the last one (%d of %d)",
            source_url,
            records,
            cut,
            attempt,
            MAX_RESUMES,
        )
        f.seek(end)
        f.truncate()
        try:
            with control.snapshot(source_url, transfer, last_key or b"") as response:
                _append_part(response, f, header_bytes, meter)
        except HttpStatusError as exc:
            if exc.status == 410:
                raise ReplicationError(
                    f"{source_url} no longer holds the cut transfer {transfer}: {exc}"
                ) from exc
            raise
        except (OSError, http.client.HTTPException) as exc:
            cut = exc
            end, key, more = _complete_records(f, end)
            last_key = key if more else last_key
            records += more
            continue
        _finish(f, header_bytes)
        _release(control, source_url, transfer)
        return
    raise ReplicationError(f"the download from {source_url} was cut {MAX_RESUMES + 1} times")


def _release(control: ControlClient, source_url: str, transfer: str) -> None:
    """Tell the source it may drop the view (best effort: it expires anyway)."""
    if transfer:
        status, _ = control.release_snapshot(source_url, transfer)
        if status not in (204, 404):
            logger.info(
                "%s did not drop the view of transfer %s (%s)", source_url, transfer, status
            )


def _append_part(
    response: http.client.HTTPResponse, f: BinaryIO, header_bytes: bytes, meter: _Meter
) -> None:
    """Append a part's records to ``f``, holding back the last bytes (its trailer),
    which must match the SHA-256 of its header and records."""
    head = b""
    while len(head) < HEADER_BYTES:
        chunk = response.read(HEADER_BYTES - len(head))
        if not chunk:
            raise http.client.IncompleteRead(head, HEADER_BYTES - len(head))
        head += chunk
    if head != header_bytes:
        raise ReplicationError("the resumed transfer sent another header (another state)")
    digest = hashlib.sha256(head)
    tail = b""
    while chunk := response.read(_READ_BYTES):
        meter.add(len(chunk))
        data = tail + chunk
        keep = max(0, len(data) - TRAILER.size)
        f.write(data[:keep])
        digest.update(data[:keep])
        tail = data[keep:]
    if len(tail) < TRAILER.size:
        raise http.client.IncompleteRead(tail, TRAILER.size - len(tail))
    magic, _, sha = TRAILER.unpack(tail)
    if magic != TRAILER_MAGIC or sha != digest.digest():
        raise ReplicationError("the resumed part's trailer does not match what was received")


def _finish(f: BinaryIO, header_bytes: bytes) -> None:
    """Close the file with the whole snapshot's trailer."""
    f.flush()
    f.seek(0)
    digest = hashlib.sha256()
    while block := f.read(_READ_BYTES):
        digest.update(block)
    count = HEADER_FIELDS.unpack_from(header_bytes)[_COUNT_FIELD]
    f.write(TRAILER.pack(TRAILER_MAGIC, count, digest.digest()))
    f.flush()


def _complete_records(f: BinaryIO, start: int) -> tuple[int, bytes | None, int]:
    """Walk the records of ``f`` from byte ``start``: (the end of the last complete,
    undamaged record, its key, how many there were)."""
    f.seek(start)
    buffer = b""
    at = end = start  # the file position of buffer[0], of the last complete record's end
    last_key: bytes | None = None
    count = 0
    while True:
        block = f.read(_READ_BYTES)
        if not block:
            return end, last_key, count
        buffer = buffer[end - at :] + block
        at = end
        pos = 0
        while len(buffer) - pos >= PREFIX.size:
            length, crc = PREFIX.unpack_from(buffer, pos)
            stop = pos + PREFIX.size + length
            if not BODY_HEADER.size <= length <= _MAX_RECORD_BYTES:
                return end, last_key, count  # not a record: what follows is not usable
            if stop > len(buffer):
                break
            body = memoryview(buffer)[pos + PREFIX.size : stop]
            if zlib.crc32(body) != crc:
                return end, last_key, count
            key_len = BODY_HEADER.unpack_from(body, 0)[_KEY_LENGTH_FIELD]
            last_key = bytes(body[BODY_HEADER.size : BODY_HEADER.size + key_len])
            count += 1
            pos = stop
            end = at + pos
