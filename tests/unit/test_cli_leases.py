"""The command lines of `rkv lock`, `rkv elect`, `rkv lease` and `--fencing`, parsed
(their runs against real nodes: tests/cluster/test_cli_leases.py)."""

from __future__ import annotations

import argparse

import pytest

from node.cli.common import fencing_pair
from node.cli.lock import _command
from node.cli.main import build_parser


def _lock(*argv: str) -> tuple[argparse.Namespace, list[str]]:
    args = build_parser().parse_args(["lock", *argv])
    return args, _command(args)


def test_lock_options_go_before_or_after_the_name_and_the_command_after_dashes() -> None:
    args, command = _lock("jobs/a", "--", "sh", "-c", "echo $RKV_LOCK_TOKEN")
    assert (args.name, args.ttl, args.timeout, command) == (
        "jobs/a",
        10,
        None,
        ["sh", "-c", "echo $RKV_LOCK_TOKEN"],
    )
    args, command = _lock(
        "--ttl", "5", "jobs/a", "--timeout", "1.5", "--url", "http://h:1", "--", "x", "--ttl", "3"
    )
    assert (args.ttl, args.timeout, args.url, command) == (
        5,
        1.5,
        ["http://h:1"],
        ["x", "--ttl", "3"],
    )
    assert _lock("jobs/a", "ls", "-l")[1] == ["ls", "-l"]
    assert _lock("jobs/a")[1] == []
    with pytest.raises(SystemExit):
        _lock("jobs/a", "--timeout", "-1", "--", "true")


def test_lease_and_elect_arguments() -> None:
    parser = build_parser()
    assert parser.parse_args(["lease", "keepalive", "7", "--once"]).once
    with pytest.raises(SystemExit):
        parser.parse_args(["lease", "grant", "0"])
    elect = parser.parse_args(["elect", "--observe", "jobs/leader"])
    assert elect.observe and elect.value is None
    put = parser.parse_args(["put", "k", "v", "--fencing", "jobs/a=12", "--lease", "3"])
    assert (put.fencing, put.lease, put.ttl) == (("jobs/a", 12), 3, None)
    with pytest.raises(SystemExit):
        parser.parse_args(["put", "k", "v", "--lease", "3", "--ttl", "5"])


def test_fencing_pairs() -> None:
    assert fencing_pair("jobs/a=12") == ("jobs/a", 12)
    for bad in ("jobs/a", "=3", "jobs/a=", "jobs/a=-1", "jobs/a=x", "a=1" + "0" * 20):
        with pytest.raises(argparse.ArgumentTypeError):
            fencing_pair(bad)
