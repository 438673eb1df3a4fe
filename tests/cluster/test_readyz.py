"""/readyz as named checks, against real node processes: verbose lines, exclude, 400s,
a node cut off from its majority, and a data directory short of free space."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cluster import LocalCluster, NodeProcess, http, wait_until

pytestmark = pytest.mark.timeout(180)

CHECKS = ("storage", "not_stalled", "leader", "applied")


@pytest.fixture
def kv(tmp_path: Path) -> Iterator[LocalCluster]:
    running = LocalCluster(tmp_path / "cluster")
    try:
        running.start()
        yield running
    finally:
        running.stop()


def verbose(node: NodeProcess, query: str = "") -> tuple[int, list[str]]:
    answer = http("GET", node.url + "/readyz?verbose" + query, timeout=5)
    assert answer.headers["Content-Type"].startswith("text/plain")
    return answer.status, answer.body.decode().splitlines()


def test_a_healthy_cluster_passes_every_check(kv: LocalCluster) -> None:
    for node in kv.nodes:
        status, lines = verbose(node)
        assert status == 200, lines
        assert lines == [*(f"[+]{name} ok" for name in CHECKS), "readyz check passed"]
        answer = http("GET", node.url + "/readyz")
        assert answer.status == 200
        body = answer.json()
        assert body == {
            "ready": True,
            "reason": "ready",
            "checks": dict.fromkeys(CHECKS, "ok"),
            "excluded": [],
        }
    status, lines = verbose(kv.nodes[0], "&exclude=applied&exclude=storage")
    assert status == 200
    assert lines == [
        "[+]not_stalled ok",
        "[+]leader ok",
        "[+]applied excluded: ok",
        "[+]storage excluded: ok",
        "readyz check passed",
    ]


def test_an_unknown_check_is_a_400(kv: LocalCluster) -> None:
    node = kv.nodes[0]
    for query in ("?exclude=leaderr", "?verbose&exclude=leader&exclude=disk", "?exclude="):
        answer = http("GET", node.url + "/readyz" + query)
        assert answer.status == 400, (query, answer.body)
        error = answer.json()
        assert error["code"] == "unknown_check"
        assert "leader, applied" in error["message"]


def test_a_node_cut_off_from_its_majority_fails_the_leader_check(kv: LocalCluster) -> None:
    survivor = kv.nodes[0]
    kv.kill(1)
    kv.kill(2)

    def leader_check_failed() -> list[str] | None:
        status, lines = verbose(survivor)
        return lines if status == 503 and "[-]leader failed: no leader known" in lines else None

    lines = wait_until(leader_check_failed, 60, "the survivor to lose its leader")
    assert lines[-1] == "readyz check failed"
    assert {"[+]storage ok", "[+]not_stalled ok"} <= set(lines)
    answer = http("GET", survivor.url + "/readyz")
    assert answer.status == 503
    assert answer.json()["ready"] is False
    assert answer.json()["checks"]["leader"] == "failed: no leader known"

    status, lines = verbose(survivor, "&exclude=leader")
    assert status == 200, lines
    assert lines[-2:] == ["[+]leader excluded: ok", "readyz check passed"]
    assert "[+]applied ok" in lines


def test_a_data_directory_short_of_space_fails_the_storage_check(kv: LocalCluster) -> None:
    node = kv.nodes[2]
    kv.kill(2)
    assert node.proc is not None
    node.proc.wait(10)
    node.args.extend(["--ready-min-free-bytes", str(2**62)])  # more than any disk holds
    kv.start_node(2)

    def storage_failed() -> list[str] | None:
        try:
            status, lines = verbose(node)
        except OSError:
            return None
        return lines if status == 503 else None

    lines = wait_until(storage_failed, 30, "the restarted node to answer /readyz")
    assert lines[0].startswith("[-]storage failed: the filesystem of ")
    assert "--ready-min-free-bytes" in lines[0]
    reason = http("GET", node.url + "/readyz").json()["reason"]
    assert reason.startswith("the filesystem of ")
    assert http("GET", node.url + "/v1/status").json()["ready"] is False
    wait_until(lambda: verbose(node, "&exclude=storage")[0] == 200, 60, "the other checks to pass")
