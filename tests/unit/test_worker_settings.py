"""--http-workers: a number, or auto (the usable CPUs minus 1, at most 7)."""

from __future__ import annotations

import argparse

import pytest

from node.cli.settings import add_node_arguments, node_config
from node.cli.worker_settings import http_workers
from node.errors import ConfigError


@pytest.mark.parametrize(("cpus", "workers"), [(1, 0), (2, 1), (4, 3), (8, 7), (64, 7)])
def test_auto_leaves_a_core_to_main_and_stops_at_seven(cpus: int, workers: int) -> None:
    assert http_workers("auto", cpus) == workers


def test_a_number_and_the_default() -> None:
    assert http_workers(None) == 0
    assert http_workers("0") == 0
    assert http_workers("3") == 3


@pytest.mark.parametrize("text", ["-1", "two", "1.5", "65"])
def test_anything_else_is_refused_naming_the_flag(text: str) -> None:
    with pytest.raises(ConfigError, match="--http-workers"):
        http_workers(text)


def test_the_flag_and_the_variable_reach_the_config() -> None:
    parser = argparse.ArgumentParser()
    add_node_arguments(parser)
    base = ["--id", "n0", "--data-dir", "/tmp/x", "--raft-listen", "127.0.0.1:9001"]
    secret = {"RKV_CLUSTER_SECRET": "s" * 32}
    assert node_config(parser.parse_args(base), secret).http_workers == 0
    flagged = parser.parse_args([*base, "--http-workers", "2"])
    assert node_config(flagged, secret).http_workers == 2
    from_env = {**secret, "RKV_HTTP_WORKERS": "1"}
    assert node_config(parser.parse_args(base), from_env).http_workers == 1
    assert node_config(flagged, from_env).http_workers == 2  # the flag wins
