"""`rkv status`: the whole cluster in one table (or JSON), run as a user runs it against
a real 3-node cluster, with every member up and with one killed."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import LocalCluster, http, wait_until

RKV = Path(sys.executable).with_name("rkv")
HEADER = [
    "ID", "URL", "ROLE", "REACHABLE", "LEADER", "TERM", "APPLIED", "LAG", "ENTRIES",
    "LOG-BYTES", "LAST-COMPACTION", "VERSION",
]  # fmt: skip
KEYS = 5

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def kv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    running = LocalCluster(Path(tmp_path_factory.mktemp("status")) / "cluster")
    try:
        running.start()
        leader = running.leader()
        for i in range(KEYS):
            assert http("PUT", f"{leader.url}/v1/kv/st/{i}", b"v").status == 200
        compacted = http("POST", running.nodes[0].url + "/v1/admin/compact")
        assert compacted.status == 200, compacted.body
        yield running
    finally:
        running.stop()


def rkv(*args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(RKV), "status", *args], capture_output=True, check=False, timeout=60, text=True
    )
    assert "Traceback" not in result.stderr, result.stderr
    return result


def table(*urls: str) -> tuple[int, dict[str, dict[str, str]], str]:
    result = rkv(*(arg for url in urls for arg in ("--url", url)))
    header, *lines = result.stdout.splitlines()
    assert header.split() == HEADER
    rows = {}
    for line in lines:
        cells = line.split()
        assert len(cells) == len(HEADER), line
        rows[cells[0]] = dict(zip(HEADER, cells, strict=True))
    return result.returncode, rows, result.stderr


def settled(kv: LocalCluster) -> dict[str, dict[str, str]] | None:
    """The table once every member has applied everything and holds the same entries."""
    code, rows, errors = table(kv.nodes[0].url)
    assert code == 0, errors
    entries = {r["ENTRIES"] for r in rows.values()}
    converged = all(r["LAG"] == "0" for r in rows.values()) and len(entries) == 1
    return rows if converged and int(entries.pop()) >= KEYS else None


def test_one_row_per_member(kv: LocalCluster) -> None:
    rows = wait_until(lambda: settled(kv), 30, "every member to apply everything")
    leader = kv.leader()
    assert set(rows) == {n.node_id for n in kv.nodes}
    terms = {row["TERM"] for row in rows.values()}
    assert len(terms) == 1 and int(terms.pop()) >= 1
    applied = {row["APPLIED"] for row in rows.values()}
    assert len(applied) == 1 and int(applied.pop()) >= KEYS
    for node in kv.nodes:
        row = rows[node.node_id]
        assert row["URL"] == node.url and row["REACHABLE"] == "yes"
        assert row["ROLE"] == ("leader" if node is leader else "follower")
        assert row["LEADER"] == leader.node_id
        assert int(row["LOG-BYTES"]) > 0
        assert row["VERSION"] == version("rkv")
    compacted = rows[kv.nodes[0].node_id]["LAST-COMPACTION"]
    assert datetime.fromisoformat(compacted).utcoffset() is not None
    assert {rows[n.node_id]["LAST-COMPACTION"] for n in kv.nodes[1:]} == {"-"}


def test_json_output_and_the_raw_status(kv: LocalCluster) -> None:
    result = rkv("--url", kv.nodes[1].url, "-o", "json")
    assert result.returncode == 0, result.stderr
    members: list[dict[str, Any]] = json.loads(result.stdout)["members"]
    assert [m["id"] for m in members] == sorted(n.node_id for n in kv.nodes)
    for member in members:
        assert member["reachable"] is True and member["error"] is None
        assert member["role"] in ("leader", "follower")
        assert member["entries"] >= KEYS and member["log_bytes"] > 0
        assert isinstance(member["lag"], int) and member["lag"] >= 0
    raw = json.loads(rkv("--json", "--url", kv.nodes[1].url).stdout)
    assert raw["id"] == kv.nodes[1].node_id and len(raw["members"]) == 3
    assert raw["storage"]["entries"] >= KEYS and raw["version"] == version("rkv")


def test_a_killed_member_is_a_row_saying_so(kv: LocalCluster) -> None:
    leader = kv.leader()
    index = next(i for i, n in enumerate(kv.nodes) if n is not leader)
    down = kv.nodes[index]
    try:
        kv.kill(index)
        assert down.proc is not None
        down.proc.wait(10)
        # The first --url is the dead one: the members come from the next that answers.
        code, rows, errors = table(down.url, leader.url)
        assert code == 3
        assert list(rows[down.node_id].values())[2:] == ["?", "no", *["-"] * 8]
        assert rows[leader.node_id]["ROLE"] == "leader"
        assert rows[leader.node_id]["REACHABLE"] == "yes"
        assert f"rkv status: {down.node_id} at {down.url}: unreachable" in errors
        result = rkv("--url", leader.url, "-o", "json")
        assert result.returncode == 3
        members = {m["id"]: m for m in json.loads(result.stdout)["members"]}
        assert members[down.node_id]["reachable"] is False
        assert members[down.node_id]["error"] and members[down.node_id]["term"] is None
        assert members[leader.node_id]["reachable"] is True
    finally:
        kv.start_node(index)
        kv.wait_ready(nodes=kv.nodes)
