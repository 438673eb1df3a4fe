"""--log-format json and request ids, against real node processes: every line a node
writes is one JSON object with the documented fields, and a line logged while serving
a request carries that request's id (also returned as Rkv-Request-Id)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.support.cluster import LocalCluster, http

pytestmark = pytest.mark.timeout(120)

FIELDS = {"time", "level", "node", "logger", "message"}


def test_json_lines_with_request_ids(tmp_path: Path) -> None:
    kv = LocalCluster(tmp_path / "cluster", extra_args=["--log-format", "json"])
    try:
        kv.start()
        leader = kv.leader()
        other = next(n for n in kv.nodes if n is not leader)
        # A request whose handler logs: a member's url change (logged by the leader).
        moved = other.url.replace("127.0.0.1", "localhost")
        for url, request_id in ((moved, "test-move-1"), (other.url, "test-back-2")):
            answer = http(
                "PUT",
                f"{leader.url}/v1/cluster/members/{other.node_id}",
                json.dumps({"url": url}).encode(),
                {"Content-Type": "application/json", "X-Request-Id": request_id},
            )
            assert answer.status == 200, answer.body
            assert answer.headers["Rkv-Request-Id"] == request_id
        made = http("GET", leader.url + "/v1/status").headers["Rkv-Request-Id"]
        assert 1 <= len(made) <= 64
        assert http("GET", leader.url + "/v1/status").headers["Rkv-Request-Id"] != made
        for insane in ("has space", "x" * 65, 'quo"te'):
            answer = http("GET", leader.url + "/livez", headers={"Rkv-Request-Id": insane})
            assert answer.headers["Rkv-Request-Id"] not in (insane, "")
        given = http("GET", leader.url + "/nope", headers={"Rkv-Request-Id": "err-3"})
        assert given.status == 404 and given.headers["Rkv-Request-Id"] == "err-3"
    finally:
        kv.stop()

    lines_by_node = {n.node_id: n.log_path.read_text().splitlines() for n in kv.nodes}
    for node_id, lines in lines_by_node.items():
        assert lines, node_id
        for text in lines:
            line = json.loads(text)  # every line is one JSON object
            assert isinstance(line, dict), text
            assert set(line) >= FIELDS, text
            assert line["node"] == node_id
            moment = datetime.fromisoformat(line["time"])
            assert moment.utcoffset() == UTC.utcoffset(None), text
            assert line["level"] in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
    logged = [json.loads(text) for text in lines_by_node[leader.node_id]]
    changes = {
        line.get("request_id"): line["message"] for line in logged if "url" in line["message"]
    }
    assert moved in changes["test-move-1"] and other.url in changes["test-back-2"]
    assert changes["test-move-1"].startswith(f"member {other.node_id}: url")
    # Lines not written while serving a request (start-up, raft) carry no id.
    assert any("request_id" not in line for line in logged)
