"""The results the state machine keeps for redelivered entries stay within their byte cap."""

from __future__ import annotations

from pathlib import Path

from node.state.commands import Batch, Command, Put, Txn, TxnGet, encode_entry
from node.state.machine import StateMachine
from node.state.results import ResultCode, results_size
from node.storage.config import FsyncPolicy, StorageConfig
from node.storage.recovery import open_storage

CAP = 64 * 1024


def entry(index: int, *commands: Command) -> bytes:
    return encode_entry(Batch(commands, index))


def test_the_results_kept_never_exceed_the_cap_and_small_ones_are_answered_again(
    tmp_path: Path,
) -> None:
    config = StorageConfig(fsync=FsyncPolicy.ON_SYNC, results_cache_bytes=CAP)
    storage = open_storage(tmp_path / "node", config)
    try:
        machine = StateMachine.over(storage)
        machine.apply(1, entry(1, Put(b"big", b"x" * 10_000)))
        reads = Txn(success=tuple(TxnGet(b"big") for _ in range(3)))  # ~30 KB of results
        for index in range(2, 40):
            results = machine.apply(index, entry(index, reads))
            assert results[0].code is ResultCode.OK
            assert results_size(results) > 30_000
            assert 0 < machine.results_cache_bytes <= CAP
        # The newest entry is still remembered: raft redelivering it gets its results.
        again = machine.apply(39, entry(39, reads))
        assert again[0].code is ResultCode.OK and again[0].op_results[0].value == b"x" * 10_000
        # An old one was dropped to stay under the cap.
        assert machine.apply(2, entry(2, reads))[0].code is ResultCode.ALREADY_APPLIED
    finally:
        storage.close()


def test_results_larger_than_the_cap_are_not_kept(tmp_path: Path) -> None:
    config = StorageConfig(fsync=FsyncPolicy.ON_SYNC, results_cache_bytes=CAP)
    storage = open_storage(tmp_path / "node", config)
    try:
        machine = StateMachine.over(storage)
        machine.apply(1, entry(1, Put(b"big", b"x" * 50_000)))
        huge = Txn(success=tuple(TxnGet(b"big") for _ in range(10)))  # ~500 KB
        (result,) = machine.apply(2, entry(2, huge))
        assert result.code is ResultCode.OK and len(result.op_results) == 10
        assert machine.results_cache_bytes < CAP
        assert machine.apply(2, entry(2, huge))[0].code is ResultCode.ALREADY_APPLIED
    finally:
        storage.close()
