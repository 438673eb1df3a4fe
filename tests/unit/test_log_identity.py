"""The log check's identity pairs (spark_tools/log_identity.py), without Spark."""

from __future__ import annotations

import hashlib

from spark_tools.export_reading import LogItem
from spark_tools.log_identity import IdentityLog, agree_by_digest, merge_pairs, record_identity


def item(offset: int, key: bytes, value: bytes, raft_index: int | None = None) -> LogItem:
    sha = hashlib.sha256(value).hexdigest()
    return LogItem(offset, raft_index or offset + 10, 1, key, key, sha)


def packed(*items: LogItem) -> IdentityLog:
    log = IdentityLog()
    for i in items:
        log.add(i)
    return log


def test_identity_covers_raft_index_op_key_and_value() -> None:
    base = item(5, b"k", b"v")
    assert record_identity(base) == record_identity(item(5, b"k", b"v"))
    assert record_identity(base) != record_identity(item(5, b"k", b"w"))
    assert record_identity(base) != record_identity(item(5, b"j", b"v"))
    assert record_identity(base) != record_identity(item(5, b"k", b"v", raft_index=99))
    assert record_identity(base) != record_identity(base._replace(op=2))


def test_identical_logs_agree_by_digest_with_every_offset_compared() -> None:
    records = [item(o, b"k%d" % o, b"v") for o in range(1, 101)]
    logs = {r: packed(*records) for r in (0, 1, 2)}
    agreement = agree_by_digest(
        [0, 1, 2], {r: log.digest() for r, log in logs.items()}, {0: 100, 1: 100, 2: 100}
    )
    assert agreement is not None
    assert (agreement.offsets_compared, agreement.divergent_offsets) == (100, 0)
    assert agreement.first_offset is None


def test_different_logs_are_merged_by_offset() -> None:
    a = packed(item(1, b"a", b"1"), item(2, b"b", b"2"), item(4, b"c", b"3"), item(6, b"d", b"4"))
    b = packed(item(2, b"b", b"2"), item(4, b"c", b"X"), item(5, b"e", b"5"), item(6, b"d", b"4"))
    c = packed(item(1, b"a", b"1"), item(4, b"c", b"3"), item(6, b"d", b"Y"))
    digests = {0: a.digest(), 1: b.digest(), 2: c.digest()}
    assert agree_by_digest([0, 1, 2], digests, {0: 4, 1: 4, 2: 3}) is None
    pairs = {0: bytes(a.pairs), 1: bytes(b.pairs), 2: bytes(c.pairs)}
    agreement = merge_pairs([0, 1, 2], pairs)
    # Offset 5 is held by one log only (compaction elsewhere): not compared.
    assert agreement.offsets_compared == 4  # 1, 2, 4, 6
    assert agreement.divergent_offsets == 2  # 4 and 6
    assert agreement.first_offset == 4
    assert merge_pairs([0, 2], {0: pairs[0], 2: pairs[2]}).divergent_offsets == 1
