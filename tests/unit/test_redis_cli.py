"""`rkv redis-replicate`'s settings: where the master's password comes from, and the
bounds' defaults (kept in node/cli/redis.py so that `rkv --help` stays light)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from http_api.client import LockHolder
from http_api.client.lease_model import check_lock_name
from node.cli import redis as redis_cli
from replication.redis.checkpoint import Checkpoint
from replication.redis.link.master_link import DEFAULT_MAX_COMMAND_BYTES, DEFAULT_MAX_SPOOL_BYTES
from replication.redis.rdb import DEFAULT_MAX_VALUE_BYTES
from replication.redis.standby import DEFAULT_LOCK_TTL, lock_name
from replication.redis.status import status_lines

URL = "redis://127.0.0.1:6379"


def test_the_cli_defaults_are_the_replicators() -> None:
    assert redis_cli.DEFAULT_MAX_COMMAND_BYTES == DEFAULT_MAX_COMMAND_BYTES
    assert redis_cli.DEFAULT_MAX_SPOOL_BYTES == DEFAULT_MAX_SPOOL_BYTES
    assert redis_cli.DEFAULT_MAX_RDB_VALUE_BYTES == DEFAULT_MAX_VALUE_BYTES
    assert redis_cli.DEFAULT_LOCK_TTL == DEFAULT_LOCK_TTL


def test_the_password_comes_from_a_file_then_the_environment_then_the_url(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = tmp_path / "password"
    secret.write_text("from file\n")
    secret.chmod(0o600)
    env = {redis_cli.PASSWORD_ENV: "from env"}
    address = redis_cli.source_address(URL, str(secret), env)
    assert (address.username, address.password) == (None, "from file")
    address = redis_cli.source_address("redis://repl@127.0.0.1:6379", None, env)
    assert (address.username, address.password) == ("repl", "from env")
    assert capsys.readouterr().err == ""  # nothing to warn about
    address = redis_cli.source_address("redis://:in%20url@127.0.0.1", None, {})
    assert address.password == "in url"
    warning = capsys.readouterr().err
    assert "warning" in warning and "--source-password-file" in warning
    assert "in url" not in warning and "in%20url" not in warning
    # A password is given once.
    with pytest.raises(ValueError, match="give it once") as twice:
        redis_cli.source_address("redis://:in-url@127.0.0.1", str(secret), {})
    assert "in-url" not in str(twice.value)
    with pytest.raises(ValueError, match="a user needs a password"):
        redis_cli.source_address("redis://repl@127.0.0.1", None, {})


def test_a_password_file_is_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "password"
    path.write_bytes(b"s3cret\r\n")
    path.chmod(0o644)
    assert redis_cli.source_address(URL, str(path), {}).password == "s3cret"
    assert "can be read by other users" in capsys.readouterr().err
    path.write_bytes(b"\n")
    with pytest.raises(ValueError, match="is empty"):
        redis_cli.source_address(URL, str(path), {})
    with pytest.raises(ValueError, match="cannot read --source-password-file"):
        redis_cli.source_address(URL, str(tmp_path / "missing"), {})


def test_a_bad_setting_is_a_usage_error() -> None:
    for args in (
        ["--max-spool-bytes", "1000"],
        ["--max-command-bytes", "abc"],
        ["--lock-ttl", "0"],
        ["--lock-ttl", "x"],
    ):
        done = _replicate("--source", URL, *args)
        assert done.returncode == 2, done.stderr
        assert args[0] in done.stderr


def _replicate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "node.cli", "redis-replicate", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_without_a_source_only_the_status_runs() -> None:
    done = _replicate("--url", "http://127.0.0.1:1")
    assert done.returncode == 2, done.stderr
    assert "--source is required" in done.stderr


def test_the_lock_is_named_after_the_prefix() -> None:
    assert lock_name(b"redis/") == "redis-replicate:redis"
    assert lock_name(b"cache/eu") == "redis-replicate:cache/eu"
    assert check_lock_name(lock_name(b"a:b@c.d-e_f/")) == "redis-replicate:a:b@c.d-e_f"


def test_the_status_names_the_holder_since_when_and_the_checkpoint() -> None:
    holder = LockHolder(
        "redis-replicate:redis", 7, 42, '{"host":"h1","pid":9,"source":"redis://m:6379"}', 1000
    )
    checkpoint = Checkpoint("abc", 100, 0, 2, "streaming", master_offset=150, updated_ms=2000)
    checkpoint.sync, checkpoint.master, checkpoint.synced_ms = "+CONTINUE", "m2:6379", 1500
    text = "\n".join(status_lines(b"redis/", "redis-replicate:redis", holder, [(None, checkpoint)]))
    assert "h1 pid 9 (token 42, replicating redis://m:6379)" in text
    assert "1970-01-01T00:00:01Z" in text
    assert "streaming, generation 2, replid abc, offset 100" in text
    assert "50 bytes behind" in text
    assert "last sync:   +CONTINUE from m2:6379 at 1970-01-01T00:00:01Z" in text
    assert Checkpoint.decode(checkpoint.encode()) == checkpoint
    idle = "\n".join(status_lines(b"redis/", "redis-replicate:redis", None, [(None, None)]))
    assert "holder:      none" in idle and "checkpoint:  none" in idle
    shards = "\n".join(
        status_lines(
            b"redis/", "redis-replicate:redis", holder, [("83a632e652af slots 0-5460", checkpoint)]
        )
    )
    assert "shard:       83a632e652af slots 0-5460\n  checkpoint:  streaming" in shards
