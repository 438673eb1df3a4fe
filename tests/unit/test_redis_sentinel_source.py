"""`--source redis-sentinel://...`: the URL, where the sentinels' and the master's
passwords come from, and what a sentinel's messages mean (no network but a closed port)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from node.cli import redis as redis_cli
from replication.redis.link.sentinel import SentinelMaster, SentinelSource
from replication.redis.link.types import MasterAddress, RedisLinkError

URL = "redis-sentinel://10.0.0.1:26380,sentinel-b,[::1]:5000/cache%2Deu-1"


def test_the_url_names_the_sentinels_and_the_master() -> None:
    source = SentinelSource.parse(URL)
    assert source.sentinels == (("10.0.0.1", 26380), ("sentinel-b", 26379), ("::1", 5000))
    assert source.master_name == "cache-eu-1"
    assert (source.username, source.password, source.master_password) == (None, None, None)
    source = SentinelSource.parse("redis-sentinel://watch:p%40ss@h:1/m", master_password="mp")
    assert (source.username, source.password, source.master_password) == ("watch", "p@ss", "mp")
    assert str(source) == "redis-sentinel://watch:***@h:1/m"
    assert "p@ss" not in repr(source) and "mp" not in repr(source)


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("redis-sentinel://h:1", "no master name"),
        ("redis-sentinel://h:1/", "no master name"),
        ("redis-sentinel://h:1/a/b", "no master name"),
        ("redis-sentinel://h:1/a%20b", "no master name"),
        ("redis-sentinel://h:1/m?db=1", "nothing may follow"),
        ("redis-sentinel://h:99999/m", "out of range"),
        ("redis-sentinel://h:1,,h:2/m", "is not host:port"),
        ("redis-sentinel://user@h:1/m", "a user needs a password"),
        ("redis://h:1/m", "expected redis-sentinel://"),
    ],
)
def test_a_bad_url_is_refused_with_the_problem_named(url: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        SentinelSource.parse(url)


def test_a_password_is_given_once_and_never_shown() -> None:
    with pytest.raises(ValueError, match="give it once") as twice:
        SentinelSource.parse("redis-sentinel://:S3cretInUrl@h:1/m", password="S3cretApart")
    assert "S3cret" not in str(twice.value)
    with pytest.raises(ValueError) as bad:
        SentinelSource.parse("redis-sentinel://u:hidden@h:1")
    assert "hidden" not in str(bad.value)


def test_the_cli_takes_each_password_from_its_file_then_the_environment_then_the_url(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sentinel_file, master_file = tmp_path / "sentinel", tmp_path / "master"
    sentinel_file.write_text("sentinel from file\n")
    master_file.write_text("master from file\n")
    for path in (sentinel_file, master_file):
        path.chmod(0o600)
    env = {
        redis_cli.SENTINEL_PASSWORD_ENV: "sentinel from env",
        redis_cli.PASSWORD_ENV: "master from env",
    }
    url = "redis-sentinel://h:1/m"
    source = redis_cli.replication_source(url, str(master_file), str(sentinel_file), env)
    assert isinstance(source, SentinelSource)
    assert (source.password, source.master_password) == ("sentinel from file", "master from file")
    source = redis_cli.replication_source(url, None, None, env)
    assert isinstance(source, SentinelSource)
    assert (source.password, source.master_password) == ("sentinel from env", "master from env")
    assert capsys.readouterr().err == ""
    source = redis_cli.replication_source("redis-sentinel://:in%20url@h:1/m", None, None, {})
    assert isinstance(source, SentinelSource)
    assert (source.password, source.master_password) == ("in url", None)
    warning = capsys.readouterr().err
    assert "--sentinel-password-file" in warning and "in url" not in warning
    with pytest.raises(ValueError, match="give it once"):
        redis_cli.replication_source("redis-sentinel://:x@h:1/m", None, str(sentinel_file), {})
    with pytest.raises(ValueError, match="is for a redis-sentinel:// --source"):
        redis_cli.replication_source("redis://h:1", None, str(sentinel_file), {})
    with pytest.raises(ValueError, match="cannot read --sentinel-password-file"):
        redis_cli.replication_source(url, None, str(tmp_path / "missing"), {})
    plain = redis_cli.replication_source("redis://h:1", str(master_file), None, {})
    assert isinstance(plain, MasterAddress) and plain.password == "master from file"


def test_switch_master_messages_about_another_master_are_ignored() -> None:
    master = SentinelMaster(SentinelSource.parse("redis-sentinel://h:1/m", master_password="pw"))
    moved = master._switched_to([b"message", b"+switch-master", b"m 10.0.0.1 6379 10.0.0.2 6380"])
    assert moved == MasterAddress("10.0.0.2", 6380, None, "pw")
    assert moved.password == "pw"
    for message in (
        [b"message", b"+switch-master", b"other 10.0.0.1 6379 10.0.0.2 6380"],
        [b"message", b"+switch-master", b"m 10.0.0.2 6380"],
        [b"pong", b""],
        [b"subscribe", b"+switch-master", 1],
    ):
        assert master._switched_to(message) is None


def test_no_sentinel_reachable_is_worth_retrying() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed once the block ends: connections are refused
    master = SentinelMaster(SentinelSource.parse(f"redis-sentinel://127.0.0.1:{port}/m"), 2.0)
    with pytest.raises(RedisLinkError, match="no sentinel named the master 'm'") as error:
        master.locate()
    assert error.value.retryable
