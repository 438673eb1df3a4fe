"""The metrics registry against docs/OBSERVABILITY.md (both ways), the /metrics route and
its request counting (route templates, never paths), the proposer's counters, and the
--metrics setting."""

from __future__ import annotations

import argparse
import asyncio
import re
from pathlib import Path

import pytest
from aiohttp import ClientSession
from aiohttp.test_utils import TestServer
from prometheus_client.parser import text_string_to_metric_families

from http_api.app import build_app
from node import metrics
from node.cli.node_metrics import SCRAPED
from node.cli.settings import add_node_arguments, node_config
from node.errors import ConfigError, NotApplied
from node.state.commands import Put
from node.state.results import CommandResult, ResultCode
from raft.proposer import GroupCommitProposer
from tests.unit.test_openapi import NoService

DOC = Path(__file__).resolve().parents[2] / "docs" / "OBSERVABILITY.md"
_SUFFIX = {"counter": "_total", "info": "_info"}
REPLICATOR_HEADING = "## The Redis replicator's metrics"


def registered() -> dict[str, str]:
    """Exposed name -> help text of every metric a node registers."""
    names: dict[str, str] = {}
    for family in metrics.REGISTRY.collect():
        names[family.name + _SUFFIX.get(family.type, "")] = family.documentation
    for name, (kind, help_text) in SCRAPED.items():
        names[name + _SUFFIX.get(kind, "")] = help_text
    return names


def documented() -> set[str]:
    """The metrics the doc lists for a node (the replicator's section is the replicator's)."""
    node_part = DOC.read_text().split(REPLICATOR_HEADING)[0]
    return set(re.findall(r"^\| `([a-z_]+)` \|", node_part, flags=re.MULTILINE))


def test_the_doc_lists_every_registered_metric() -> None:
    missing = set(registered()) - documented()
    assert missing == set(), "document these in docs/OBSERVABILITY.md"


def test_every_documented_metric_is_registered() -> None:
    unknown = documented() - set(registered())
    assert unknown == set(), "docs/OBSERVABILITY.md lists metrics nobody registers"


def test_rkv_metrics_are_prefixed_and_explained() -> None:
    names = registered()
    assert len([n for n in names if n.startswith("rkv_")]) >= 30
    for name, help_text in names.items():
        assert name.startswith(("rkv_", "process_", "python_")), name
        assert len(help_text) > 10, name


async def get(server: TestServer, path: str) -> tuple[int, str, str]:
    async with ClientSession() as session, session.get(server.make_url(path)) as response:
        return response.status, response.headers.get("Content-Type", ""), await response.text()


def requests_counted(text: str, route: str, code: str) -> float:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if (
                sample.name == "rkv_http_requests_total"
                and labels.get("route") == route
                and labels.get("code") == code
            ):
                return sample.value
    return 0.0


@pytest.mark.asyncio
async def test_requests_are_counted_by_route_template_never_by_path() -> None:
    server = TestServer(build_app(NoService()))
    await server.start_server()
    try:
        _, _, before = await get(server, "/metrics")
        assert (await get(server, "/livez"))[0] == 200
        assert (await get(server, "/no/such/secret-key-name"))[0] == 404
        status, content_type, after = await get(server, "/metrics")
    finally:
        await server.close()
    assert status == 200 and content_type.startswith("text/plain; version=")
    assert requests_counted(after, "/livez", "2xx") == requests_counted(before, "/livez", "2xx") + 1
    assert requests_counted(after, "unmatched", "4xx") >= 1
    assert "secret-key-name" not in after
    assert "rkv_server_proposals_committed_total" in after


@pytest.mark.asyncio
async def test_metrics_off_serves_no_route() -> None:
    server = TestServer(build_app(NoService(), metrics=False))
    await server.start_server()
    try:
        status, _, _ = await get(server, "/metrics")
    finally:
        await server.close()
    assert status == 404


def parse(argv: list[str], env: dict[str, str] | None = None) -> bool:
    parser = argparse.ArgumentParser()
    add_node_arguments(parser)
    base = ["--id", "n0", "--data-dir", "/tmp/x", "--raft-listen", "127.0.0.1:9001"]
    secret = {"RKV_CLUSTER_SECRET": "s" * 32}
    return node_config(parser.parse_args([*base, *argv]), {**secret, **(env or {})}).metrics


def test_metrics_setting_defaults_to_on_and_turns_off_by_flag_or_variable() -> None:
    assert parse([]) is True
    assert parse(["--metrics", "off"]) is False
    assert parse([], {"RKV_METRICS": "off"}) is False
    assert parse(["--metrics", "on"], {"RKV_METRICS": "off"}) is True
    with pytest.raises(ConfigError, match="--metrics must be on or off"):
        parse([], {"RKV_METRICS": "maybe"})


def sample(name: str, **labels: str) -> float:
    return metrics.REGISTRY.get_sample_value(name, labels) or 0.0


@pytest.mark.asyncio
async def test_the_proposer_counts_committed_and_failed_commands_once_per_entry() -> None:
    entries: list[int] = []
    proposer = GroupCommitProposer(
        lambda entry_id, entry: entries.append(entry_id),
        max_commands_per_entry=100,
        max_entries_in_flight=1,
        max_pending_commands=1000,
        proposal_timeout=2.0,
    )
    committed = sample("rkv_server_proposals_committed_total")
    failed = sample("rkv_server_proposals_failed_total", reason="not_applied")
    batches = sample("rkv_server_group_commit_batch_commands_count")
    writes = [asyncio.create_task(proposer.propose(Put(b"k%d" % i, b"v"))) for i in range(5)]
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    proposer.complete(entries[0], tuple(CommandResult(ResultCode.OK, version=1) for _ in writes))
    await asyncio.gather(*writes)
    lost = [asyncio.create_task(proposer.propose(Put(b"x%d" % i, b"v"))) for i in range(3)]
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    proposer.complete(entries[1], NotApplied("the leader changed"))
    assert all(
        isinstance(r, NotApplied) for r in await asyncio.gather(*lost, return_exceptions=True)
    )
    assert sample("rkv_server_proposals_committed_total") == committed + 5
    assert sample("rkv_server_proposals_failed_total", reason="not_applied") == failed + 3
    assert sample("rkv_server_group_commit_batch_commands_count") == batches + 2
