"""Flags and RKV_* variables become one validated NodeConfig, or a clear ConfigError."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from node.cli.settings import NodeConfig, add_node_arguments, node_config
from node.errors import ConfigError
from raft.config import TransportLimits


def parse(argv: list[str], env: dict[str, str] | None = None) -> NodeConfig:
    parser = argparse.ArgumentParser()
    add_node_arguments(parser)
    return node_config(parser.parse_args(argv), env or {})


BASE = ["--id", "n0", "--data-dir", "/tmp/x", "--raft-listen", "127.0.0.1:9001"]
SECRET = {"RKV_CLUSTER_SECRET": "s" * 32}


def test_flags_make_a_config_with_defaults() -> None:
    config = parse([*BASE, "--peer", "n1,127.0.0.1:9002,http://127.0.0.1:8002/"], SECRET)
    assert config.node_id == "n0" and config.data_dir == Path("/tmp/x")
    assert (config.http_host, config.http_port) == ("127.0.0.1", 8001)
    assert config.advertise_url == "http://127.0.0.1:8001"
    assert [(p.node_id, p.raft_address, p.http_url) for p in config.peers] == [
        ("n1", "127.0.0.1:9002", "http://127.0.0.1:8002")
    ]
    assert config.raft.journal_dir == "/tmp/x/raft"
    assert config.secret == b"s" * 32
    assert (config.max_txn_ops, config.http_idle_timeout) == (1024, 60.0)
    assert config.compaction_triggers.min_dirty_ratio == 0.5
    assert (config.max_producers, config.producer_sweep_slice) == (100_000, 1000)
    assert (config.audit_keep, config.audit_keep_age_seconds) == (3, 86400.0)


def test_limits_of_producers_and_audit_exports() -> None:
    config = parse(
        [*BASE, "--max-producers", "5", "--audit-keep-age", "0"],
        {**SECRET, "RKV_PRODUCER_SWEEP_SLICE": "7", "RKV_AUDIT_KEEP": "1"},
    )
    assert (config.max_producers, config.producer_sweep_slice) == (5, 7)
    assert (config.audit_keep, config.audit_keep_age_seconds) == (1, 0.0)


def test_environment_variables_fill_in_and_flags_win() -> None:
    env = {
        **SECRET,
        "RKV_ID": "from-env",
        "RKV_DATA_DIR": "/data",
        "RKV_LISTEN": "0.0.0.0:9999",
        "RKV_INSECURE_NO_AUTH": "1",
        "RKV_RAFT_LISTEN": "10.0.0.1:7000",
        "RKV_PEERS": "b,10.0.0.2:7000,http://b:8001;c,10.0.0.3:7000,http://c:8001",
        "RKV_MAX_VALUE_BYTES": "2048",
    }
    config = parse([], env)
    assert (config.node_id, config.http_port, len(config.peers)) == ("from-env", 9999, 2)
    assert config.storage.max_value_bytes == 2048
    assert parse(["--id", "flag"], env).node_id == "flag"


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--data-dir", "/x", "--raft-listen", "h:1"], SECRET, "--id"),
        (["--id", "a", "--raft-listen", "h:1"], SECRET, "--data-dir"),
        (["--id", "a", "--data-dir", "/x"], SECRET, "--raft-listen"),
        ([*BASE, "--listen", "nohost"], SECRET, "--listen must be HOST:PORT"),
        ([*BASE, "--listen", "h:70000"], SECRET, "--listen must be HOST:PORT"),
        ([*BASE, "--peer", "n1,127.0.0.1:9002"], SECRET, "a peer is ID,RAFT_HOST:PORT,HTTP_URL"),
        ([*BASE, "--peer", "n1,127.0.0.1:9002,ftp://x"], SECRET, "must start with http://"),
        ([*BASE, "--peer", "n0,127.0.0.1:9002,http://x"], SECRET, "member ids must be unique"),
        ([*BASE, "--max-value-bytes", "-1"], SECRET, "--max-value-bytes must be a positive"),
        ([*BASE, "--proposal-timeout", "soon"], SECRET, "--proposal-timeout must be a number"),
        ([*BASE, "--log-level", "LOUD"], SECRET, "--log-level must be"),
        ([*BASE, "--max-txn-ops", "10001"], SECRET, "--max-txn-ops must be at most 10000"),
        (["--id", "..", "--data-dir", "/x", "--raft-listen", "h:1"], SECRET, "may not be"),
        ([*BASE, "--peer", "a/b,127.0.0.1:9002,http://x"], SECRET, "may not be"),
        ([*BASE, "--max-txn-ops", "0"], SECRET, "--max-txn-ops must be a positive"),
        ([*BASE, "--http-idle-timeout", "0"], SECRET, "--http-idle-timeout must be positive"),
        ([*BASE, "--compaction-min-dirty-ratio", "2"], SECRET, "must be from 0 to 1"),
        ([*BASE, "--max-txn-result-bytes", "1052671"], SECRET, "one get of the largest"),
        ([*BASE, "--max-entry-bytes", "1048576"], SECRET, "one write of the largest"),
        ([*BASE, "--max-producers", "0"], SECRET, "--max-producers must be a positive"),
        ([*BASE, "--producer-sweep-slice", "x"], SECRET, "--producer-sweep-slice must be"),
        ([*BASE, "--audit-keep", "0"], SECRET, "--audit-keep must be a positive"),
        ([*BASE, "--audit-keep-age", "-1"], SECRET, "--audit-keep-age must be 0"),
        ([*BASE, "--audit-keep-age", "day"], SECRET, "--audit-keep-age must be a number"),
        ([*BASE, "--max-raft-frame-bytes", "1048576"], SECRET, "must be at least 34668544"),
        ([*BASE, "--raft-handshake-timeout", "0"], SECRET, "--raft-handshake-timeout must be"),
        ([*BASE, "--max-raft-handshakes", "0"], SECRET, "--max-raft-handshakes must be a pos"),
        (BASE, {}, "a cluster secret is required"),
        (BASE, {"RKV_CLUSTER_SECRET": "short"}, "at least 16 bytes"),
        ([*BASE, "--secret-file", "/nonexistent/secret"], {}, "cannot read the secret file"),
    ],
)
def test_bad_configuration_is_a_clear_error(
    argv: list[str], env: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        parse(argv, env)


def test_raft_port_limits_have_defaults_flags_and_variables() -> None:
    assert parse(BASE, SECRET).raft.transport == TransportLimits(64 * 2**20, 5.0, 32)
    env = {**SECRET, "RKV_RAFT_HANDSHAKE_TIMEOUT": "2.5", "RKV_MAX_RAFT_HANDSHAKES": "8"}
    limits = parse([*BASE, "--max-raft-frame-bytes", str(40 * 2**20)], env).raft.transport
    assert limits == TransportLimits(40 * 2**20, 2.5, 8)


def test_the_raft_frame_limit_grows_with_the_largest_write_it_must_carry() -> None:
    # A 64 MiB value makes a body limit of 128 MiB: one write's entry may be that large.
    config = parse([*BASE, "--max-value-bytes", str(64 * 2**20)], SECRET)
    assert config.raft.transport.max_frame_bytes >= 2 * (128 * 2**20)
    with pytest.raises(ConfigError, match="--max-raft-frame-bytes must be at least"):
        parse(
            [*BASE, "--max-value-bytes", str(64 * 2**20), "--max-raft-frame-bytes", str(2**27)],
            SECRET,
        )


def test_insecure_dev_mode_runs_without_a_secret_only_when_asked() -> None:
    assert parse([*BASE, "--insecure-dev-mode"]).secret is None
    assert parse(BASE, {"RKV_INSECURE_DEV_MODE": "1"}).secret is None


def test_secret_file_is_read_and_stripped(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("x" * 40 + "\n")
    assert parse([*BASE, "--secret-file", str(secret)]).secret == b"x" * 40


def test_the_secret_never_shows_in_a_repr() -> None:
    config = parse(BASE, SECRET)
    assert config.secret == b"s" * 32
    assert "ssssssss" not in repr(config)
    assert "ssssssss" not in repr(config.raft)


def test_a_new_data_directory_is_the_owners_only(tmp_path: Path) -> None:
    from node.storage.config import StorageConfig  # noqa: PLC0415
    from node.storage.recovery import open_storage  # noqa: PLC0415

    storage = open_storage(tmp_path / "fresh", StorageConfig())
    try:
        assert (tmp_path / "fresh").stat().st_mode & 0o777 == 0o700
    finally:
        storage.close()


def test_log_format_and_the_readiness_free_space_bound() -> None:
    default = parse(BASE, SECRET).diagnostics
    assert (default.log_format, default.ready_min_free_bytes) == ("text", 64 * 1024 * 1024)
    flags = parse([*BASE, "--log-format", "JSON", "--ready-min-free-bytes", "0"], SECRET)
    assert (flags.diagnostics.log_format, flags.diagnostics.ready_min_free_bytes) == ("json", 0)
    env = {**SECRET, "RKV_LOG_FORMAT": "json", "RKV_READY_MIN_FREE_BYTES": "1000"}
    from_env = parse(BASE, env).diagnostics
    assert (from_env.log_format, from_env.ready_min_free_bytes) == ("json", 1000)
    with pytest.raises(ConfigError, match="--log-format must be text or json"):
        parse([*BASE, "--log-format", "yaml"], SECRET)
    with pytest.raises(ConfigError, match="--ready-min-free-bytes must be a whole number"):
        parse([*BASE, "--ready-min-free-bytes", "-1"], SECRET)
    with pytest.raises(ConfigError, match="--ready-min-free-bytes must be a whole number"):
        parse([*BASE, "--ready-min-free-bytes", "\u00b2"], SECRET)


def test_bulk_load_limits() -> None:
    config = parse([*BASE], SECRET)
    assert (config.load.chunk_keys, config.load.chunks_in_flight) == (20_000, 4)
    assert config.load.chunk_bytes == config.raft.max_entry_bytes  # a chunk is one entry
    config = parse(
        [*BASE, "--load-chunk-keys", "500", "--max-entry-bytes", str(8 << 20)],
        {**SECRET, "RKV_LOAD_CHUNKS_IN_FLIGHT": "1"},
    )
    assert (config.load.chunk_keys, config.load.chunk_bytes) == (500, 8 << 20)
    assert config.load.chunks_in_flight == 1
    for argv, problem in (
        (["--load-chunk-keys", "0"], "--load-chunk-keys"),
        (["--load-chunk-keys", "1000001"], "at most 1000000"),
        (["--load-chunks-in-flight", "17"], "at most 16"),
    ):
        with pytest.raises(ConfigError, match=problem):
            parse([*BASE, *argv], SECRET)
