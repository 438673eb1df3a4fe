"""The raft port's bounds that need no running node: the frame limit's floor against the
frames pysyncobj really builds, and the throttle on log lines a peer can provoke."""

from __future__ import annotations

import logging
import os
import pickle
import zlib
from collections.abc import Callable

import pysyncobj.pickle as pysyncobj_pickle
import pytest
from pysyncobj.encryptor import getEncryptor

from node.state.commands import Batch, Put, encode_entry
from raft.config import frame_bytes_needed
from raft.log_throttle import ThrottledLog
from raft.wire import deflate


def pysyncobj_frame(entries: list[bytes]) -> bytes:
    """The frame a leader sends for these rkv entries, built as pysyncobj 0.3.17 does: each
    journal entry is the command type and the pickled call of the replicated method; an
    append_entries message carries (entry, index, term) tuples, pickled (protocol 2),
    compressed and encrypted."""
    journal = [b"\x00" + pysyncobj_pickle.dumps((0, (entry,), {})) for entry in entries]
    message = {
        "type": "append_entries",
        "term": 7,
        "commit_index": 1000,
        "entries": [(data, 1000 + i, 7) for i, data in enumerate(journal)],
        "prevLogIdx": 999,
        "prevLogTerm": 7,
    }
    data = zlib.compress(pysyncobj_pickle.dumps(message), 3)
    token: bytes = getEncryptor(b"s" * 32).encrypt_at_time(data, 1)
    return token


def random_high_bytes(n: int) -> bytes:
    return bytes(b | 0x80 for b in os.urandom(n))  # every byte grows in a protocol-2 pickle


@pytest.mark.parametrize("make_value", [os.urandom, random_high_bytes, lambda n: b"a" * n])
def test_the_largest_frame_of_an_entry_fits_the_limit_it_needs(
    make_value: Callable[[int], bytes],
) -> None:
    value_bytes = 4 * 1024 * 1024
    big = encode_entry(Batch((Put(b"big", make_value(value_bytes)),)))
    # pysyncobj batches entries while they add up to less than 64 KiB and takes the one
    # that crosses it whole: small entries first, the big one last.
    small = [encode_entry(Batch((Put(b"k%d" % i, os.urandom(6000)),))) for i in range(10)]
    frame = pysyncobj_frame([*small, big])
    assert len(frame) <= frame_bytes_needed(value_bytes)


def test_a_throttled_log_writes_one_line_per_subject_and_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    log = ThrottledLog(logging.getLogger("throttle-test"), interval=10.0, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="throttle-test"):
        for _ in range(100):
            log.report("auth-failed", "10.0.0.1", "from %s", "10.0.0.1:1234")
        log.report("auth-failed", "10.0.0.2", "from %s", "10.0.0.2:1")  # another subject
        log.report("frame-too-large", "10.0.0.1", "big from %s", "10.0.0.1:1")  # another kind
        now[0] = 10.5
        log.report("auth-failed", "10.0.0.1", "from %s", "10.0.0.1:999")
    assert [r.getMessage() for r in caplog.records] == [
        "from 10.0.0.1:1234",
        "from 10.0.0.2:1",
        "big from 10.0.0.1:1",
        "from 10.0.0.1:999 (99 more like it held back in the last 10 s)",
    ]


def test_many_subjects_share_one_budget_past_the_cap(caplog: pytest.LogCaptureFixture) -> None:
    log = ThrottledLog(logging.getLogger("throttle-test"), max_subjects=4, clock=lambda: 0.0)
    with caplog.at_level(logging.WARNING, logger="throttle-test"):
        for i in range(1000):
            log.report("auth-failed", f"10.0.{i // 256}.{i % 256}", "from %d", i)
    assert len(caplog.records) == 5  # four subjects, then one line for all the others


def test_a_large_incompressible_message_is_sent_stored_and_still_reads_back() -> None:
    noise = os.urandom(1 << 20)
    text = b'{"key": "value", "n": 12345}\n' * 40_000
    small = os.urandom(1000)
    for data in (noise, text, small):
        assert zlib.decompress(deflate(data)) == data  # what pysyncobj's receiver does
    assert len(deflate(noise)) > len(noise)  # stored: not worth zlib's time
    assert len(deflate(text)) < len(text) // 10  # compressed as before
    assert deflate(small) == zlib.compress(small, 3)  # small messages as pysyncobj


def test_pysyncobj_pickles_what_it_sends_with_protocol_4() -> None:
    entry = (bytes(range(128, 256)) * 100, 7, 3)
    pickled = pysyncobj_pickle.dumps(entry)
    assert pickled[:2] == b"\x80\x04"  # protocol 4: bytes stored as they are
    assert len(pickled) < len(entry[0]) + 64
    assert pysyncobj_pickle.loads(pickled) == entry
    assert pysyncobj_pickle.loads(pickle.dumps(entry, 2)) == entry  # older peers' entries
