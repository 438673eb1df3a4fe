"""The master link's bounds on what a master sends: the command framer, the spools'
caps, and a hostile master (tests/redis/link_support.py: FakeMaster) behind a real
MasterLink."""

from __future__ import annotations

import bisect
import itertools
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from replication.redis.link.framing import ARGUMENT_OVERHEAD, CommandFramer
from replication.redis.link.master_link import (
    LimitExceeded,
    MasterAddress,
    MasterLink,
    RedisLinkError,
)
from replication.redis.link.resp import RespProtocolError, encode_command
from replication.redis.link.spool import Spool
from tests.redis import rdb_fixtures as fx
from tests.redis.link_support import FakeMaster, RedisMaster, check_rdb, wait_for

SEED_RDB = fx.RdbWriter(10).select_db(0).key(0, b"seed", fx.string(b"1")).finish()

# -- the framer -----------------------------------------------------------------------


def _commands(rng: random.Random, count: int) -> list[list[bytes]]:
    commands: list[list[bytes]] = []
    for _ in range(count):
        kind = rng.random()
        if kind < 0.1:
            commands.append([rng.choice([b"REPLCONF", b"replconf"]), b"GETACK", b"*"])
        elif kind < 0.15:
            commands.append([b"REPLCONF", b"ACK", b"12"])  # not a GETACK
        elif kind < 0.2:
            commands.append([b"SET", b"x" * 20, b"replconf", b"getack"])  # nor this
        else:
            sizes = [0, 1, 16, 17, 100, 700]
            commands.append(
                [b"SET"] + [rng.randbytes(rng.choice(sizes)) for _ in range(rng.randint(1, 5))]
            )
    return commands


def test_the_framer_finds_every_command_end_and_every_getack_across_any_cut() -> None:
    rng = random.Random(5)
    commands = _commands(rng, 400)
    encoded = [encode_command(*command) for command in commands]
    stream = b"".join(encoded)
    ends = list(itertools.accumulate(len(data) for data in encoded))
    expected_getacks = sum(
        1 for c in commands if c[0].lower() == b"replconf" and c[1].lower() == b"getack"
    )
    for max_cut in (1, 2, 7, 64, 5000, len(stream)):
        framer = CommandFramer(1 << 20)
        getacks = 0
        pos = 0
        while pos < len(stream):
            cut = rng.randint(1, max_cut)
            getacks += framer.feed(stream[pos : pos + cut])
            # The last command end within the chunk, if any.
            last = ends[bisect.bisect_right(ends, pos + cut) - 1] if ends[0] <= pos + cut else 0
            assert framer.complete_bytes == (last - pos if last > pos else 0)
            pos += cut
        assert getacks == expected_getacks


def test_the_framer_refuses_a_command_past_max_command_bytes_at_its_header() -> None:
    limit = 10_000
    good = encode_command("SET", "k", "v")
    # A never-ending bulk string: refused at its header line, whatever follows.
    framer = CommandFramer(limit)
    with pytest.raises(LimitExceeded, match="argument of 1099511627776 bytes") as refused:
        framer.feed(good + b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1099511627776\r\n" + b"x" * 100)
    assert refused.value.setting == "--max-command-bytes" and not refused.value.retryable
    assert "--max-command-bytes" in str(refused.value)
    assert framer.complete_bytes == len(good)  # the command before it is whole
    # An absurd argument count: refused before any argument arrives.
    framer = CommandFramer(limit)
    with pytest.raises(LimitExceeded, match="a command of 1000000 arguments"):
        framer.feed(b"*1000000\r\n")
    # The size counts each argument's overhead: at the limit passes, one byte more fails.
    at_limit = limit - 2 * ARGUMENT_OVERHEAD - 3
    assert CommandFramer(limit).feed(encode_command("SET", b"v" * at_limit)) == 0
    with pytest.raises(LimitExceeded):
        CommandFramer(limit).feed(encode_command("SET", b"v" * (at_limit + 1)))
    # Split across chunks, the partial command is not counted as complete.
    framer = CommandFramer(limit)
    framer.feed(good + b"*2\r\n$3\r\nSET\r\n")
    with pytest.raises(LimitExceeded):
        framer.feed(b"$20000\r\n")
    assert framer.complete_bytes == 0


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"+OK\r\n", "expected a command"),
        (b"*0\r\n", "array of 0 elements"),
        (b"*-1\r\n", "array of -1 elements"),
        (b"*1\r\n$-1\r\n", "got length -1"),
        (b"*1\r\n:5\r\n", "expected a bulk string"),
        (b"*1\r\n$3\r\nSETxx", "not followed by CRLF"),
        (b"*" + b"9" * 40 + b"\r\n", "header line too long"),
        (b"*1\r\n$" + b"1" * 40, "header line too long"),
        (b"*1x\r\n", "expected a command"),
    ],
)
def test_the_framer_refuses_what_is_not_a_command(data: bytes, problem: str) -> None:
    framer = CommandFramer(1 << 20)
    with pytest.raises(RespProtocolError, match=problem):
        for i in range(len(data)):  # byte by byte: the checks hold across any cut
            framer.feed(data[i : i + 1])


# -- the spools ---------------------------------------------------------------------


def test_a_spool_that_waits_when_full_never_holds_more_than_its_cap(tmp_path: Path) -> None:
    spool = Spool(tmp_path, segment_bytes=4096, max_unread_bytes=10_000, wait_when_full=True)
    data = random.Random(2).randbytes(300_000)
    backlog: list[int] = []

    def write() -> None:
        for i in range(0, len(data), 7000):
            spool.write(data[i : i + 7000])
            backlog.append(spool.written - spool.consumed)
        spool.finish()

    writer = threading.Thread(target=write)
    writer.start()
    got = bytearray()
    while chunk := spool.read(3000, timeout=10):
        got += chunk
        time.sleep(0.0005)
    writer.join(10)
    assert bytes(got) == data
    assert backlog and max(backlog) <= 10_000
    # A writer waiting for room is woken up by close() (and fails).
    stuck = Spool(tmp_path, max_unread_bytes=10, wait_when_full=True)
    failed: list[BaseException] = []

    def overfill() -> None:
        try:
            stuck.write(b"x" * 100)
        except ValueError as exc:
            failed.append(exc)

    thread = threading.Thread(target=overfill)
    thread.start()
    time.sleep(0.1)
    stuck.close(RuntimeError("closed"))
    thread.join(5)
    assert not thread.is_alive() and failed


@pytest.fixture
def spool_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "spool"
    directory.mkdir()
    return directory


def test_a_payload_bigger_than_the_spool_cap_arrives_whole(tmp_path: Path, spool_dir: Path) -> None:
    master = RedisMaster(
        tmp_path / "master", "--enable-debug-command", "local", "--rdbcompression", "no"
    )
    try:
        with master.client() as client:
            client.execute("DEBUG", "POPULATE", "30000", "key", "100")  # ~ 3.5 MB of RDB
        cap = 1024 * 1024
        with MasterLink(
            MasterAddress.parse(master.url()), spool_dir, lambda: None, max_spool_bytes=cap
        ) as link:
            result = link.start()
            assert result.payload is not None
            time.sleep(1)  # the transfer waits for the reader, it does not fail
            assert link.error is None and link.received_offset == result.offset
            payload = result.payload.read()
            check_rdb(payload)
            assert len(payload) > 3 * cap
    finally:
        master.stop()


# -- a hostile master behind a real link -----------------------------------------------


@pytest.fixture
def fake_master() -> Iterator[FakeMaster]:
    with FakeMaster(SEED_RDB) as master:
        yield master


def test_a_never_ending_bulk_string_fails_the_link_after_the_commands_before_it(
    fake_master: FakeMaster, spool_dir: Path
) -> None:
    with MasterLink(MasterAddress.parse(fake_master.url()), spool_dir, lambda: None) as link:
        result = link.start()
        assert result.payload is not None and result.payload.read() == SEED_RDB
        good = encode_command("SET", "a", "1")
        fake_master.send(good + b"*3\r\n$3\r\nSET\r\n$1\r\nb\r\n$999999999999\r\n")
        sender = threading.Thread(
            target=fake_master.send_forever, args=(b"x" * (1 << 20), 1 << 30), daemon=True
        )
        sender.start()
        command = link.read_command(timeout=10)
        assert command is not None and command.args == [b"SET", b"a", b"1"]
        with pytest.raises(LimitExceeded, match="999999999999 bytes") as refused:
            link.read_command(timeout=10)
        assert not refused.value.retryable and link.error is refused.value
        fake_master.stop.set()
        sender.join(10)
        # It stopped reading at the header: the rest was never received.
        assert link.received_offset == len(good)


def test_a_backlog_past_max_spool_bytes_fails_the_link_for_good(
    fake_master: FakeMaster, spool_dir: Path
) -> None:
    link = MasterLink(
        MasterAddress.parse(fake_master.url()),
        spool_dir,
        lambda: None,
        max_spool_bytes=100_000,
        chunk_bytes=4096,
    )
    with link:
        result = link.start()
        assert result.payload is not None and result.payload.read() == SEED_RDB
        commands = [encode_command("SET", f"k{i}", "v" * 1000) for i in range(300)]  # 300 kB
        fake_master.send(b"".join(commands))
        wait_for(lambda: link.state == "failed", what="the link to give up")
        delivered = []
        with pytest.raises(RedisLinkError, match="--max-spool-bytes") as refused:
            while True:
                command = link.read_command(timeout=10)
                assert command is not None
                delivered.append(command.args)
        assert isinstance(refused.value, LimitExceeded) and not refused.value.retryable
        assert 10 < len(delivered) < 300  # what fitted was delivered, in order
        assert delivered == [[b"SET", f"k{i}".encode(), b"v" * 1000] for i in range(len(delivered))]
