"""The real `rkv` console script, run as a user runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from node.state.commands import Batch, Delete, Put, encode_entry
from node.storage.config import StorageConfig
from node.storage.datadir import LOG_DIR
from node.storage.recovery import open_storage
from tests.support.state import machine_of

RKV = Path(sys.executable).with_name("rkv")


def rkv(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(RKV), *args], check=False, capture_output=True, text=True, timeout=60
    )


def populate(data_dir: Path) -> None:
    storage = open_storage(data_dir, StorageConfig())
    machine = machine_of(storage)
    machine.apply(1, encode_entry(Batch(tuple(Put(b"k%d" % i, b"v") for i in range(10)), 1)))
    machine.apply(2, encode_entry(Batch((Delete(b"k0"),), 2)))
    storage.close()


def test_check_reports_a_data_directory(tmp_path: Path) -> None:
    populate(tmp_path)
    result = rkv("check", "--data-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    lines = dict(line.split("  ", 1) for line in result.stdout.splitlines())
    lines = {k.strip(): v.strip() for k, v in lines.items()}
    assert lines["keys"] == "9"
    assert lines["last offset"] == "11"
    assert lines["applied raft index"] == "2"


def test_check_of_a_missing_directory_is_a_clear_error(tmp_path: Path) -> None:
    result = rkv("check", "--data-dir", str(tmp_path / "nope"))
    assert result.returncode == 1
    assert "is not a directory" in result.stderr
    assert "Traceback" not in result.stderr


def test_check_of_a_corrupt_log_names_the_file_without_a_traceback(tmp_path: Path) -> None:
    populate(tmp_path)
    segment = sorted((tmp_path / LOG_DIR).glob("*.log"))[0]
    data = bytearray(segment.read_bytes())
    data[20] ^= 0xFF  # inside the first record, which is not the last one
    segment.write_bytes(bytes(data))
    result = rkv("check", "--data-dir", str(tmp_path))
    assert result.returncode == 1
    assert str(segment) in result.stderr and "checksum mismatch" in result.stderr
    assert "Traceback" not in result.stderr


def test_bad_usage_exits_2() -> None:
    result = rkv("check")
    assert result.returncode == 2
    assert "--data-dir" in result.stderr


def test_up_refuses_bad_arguments() -> None:
    result = rkv("up", "--nodes", "0")
    assert result.returncode == 2
    assert "--nodes" in result.stderr and "Traceback" not in result.stderr


def test_node_without_required_flags_exits_2() -> None:
    result = rkv("node", "--id", "a")
    assert result.returncode == 2
    assert "--data-dir" in result.stderr and "Traceback" not in result.stderr


def test_client_write_commands_parse_producer_triples_and_incr_amounts() -> None:
    from node.cli.main import build_parser  # noqa: PLC0415

    parser = build_parser()
    args = parser.parse_args(["incr", "k", "--by", "-3", "--producer", "7:2:0"])
    assert (args.command, args.key, args.by, args.producer) == ("incr", "k", -3, (7, 2, 0))
    assert parser.parse_args(["incr", "k"]).by == 1
    for command in (["put", "k", "v"], ["delete", "k"], ["append", "k", "v"], ["txn", "f"]):
        assert parser.parse_args([*command, "--producer", "1:0:9"]).producer == (1, 0, 9)
        assert parser.parse_args(command).producer is None
    init = parser.parse_args(["producer", "init", "--transactional-id", "app", "--json"])
    assert (init.producer_command, init.transactional_id, init.json) == ("init", "app", True)


def test_a_bad_producer_triple_is_a_usage_error_without_a_traceback() -> None:
    for value in ("7:2", "x:1:2", "1:2:-1", "1:2:3:4", " 1:2:3"):
        result = rkv("incr", "k", f"--producer={value}", "--url", "http://127.0.0.1:9")
        assert result.returncode == 2, value
        assert "argument --producer: must be ID:EPOCH:SEQ" in result.stderr
        assert "Traceback" not in result.stderr
    missing = rkv("producer")
    assert missing.returncode == 2 and "init" in missing.stderr
