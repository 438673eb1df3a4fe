"""`rkv redis-replicate --source redis-sentinel://...` end to end: a real master, a real
replica and three real sentinels (tests/redis/sentinel_support.py), a real 3-node rkv
cluster, the replicator as a child process.

Redis replication is asynchronous: a failover may lose the last writes the old master
took. rkv is therefore compared with the NEW master (every key the writer touched is in
that comparison), never with what the writer sent.
"""

from __future__ import annotations

import re
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.redis.conftest import RedisServer
from tests.redis.replica_support import (
    Replicator,
    compare_dumps,
    master_offset,
    redis_dump,
    replicate_status,
    rkv_dump,
    wait_caught_up,
)
from tests.redis.resp_client import RespClient, RespError
from tests.redis.sentinel_support import (
    MASTER_NAME,
    SentinelGroup,
    fields,
    run_sentinel_group,
)
from tests.redis.test_replicator_metrics import scrape, value
from tests.redis.workload import populate
from tests.support.cluster import LocalCluster, free_ports, wait_until

PASSWORD = "master-s3cret"
SENTINEL_PASSWORD = "sentinel-s3cret"


class Writer:
    """Writes to whichever server the sentinels name as the master, asking them again
    after any error (a refused write, a dead master); remembers every key it touched."""

    def __init__(self, group: SentinelGroup) -> None:
        self.group = group
        self.keys: set[str] = set()
        self.writes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Writer:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def wait_for_writes(self, more: int) -> None:
        target = self.writes + more
        wait_until(lambda: self.writes >= target, 60, f"{more} more writes")

    def _run(self) -> None:
        client: RespClient | None = None
        i = 0
        while not self._stop.is_set():
            try:
                if client is None:
                    client = self.group.client_of(self.group.master(), 10)
                for command in (
                    ("INCR", f"counter:{i % 37}"),
                    ("RPUSH", f"list:{i % 11}", str(i)),
                    ("SET", f"key:{i % 500}", f"value {i}"),
                    ("HSET", f"hash:{i % 7}", f"field:{i % 13}", str(i)),
                ):
                    self.keys.add(command[1])
                    client.execute(*command)
                self.writes += 1
                i += 1
                time.sleep(0.002)
            except (OSError, ConnectionError, RespError, AssertionError):
                if client is not None:
                    client.close()
                client = None
                time.sleep(0.1)
        if client is not None:
            client.close()


def start_replicator(
    tmp_path: Path, cluster: LocalCluster, group: SentinelGroup, *extra: str
) -> tuple[Replicator, str]:
    """The replicator on the sentinels (``extra`` flags), serving metrics; its metrics URL."""
    (port,) = free_ports(1)
    master = group.master()
    replicator = Replicator(
        master,
        cluster,
        tmp_path / "replicator.log",
        "--metrics-listen",
        f"127.0.0.1:{port}",
        *extra,
    )
    replicator.source = group.url()
    replicator.start()
    return replicator, f"http://127.0.0.1:{port}/metrics"


def wait_streaming(cluster: LocalCluster, group: SentinelGroup, replicator: Replicator) -> None:
    """Wait until the checkpoint is on the master's replication id, at its offset."""
    with group.client_of(group.master()) as client:

        def there() -> bool:
            state = info(client)
            found = wait_caught_up(cluster, client, replicator)
            return bool(found["replid"] == state["master_replid"])

        wait_until(there, 120, "the replicator on the master's replication id", 0.2)


def assert_equals_new_master(
    cluster: LocalCluster, group: SentinelGroup, replicator: Replicator, writer: Writer
) -> None:
    """rkv equals the new master, every key the writer touched included."""
    dumped = assert_same_as_master(cluster, group, replicator)
    in_rkv = {record["key"] for record in dumped if record["db"] == 0}
    assert writer.keys and writer.keys <= in_rkv


def assert_same_as_master(
    cluster: LocalCluster, group: SentinelGroup, replicator: Replicator
) -> list[dict[str, Any]]:
    """Once caught up, rkv's dump equals the master's; returns it."""
    wait_streaming(cluster, group, replicator)
    with group.client_of(group.master()) as client:
        wait_caught_up(cluster, client, replicator)
        started = time.monotonic()
        expected = redis_dump(client)
    dumped = rkv_dump(cluster)
    problems = compare_dumps(dumped, expected, int((time.monotonic() - started) * 1000))
    assert not problems, "\n".join(problems[:20]) + "\n" + replicator.output()[-2000:]
    assert expected
    return dumped


def failover(group: SentinelGroup) -> None:
    """SENTINEL FAILOVER, once the sentinels have a replica they may promote."""

    def accepted() -> bool:
        live = next(s for s in group.sentinels if s.process.poll() is None)
        with live.client() as client:
            try:
                return bool(client.execute("SENTINEL", "FAILOVER", MASTER_NAME) == "OK")
            except RespError as error:  # NOGOODSLAVE, INPROG: not yet
                return "NOGOOD" not in str(error) and "INPROG" not in str(error)

    wait_until(accepted, 60, "the sentinels to accept a failover", 0.5)


def resync_after_switch(output: str, new_port: int, switches: int = 1) -> tuple[str, int]:
    """The path (+CONTINUE / +FULLRESYNC) the replicator logged on reaching the new master
    (its ``switches``-th switch of master), and the offset its PSYNC asked to continue
    after."""
    pattern = (
        r"(partial resync \(\+CONTINUE\)|full resync \(\+FULLRESYNC\)) from "
        rf"redis://(?::\*\*\*@)?127\.0\.0\.1:{new_port} (?:after|at) offset (\d+)"
        r"(?: \(PSYNC asked to continue after offset (\d+)\))? \(the master moved"
    )
    assert output.count("(the master moved: was") == switches, output[-3000:]
    found = re.findall(pattern, output)
    assert found, output[-3000:]
    kind, offset, asked = found[-1]
    path = "+CONTINUE" if "CONTINUE" in kind else "+FULLRESYNC"
    return path, int(asked or offset)


def switches(url: str) -> dict[str, float]:
    samples = scrape(url)
    return {
        path: value(samples, "rkv_redis_master_switches_total", path=path) or 0.0
        for path in ("continue", "fullresync")
    }


@pytest.mark.timeout(300)
def test_a_sentinel_failover_under_writes_continues_on_the_new_master(
    tmp_path: Path, cluster: LocalCluster
) -> None:
    """SENTINEL FAILOVER as a planned switchover: the old master's writes are paused
    (CLIENT PAUSE WRITE: they wait instead of being taken and then lost) until it is
    demoted, so that the stream the replicator received is all in the new master's
    history. The replicator continues there with +CONTINUE, no full resync. The sentinel
    it listens to first is killed before: it listens on another one."""
    for name, secret in (("master", PASSWORD), ("sentinel", SENTINEL_PASSWORD)):
        (tmp_path / name).write_text(secret + "\n")
        (tmp_path / name).chmod(0o600)
    with run_sentinel_group(tmp_path / "redis", PASSWORD, SENTINEL_PASSWORD) as group:
        old = group.master()
        with group.client_of(old) as client:
            populate(client)
        replicator, metrics = start_replicator(
            tmp_path,
            cluster,
            group,
            "--source-password-file",
            str(tmp_path / "master"),
            "--sentinel-password-file",
            str(tmp_path / "sentinel"),
        )
        try:
            with Writer(group) as writer:
                writer.wait_for_writes(200)
                wait_until(lambda: "full sync done" in replicator.output(), 60, "the full sync")
                group.sentinels[0].stop(signal.SIGKILL)  # the one it listens to
                writer.wait_for_writes(200)
                with group.client_of(old) as client:
                    client.execute("CLIENT", "PAUSE", 60_000, "WRITE")
                    target = master_offset(client)
                replica = next(s for p, s in group.servers.items() if p != old.port)
                with group.client_of(replica) as client:
                    wait_until(lambda: replica_offset(client) >= target, 30, "the replica")
                with group.sentinels[1].client() as client:
                    assert client.execute("SENTINEL", "FAILOVER", MASTER_NAME) == "OK"
                new = group.wait_switched(old.port)
                wait_until(lambda: group.role(old) == "slave", 60, "the old master's demotion")
                with group.client_of(old) as client:
                    client.execute("CLIENT", "UNPAUSE")
                writer.wait_for_writes(300)  # on the new master
            assert_equals_new_master(cluster, group, replicator, writer)
            output = replicator.output()
            assert "listening for +switch-master on the next" in output, output
            assert f"+switch-master to redis://:***@127.0.0.1:{new.port}" in output, output
            path, _asked = resync_after_switch(output, new.port)
            assert path == "+CONTINUE", output[-3000:]
            assert output.count("full sync done") == 1, output[-3000:]
            assert switches(metrics) == {"continue": 1.0, "fullresync": 0.0}
            status = replicate_status(cluster)
            assert f"last sync:   +CONTINUE from 127.0.0.1:{new.port}" in status, status
        finally:
            replicator.stop()


@pytest.mark.timeout(300)
def test_a_killed_master_under_writes_is_followed_to_the_promoted_replica(
    tmp_path: Path, cluster: LocalCluster
) -> None:
    """kill -9 of the master: the replicator asks the sentinels again at each reconnect
    until they name the promoted replica. It continues there with +CONTINUE when what it
    committed is in the new master's history (its offset at most the new master's
    second_repl_offset - 1), which the replica, as fast as the replicator, almost always
    has; else Redis forces (and it takes) a full resync. rkv then equals the new master."""
    with run_sentinel_group(tmp_path / "redis") as group:
        old = group.master()
        with group.client_of(old) as client:
            populate(client)
        replicator, metrics = start_replicator(tmp_path, cluster, group)
        try:
            with Writer(group) as writer:
                writer.wait_for_writes(300)
                wait_streaming(cluster, group, replicator)
                writer.wait_for_writes(200)
                group.stop_server(old.port, signal.SIGKILL)
                new = group.wait_switched(old.port)
                writer.wait_for_writes(300)  # on the new master
            assert_equals_new_master(cluster, group, replicator, writer)
            output = replicator.output()
            path, asked = resync_after_switch(output, new.port)
            with group.client_of(new) as client:
                history_end = int(info(client)["second_repl_offset"]) - 1
            assert path == ("+CONTINUE" if asked <= history_end else "+FULLRESYNC"), output
            expected = {"continue": 0.0, "fullresync": 0.0}
            expected["continue" if path == "+CONTINUE" else "fullresync"] = 1.0
            assert switches(metrics) == expected
        finally:
            replicator.stop()


@pytest.mark.timeout(300)
def test_plain_failovers_of_an_idle_master_continue_despite_the_sentinels_hellos(
    tmp_path: Path, cluster: LocalCluster
) -> None:
    """A SENTINEL FAILOVER with nothing paused: the old master takes the sentinels' hello
    messages (PUBLISH, every 2 s from each) and its PINGs after the promotion, so its
    stream, and the replicator's checkpoint, go past the new master's history. All of
    that tail is data-neutral: the replicator asks to continue after the last command
    that changed data, which the new master has, and gets +CONTINUE. Twice, back and
    forth."""
    with run_sentinel_group(tmp_path / "redis") as group:
        with group.client_of(group.master()) as client:
            populate(client)
        replicator, metrics = start_replicator(tmp_path, cluster, group)
        try:
            wait_streaming(cluster, group, replicator)
            for round_ in (1, 2):
                old = group.master()
                time.sleep(3)  # hellos and PINGs after the last write
                failover(group)
                new = group.wait_switched(old.port)
                wait_streaming(cluster, group, replicator)
                path, asked = resync_after_switch(replicator.output(), new.port, round_)
                with group.client_of(new) as client:
                    history_end = int(info(client)["second_repl_offset"]) - 1
                assert asked <= history_end and path == "+CONTINUE", replicator.output()
                assert switches(metrics) == {"continue": float(round_), "fullresync": 0.0}
                # Sentinel may promote a replica still resyncing (it would lack the
                # history): the next round waits until the old master is in sync.
                wait_until(lambda: in_sync(group, old), 60, "the old master's resync")  # noqa: B023
            with group.client_of(group.master()) as client:
                client.execute("SET", "after", "two failovers")
            assert_same_as_master(cluster, group, replicator)
        finally:
            replicator.stop()


@pytest.mark.timeout(300)
def test_the_replicator_is_never_a_promotion_candidate(
    tmp_path: Path, cluster: LocalCluster
) -> None:
    """The replicator announces listening-port 0: the master lists it there, the
    sentinels see a replica at port 0 that is down, and with the only real replica made
    unpromotable (replica-priority 0) a failover finds no candidate at all."""
    with run_sentinel_group(tmp_path / "redis") as group:
        master = group.master()
        replicator, _metrics = start_replicator(tmp_path, cluster, group)
        try:
            wait_streaming(cluster, group, replicator)
            with group.client_of(master) as client:
                listed = [v for k, v in info(client).items() if re.fullmatch(r"slave\d+", k)]
            assert sorted("port=0" in entry for entry in listed) == [False, True], listed
            replica = next(s for p, s in group.servers.items() if p != master.port)

            def ours() -> dict[str, str] | None:
                for entry in group.replicas():
                    found = fields(entry)
                    if found["name"] == "127.0.0.1:0" and "s_down" in found["flags"]:
                        return found
                return None

            seen = wait_until(ours, 30, "the sentinels to see the replicator down")
            assert "disconnected" in seen["flags"]
            with group.client_of(replica) as client:
                client.execute("CONFIG", "SET", "replica-priority", 0)

            def unpromotable() -> bool:
                return all(
                    fields(e)["slave-priority"] == "0"
                    for e in group.replicas()
                    if fields(e)["name"] == f"127.0.0.1:{replica.port}"
                )

            wait_until(unpromotable, 30, "the sentinels to see replica-priority 0")
            with group.sentinels[0].client() as client, pytest.raises(RespError, match="NOGOOD"):
                client.execute("SENTINEL", "FAILOVER", MASTER_NAME)
            assert group.master_port() == master.port
        finally:
            replicator.stop()


@pytest.mark.timeout(120)
def test_a_wrong_sentinel_password_or_master_name_stops_with_a_clear_error(
    tmp_path: Path, cluster: LocalCluster
) -> None:
    with run_sentinel_group(tmp_path / "redis", None, SENTINEL_PASSWORD) as group:
        replicator = Replicator(group.master(), cluster, tmp_path / "wrong.log")
        replicator.start(group.url(":nope@"))
        assert replicator.wait(60) == 3
        assert "refused the login" in replicator.output(), replicator.output()
        assert "nope" not in replicator.output()
        replicator = Replicator(group.master(), cluster, tmp_path / "none.log")
        replicator.start(group.url())
        assert replicator.wait(60) == 3
        assert "--sentinel-password-file" in replicator.output(), replicator.output()
        replicator = Replicator(group.master(), cluster, tmp_path / "name.log")
        replicator.start(group.url(f":{SENTINEL_PASSWORD}@").replace(MASTER_NAME, "other"))
        assert replicator.wait(60) == 3
        assert "no sentinel knows a master named 'other'" in replicator.output()


def in_sync(group: SentinelGroup, server: RedisServer) -> bool:
    with group.client_of(server, 5) as client:
        state = info(client)
    return state.get("role") == "slave" and state.get("master_link_status") == "up"


def replica_offset(client: RespClient) -> int:
    return int(info(client)["slave_repl_offset"])


def info(client: RespClient) -> dict[str, Any]:
    text = client.execute("INFO", "replication").decode()
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
