"""The replica side of the Redis replication protocol, against a real redis-server."""

from __future__ import annotations

import os
import random
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from replication.redis.link.master_link import (
    LinkClosed,
    MasterAddress,
    MasterLink,
    RedisLinkError,
    ReplicatedCommand,
    SyncResult,
)
from replication.redis.link.resp import command_size, encode_command
from replication.redis.link.spool import Spool, SpoolFull
from tests.redis.link_support import (
    RedisMaster,
    check_rdb,
    free_port,
    info,
    master_offset,
    replicas,
    stable_master_offset,
    wait_for,
)
from tests.redis.resp_client import RespClient


class Durable:
    """What the test pretends is durably committed downstream."""

    def __init__(self) -> None:
        self.value: int | None = None

    def __call__(self) -> int | None:
        return self.value


@pytest.fixture
def master(tmp_path: Path) -> Iterator[RedisMaster]:
    server = RedisMaster(tmp_path / "master")
    yield server
    server.stop()


MakeLink = Callable[..., MasterLink]


@pytest.fixture
def make_link(master: RedisMaster, tmp_path: Path) -> Iterator[MakeLink]:
    links: list[MasterLink] = []
    spool_dir = tmp_path / "spool"
    spool_dir.mkdir()

    def make(
        url: str | None = None, durable: Callable[[], int | None] | None = None, **options: Any
    ) -> MasterLink:
        link = MasterLink(
            MasterAddress.parse(url or master.url()),
            spool_dir,
            durable or Durable(),
            **options,
        )
        links.append(link)
        return link

    yield make
    for link in links:
        link.close()
    assert os.listdir(spool_dir) == []  # anonymous temporary files only


def full_payload(result: SyncResult) -> bytes:
    assert result.full and result.payload is not None
    return result.payload.read()


def read_until(link: MasterLink, offset: int, timeout: float = 10.0) -> list[ReplicatedCommand]:
    """Commands until the link has delivered the master's ``offset`` (exactly)."""
    got: list[ReplicatedCommand] = []
    deadline = time.monotonic() + timeout
    while link.delivered_offset < offset:
        command = link.read_command(timeout=max(0.0, deadline - time.monotonic()))
        if command is None:
            raise AssertionError(
                f"the stream stopped at {link.delivered_offset}, master at {offset}"
            )
        got.append(command)
    assert link.delivered_offset == offset, "commands do not end on the master's offset"
    return got


def data(commands: list[ReplicatedCommand]) -> list[list[bytes]]:
    return [c.args for c in commands if not c.is_control]


def check_offsets(start: int, commands: list[ReplicatedCommand]) -> None:
    offset = start
    for command in commands:
        offset += len(encode_command(*command.args))
        assert command.end_offset == offset


def fill(client: RespClient, keys: int, prefix: str = "key") -> None:
    client.pipeline([("SET", f"{prefix}:{i}", f"value:{i}:" * 20) for i in range(keys)])


# -- pure units --------------------------------------------------------------------


def test_master_address_parsing() -> None:
    assert MasterAddress.parse("redis://127.0.0.1") == MasterAddress("127.0.0.1", 6379)
    assert MasterAddress.parse("redis://example.com:7000/") == MasterAddress("example.com", 7000)
    address = MasterAddress.parse("redis://:p%40ss%3Aword@h:1")
    assert (address.username, address.password) == (None, "p@ss:word")
    address = MasterAddress.parse("redis://us%3Aer:se%2Fcret@h:2")
    assert (address.username, address.password) == ("us:er", "se/cret")
    assert "se/cret" not in repr(address) and "se/cret" not in str(address)
    assert str(address) == "redis://us:er:***@h:2"
    assert str(MasterAddress.parse("redis://[::1]:6380")) == "redis://[::1]:6380"
    assert MasterAddress.parse("redis://user:@h").password == ""
    for bad, why in [
        ("http://h:1", "expected redis://"),
        ("rediss://h:1", "TLS"),
        ("redis://", "no host"),
        ("redis://h:99999", "bad Redis master URL"),
        ("redis://h:abc", "bad Redis master URL"),
        ("redis://h:1/0", "nothing may follow"),
        ("redis://h:1?db=2", "nothing may follow"),
        ("redis://user@h:1", "a user needs a password"),
    ]:
        with pytest.raises(ValueError, match=why):
            MasterAddress.parse(bad)
    with pytest.raises(ValueError) as raised:
        MasterAddress.parse("redis://u:topsecret@h:99999")
    assert "topsecret" not in str(raised.value)


def test_command_size_is_the_length_of_the_encoding() -> None:
    rng = random.Random(7)
    for _ in range(200):
        args = [
            rng.randbytes(rng.choice([0, 1, 9, 10, 99, 100, 1000]))
            for _ in range(rng.randint(1, 12))
        ]
        assert command_size(args) == len(encode_command(*args))


def test_spool_keeps_order_frees_read_segments_and_reports_the_end(tmp_path: Path) -> None:
    spool = Spool(tmp_path, segment_bytes=10)
    chunks = [bytes([i]) * n for i, n in enumerate([3, 10, 25, 1, 7])]
    for chunk in chunks:
        spool.write(chunk)
    assert spool.written == sum(map(len, chunks))
    got = b""
    while len(got) < spool.written:
        got += spool.read(4, timeout=0)
        assert len(spool._segments) <= 5 - len(got) // 10 + 1
    assert got == b"".join(chunks)
    assert len(spool._segments) == 1  # the read ones were freed
    with pytest.raises(TimeoutError):
        spool.read(4, timeout=0.05)
    spool.write(b"tail")
    spool.finish(RedisLinkError("gone", retryable=True))
    assert spool.read(100) == b"tail"  # data first, then the error
    with pytest.raises(RedisLinkError, match="gone"):
        spool.read(100)
    spool.close(LinkClosed())

    spool = Spool(tmp_path, segment_bytes=10, max_unread_bytes=8)
    spool.write(b"12345678")
    with pytest.raises(SpoolFull):
        spool.write(b"9")
    assert spool.read(3) == b"123"
    spool.write(b"abc")  # room again
    spool.close(LinkClosed())
    with pytest.raises(LinkClosed):
        spool.read(1)  # closed: unread data is dropped

    spool = Spool(tmp_path)
    threading.Timer(0.1, spool.write, [b"late"]).start()
    assert spool.read(10, timeout=5) == b"late"  # a blocked read wakes up
    spool.finish()
    assert spool.read(10) == b""
    spool.close(LinkClosed())


# -- full sync ---------------------------------------------------------------------


def test_full_sync_disk_form_delivers_the_file_the_master_saved(
    master: RedisMaster, make_link: MakeLink
) -> None:
    with master.client() as client:
        fill(client, 2000)
        client.execute("HSET", "hash", "field", "value")
        client.execute("RPUSH", "list", "a", "b", "c")
    progress: list[tuple[int, int | None]] = []
    link = make_link(chunk_bytes=4096, progress=lambda got, total: progress.append((got, total)))
    result = link.start()
    payload = full_payload(result)
    # In the disk form the master sends the dump.rdb its BGSAVE wrote (and keeps).
    assert payload == (master.dir / "dump.rdb").read_bytes()
    check_rdb(payload)
    with master.client() as client:
        replication = info(client)
        assert result.replid == replication["master_replid"] == link.replid
        assert result.offset == int(replication["master_repl_offset"])
        wait_for(lambda: [r["state"] for r in replicas(client)] == ["online"], what="online")
        # announced at port 0: Sentinel can never connect to it, nor promote it
        assert replicas(client)[0]["port"] == "0"
    assert len(progress) > 10
    assert all(total == len(payload) for _, total in progress)
    assert progress[-1] == (len(payload), len(payload))
    assert link.state == "streaming"


def test_full_sync_diskless_form_with_an_end_mark_split_across_reads(
    master: RedisMaster, make_link: MakeLink
) -> None:
    with master.client() as client:
        client.execute("CONFIG", "SET", "repl-diskless-sync", "yes")
        client.execute("CONFIG", "SET", "repl-diskless-sync-delay", "0")
        fill(client, 300)
    progress: list[tuple[int, int | None]] = []
    # 7-byte reads: the 40-byte end mark always arrives in pieces. No periodic ACK
    # in time: the stream must be started by the ACK sent right after the payload.
    link = make_link(
        chunk_bytes=7,
        ack_interval=60,
        read_timeout=5,
        progress=lambda got, total: progress.append((got, total)),
    )
    result = link.start()
    payload = full_payload(result)
    check_rdb(payload)
    assert b"key:299" in payload
    assert progress[-1] == (len(payload), None)
    assert not (master.dir / "dump.rdb").exists()  # it really was diskless
    # The master starts the stream only after our first ACK.
    with master.client() as client:
        client.execute("SET", "after", "sync")
        assert result.offset < master_offset(client)
        commands = read_until(link, stable_master_offset(client), timeout=3)
    assert data(commands) == [[b"SELECT", b"0"], [b"SET", b"after", b"sync"]]
    check_offsets(result.offset, commands)


# -- the command stream ----------------------------------------------------------------


def test_command_stream_in_order_with_the_master_offsets(
    master: RedisMaster, make_link: MakeLink
) -> None:
    link = make_link()
    result = link.start()
    full_payload(result)
    with master.client() as client:
        client.execute("SET", "a", "1")
        client.execute("INCR", "n")
        client.execute("HSET", "h", "f", "v", "g", b"\x00\xff\r\n")
        client.pipeline([("MULTI",), ("SET", "x", "1"), ("INCR", "n"), ("EXEC",)])
        client.execute("SELECT", 3)
        client.execute("SET", "b", "2")
        client.execute("DEL", "b")
        target = stable_master_offset(client)
    commands = read_until(link, target)
    assert data(commands) == [
        [b"SELECT", b"0"],
        [b"SET", b"a", b"1"],
        [b"INCR", b"n"],
        [b"HSET", b"h", b"f", b"v", b"g", b"\x00\xff\r\n"],
        [b"MULTI"],
        [b"SET", b"x", b"1"],
        [b"INCR", b"n"],
        [b"EXEC"],
        [b"SELECT", b"3"],
        [b"SET", b"b", b"2"],
        [b"DEL", b"b"],
    ]
    # Re-encoding each command gives exactly the bytes the master counted.
    check_offsets(result.offset, commands)
    assert commands[-1].end_offset == target == link.received_offset
    assert link.read_command(timeout=0.2) is None


def test_the_masters_pings_are_delivered_and_counted(
    master: RedisMaster, make_link: MakeLink
) -> None:
    link = make_link()
    result = link.start()
    full_payload(result)
    with master.client() as client:
        client.execute("CONFIG", "SET", "repl-ping-replica-period", "1")
        ping = link.read_command(timeout=5)
        assert ping is not None and ping.args == [b"ping"] and ping.is_control  # as Redis sends it
        client.execute("SET", "k", "v")
        target = master_offset(client)  # PINGs keep coming: no quiet moment
    commands = [ping, *read_until(link, target)]
    check_offsets(result.offset, commands)
    assert [b"SET", b"k", b"v"] in data(commands)


def test_getack_is_answered_with_the_durable_offset(
    master: RedisMaster, make_link: MakeLink
) -> None:
    durable = Durable()
    # No periodic ACK during the test: only answers to GETACK can satisfy WAIT.
    link = make_link(durable=durable, ack_interval=60)
    result = link.start()
    full_payload(result)
    with master.client() as client:
        durable.value = 10**12  # nonsense: the link never acknowledges more than it delivered
        client.execute("SET", "w", "1")
        assert client.execute("WAIT", 1, 300) == 0
        durable.value = result.offset  # the RDB is loaded, the write is not
        commands = read_until(link, master_offset(client))
        assert client.execute("WAIT", 1, 300) == 0
        # WAIT waits for the master's offset when it is called, which includes the
        # GETACKs sent so far: the consumer must count those as done too.
        commands += read_until(link, stable_master_offset(client))
        durable.value = link.delivered_offset
        started = time.monotonic()
        assert client.execute("WAIT", 1, 5000) == 1
        assert time.monotonic() - started < 3.0  # answered at once, not by the 60 s timer
        commands += read_until(link, stable_master_offset(client))
    getacks = [c for c in commands if [a.lower() for a in c.args] == [b"replconf", b"getack", b"*"]]
    assert len(getacks) >= 3 and all(c.is_control for c in getacks)
    check_offsets(result.offset, commands)


def test_periodic_acks_report_the_durable_offset(master: RedisMaster, make_link: MakeLink) -> None:
    durable = Durable()
    link = make_link(durable=durable, ack_interval=0.1)
    result = link.start()
    full_payload(result)
    with master.client() as client:
        client.execute("SET", "k", "v")
        target = stable_master_offset(client)
        read_until(link, target)
        durable.value = target
        # INFO shows the offset the replica acknowledged.
        wait_for(lambda: replicas(client)[0]["offset"] == str(target), what="the ACK")
        assert link.state == "streaming"


# -- partial resync ------------------------------------------------------------------------


def test_partial_resync_resumes_right_after_the_last_delivered_command(
    master: RedisMaster, make_link: MakeLink
) -> None:
    first = make_link()
    result = first.start()
    full_payload(result)
    with master.client() as client:
        client.pipeline([("SET", f"k{i}", i) for i in range(10)])
        delivered = [first.read_command(timeout=5) for _ in range(6)]  # SELECT 0, k0..k4
        last = delivered[-1]
        assert last is not None
        assert last.args == [b"SET", b"k4", b"4"]
        first.close()
        wait_for(lambda: replicas(client) == [], what="the master to drop the replica")
        client.pipeline([("SET", f"k{i}", i) for i in range(10, 15)])
        second = make_link()
        resumed = second.start(result.replid, last.end_offset + 1)
        assert (resumed.full, resumed.replid, resumed.offset) == (
            False,
            result.replid,
            last.end_offset,
        )
        assert resumed.payload is None
        commands = read_until(second, stable_master_offset(client))
    assert data(commands) == [[b"SET", f"k{i}".encode(), str(i).encode()] for i in range(5, 15)]
    check_offsets(last.end_offset, commands)


def test_continue_with_a_new_replid_after_a_failover(
    master: RedisMaster, make_link: MakeLink, tmp_path: Path
) -> None:
    """A promoted replica answers PSYNC for its old master's history with +CONTINUE <new id>."""
    replica = RedisMaster(tmp_path / "replica")
    try:
        with replica.client() as client:
            client.execute("REPLICAOF", "127.0.0.1", master.port)
            wait_for(lambda: info(client)["master_link_status"] == "up", what="the replica")
        first = make_link(url=replica.url())  # chained: we replicate the replica
        result = first.start()
        full_payload(result)
        with master.client() as client:
            client.execute("SET", "through", "1")
        with replica.client() as client:
            wait_for(lambda: master_offset(client) > result.offset, what="the write to arrive")
            commands = read_until(first, stable_master_offset(client))
            first.close()
            client.execute("REPLICAOF", "NO", "ONE")  # failover: a new history begins
            promoted = info(client)
            assert promoted["master_replid2"] == result.replid
            second = make_link(url=replica.url())
            resumed = second.start(result.replid, commands[-1].end_offset + 1)
            assert not resumed.full
            assert resumed.replid == promoted["master_replid"] != result.replid
            assert second.replid == resumed.replid
            client.execute("SET", "after", "2")
            more = read_until(second, stable_master_offset(client))
        assert [b"SET", b"after", b"2"] in data(more)
        check_offsets(resumed.offset, more)
        second.close()
    finally:
        replica.stop()


def test_a_backlog_overrun_means_a_full_resync(master: RedisMaster, make_link: MakeLink) -> None:
    first = make_link()
    result = first.start()
    full_payload(result)
    with master.client() as client:
        client.execute("CONFIG", "SET", "repl-backlog-size", "16384")
        client.execute("SET", "a", "1")
        commands = read_until(first, stable_master_offset(client))
        first.close()
        wait_for(lambda: replicas(client) == [], what="the master to drop the replica")
        client.pipeline([("SET", f"big{i}", "x" * 10_000) for i in range(150)])  # 1.5 MB
        second = make_link()
        again = second.start(result.replid, commands[-1].end_offset + 1)
        assert again.full and again.replid == result.replid
        assert again.offset == master_offset(client)
        check_rdb(full_payload(again))


# -- authentication and refusals ----------------------------------------------------------


def test_auth_with_an_acl_user_and_the_errors(master: RedisMaster, make_link: MakeLink) -> None:
    with master.client() as client:
        client.execute("ACL", "SETUSER", "repl", "on", ">s3cr:t@", "+psync", "+replconf", "+ping")
        client.execute("ACL", "SETUSER", "weak", "on", ">pw", "+replconf", "+ping")
        client.execute("CONFIG", "SET", "requirepass", "adminpw")
    master.password = "adminpw"

    link = make_link(url=master.url("repl:s3cr%3At%40@"))
    result = link.start()
    check_rdb(full_payload(result))
    with master.client() as client:
        client.execute("SET", "k", "v")
        assert data(read_until(link, stable_master_offset(client)))[-1] == [b"SET", b"k", b"v"]

    link = make_link(url=master.url(":adminpw@"))  # the default user, requirepass style
    assert link.start().full

    with pytest.raises(RedisLinkError, match="authentication failed") as raised:
        make_link(url=master.url("repl:wrong@")).start()
    assert not raised.value.retryable
    with pytest.raises(RedisLinkError, match=r"requires a password.*NOAUTH") as raised:
        make_link().start()
    assert not raised.value.retryable
    with pytest.raises(RedisLinkError, match="PSYNC refused by the master's ACL") as raised:
        make_link(url=master.url("weak:pw@")).start()
    assert not raised.value.retryable


def test_refusals_and_unreachable_masters_are_retryable(
    master: RedisMaster, make_link: MakeLink
) -> None:
    with master.client() as client:
        client.execute("REPLICAOF", "127.0.0.1", free_port())  # a master of nothing
    link = make_link()
    with pytest.raises(RedisLinkError, match="NOMASTERLINK") as raised:
        link.start()
    assert raised.value.retryable and link.state == "failed"
    with pytest.raises(RedisLinkError, match="cannot connect") as raised:
        make_link(url=f"redis://127.0.0.1:{free_port()}").start()
    assert raised.value.retryable


# -- backpressure, failures, close ------------------------------------------------------------


def stalled_replica(master: RedisMaster) -> RespClient:
    """A replica that completes a full sync and then never reads again."""
    replica = RespClient("127.0.0.1", master.port)
    replica.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    replica.execute("REPLCONF", "listening-port", 1)  # the link announces 0
    replica.send("PSYNC", "?", -1)
    while not (line := replica.reader.readline().strip()):
        pass  # keep-alives
    assert line.startswith(b"+FULLRESYNC"), line
    while not (line := replica.reader.readline().strip()):
        pass
    assert line.startswith(b"$"), line
    replica.read_exact(int(line[1:]))
    return replica


def test_a_slow_consumer_does_not_get_the_link_cut(
    master: RedisMaster, make_link: MakeLink
) -> None:
    link = make_link()
    result = link.start()
    full_payload(result)
    with master.client() as client:
        client.execute("CONFIG", "SET", "client-output-buffer-limit", "replica 256kb 128kb 5")
        control = stalled_replica(master)
        try:
            wait_for(lambda: len(replicas(client)) == 2, what="two replicas")
            value = "v" * 8000
            client.pipeline([("SET", f"bp:{i}", value) for i in range(1000)], batch=50)  # 8 MB
            # The control replica, which does not read, is cut off by the limit...
            ours = "0"  # what the link announces
            wait_for(
                lambda: all(r["port"] == ours for r in replicas(client)),
                what="the stalled replica to be cut",
            )
        finally:
            control.close()
        # ... while the link, whose consumer has read nothing yet, stays online.
        listed = [(r["port"], r["state"]) for r in replicas(client)]
        assert listed == [(ours, "online")], "the link was cut"
        target = stable_master_offset(client)
        wait_for(lambda: link.received_offset == target, what="the link to receive everything")
        assert link.state == "streaming" and link.error is None
        time.sleep(0.5)  # the consumer keeps sleeping a bit
        commands = read_until(link, target, timeout=30)
    assert data(commands) == [[b"SELECT", b"0"]] + [
        [b"SET", f"bp:{i}".encode(), value.encode()] for i in range(1000)
    ]
    check_offsets(result.offset, commands)


def test_a_transfer_cut_midway_fails_the_payload_stream(
    master: RedisMaster, make_link: MakeLink
) -> None:
    with master.client() as client:
        client.execute("CONFIG", "SET", "repl-diskless-sync", "yes")
        client.execute("CONFIG", "SET", "repl-diskless-sync-delay", "0")
        client.execute("CONFIG", "SET", "rdb-key-save-delay", "5000")  # 5 ms a key
        rng = random.Random(1)  # incompressible: the master's child flushes every 16 kB
        client.pipeline([("SET", f"key:{i}", rng.randbytes(1000)) for i in range(300)])
    link = make_link()
    result = link.start()
    assert result.payload is not None
    assert result.payload.read(5) == b"REDIS"  # readable while it is still arriving
    assert link.state == "transfer"
    with master.client() as client:
        client.execute("CLIENT", "KILL", "TYPE", "replica")
        client.execute("CONFIG", "SET", "rdb-key-save-delay", "0")
    with pytest.raises(RedisLinkError, match="closed the connection") as raised:
        result.payload.read()
    assert raised.value.retryable and link.state == "failed"
    with pytest.raises(RedisLinkError):
        link.read_command(timeout=1)


def test_a_dropped_connection_delivers_what_arrived_then_fails_retryably(
    master: RedisMaster, make_link: MakeLink
) -> None:
    link = make_link()
    full_payload(link.start())
    with master.client() as client:
        client.pipeline([("SET", f"k{i}", i) for i in range(5)])
        target = stable_master_offset(client)
        wait_for(lambda: link.received_offset == target, what="the link to receive everything")
        client.execute("CLIENT", "KILL", "TYPE", "replica")
    wait_for(lambda: link.state == "failed", what="the link to notice")
    commands = read_until(link, target)
    assert len(data(commands)) == 6
    with pytest.raises(RedisLinkError, match="closed the connection") as raised:
        link.read_command(timeout=5)
    assert raised.value.retryable and link.error is raised.value


def test_a_consumer_too_far_behind_fails_the_link_past_max_spool_bytes(
    master: RedisMaster, make_link: MakeLink
) -> None:
    link = make_link(max_spool_bytes=50_000, chunk_bytes=4096)
    full_payload(link.start())
    with master.client() as client:
        client.pipeline([("SET", f"k{i}", "v" * 1000) for i in range(100)])  # 100 kB
    wait_for(lambda: link.state == "failed", what="the link to give up")
    commands = []
    with pytest.raises(RedisLinkError, match="too far behind") as raised:
        while True:
            command = link.read_command(timeout=5)
            assert command is not None
            commands.append(command)
    # A bound crossed: reconnecting would only cross it again.
    assert not raised.value.retryable and "--max-spool-bytes" in str(raised.value)
    assert 10 < len(commands) < 60  # what fitted was delivered, in order
    assert data(commands)[1:] == [
        [b"SET", f"k{i}".encode(), b"v" * 1000] for i in range(len(commands) - 1)
    ]


def test_a_silent_master_is_detected_by_the_read_timeout(
    master: RedisMaster, make_link: MakeLink
) -> None:
    link = make_link(read_timeout=1.0)
    result = link.start()
    full_payload(result)
    os.kill(master.process.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        with pytest.raises(RedisLinkError, match="nothing from the master for 1 s") as raised:
            link.read_command(timeout=10)
        assert raised.value.retryable
        assert time.monotonic() - started < 5
    finally:
        os.kill(master.process.pid, signal.SIGCONT)


def test_close_stops_everything(master: RedisMaster, make_link: MakeLink) -> None:
    link = make_link()
    result = link.start()
    assert result.payload is not None
    seen: list[ReplicatedCommand] = []
    consumer = threading.Thread(target=lambda: seen.extend(link.commands()))
    consumer.start()
    with master.client() as client:
        client.execute("SET", "k", "v")
        wait_for(lambda: len(seen) == 2, what="the commands")
        link.close()
        consumer.join(5)
        assert not consumer.is_alive()  # commands() ended
        assert link.state == "closed"
        wait_for(lambda: replicas(client) == [], what="the master to drop the replica")
    assert not [t for t in threading.enumerate() if t.name.startswith("redis-link-")]
    with pytest.raises(LinkClosed):
        link.read_command(timeout=1)
    with pytest.raises(LinkClosed):
        result.payload.read()
    link.close()  # idempotent
