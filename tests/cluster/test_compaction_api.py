"""Forced compaction on every node of a running cluster keeps every key and shrinks the log."""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path

from tests.support.cluster import LocalCluster, http, scan_all, wait_until

RKV = Path(sys.executable).with_name("rkv")


def has_all(url: str, query: str, count: int) -> bool:
    return len(scan_all(url, b"cmp/", query=query)) == count


def test_forced_compaction_on_every_node_keeps_state_and_survives_restart(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path / "cluster", extra_args=["--segment-bytes", "4096"])
    try:
        cluster.start()
        leader = cluster.leader()
        expected: dict[str, bytes] = {}
        last_version = 0
        for round_ in range(15):
            for k in range(30):
                key, value = f"cmp/{k:02d}", b"round-%d-%s" % (round_, b"x" * 60)
                response = http("PUT", f"{leader.url}/v1/kv/{key}", body=value)
                assert response.status == 200, response.body
                expected[key] = value
                last_version = response.json()["version"]
        deleted = http("DELETE", f"{leader.url}/v1/kv/cmp/00")
        assert deleted.status == 200
        expected.pop("cmp/00")
        for node in cluster.nodes:
            # every node applies the same log: wait until this one has it all
            query = f"consistency=stale&min_version={last_version}"
            wait_until(functools.partial(has_all, node.url, query, len(expected)), 15, node.node_id)
            response = http("POST", f"{node.url}/v1/admin/compact")
            assert response.status == 200, response.body
            result = response.json()
            assert result["records_dropped"] > 0, result
            assert result["bytes_after"] < result["bytes_before"], result
            status = node.status() or {}
            assert status["compaction"]["runs"] == 1, status["compaction"]
            assert status["compaction"]["last"]["records_kept"] == result["records_kept"]
        for node in cluster.nodes:
            items = scan_all(node.url, b"cmp/", query="consistency=stale")
            got = {item["key"].decode(): item["value"] for item in items}
            assert got == expected, node.node_id
        # a node restarted on its compacted log comes back with the same state
        cluster.restart(2)
        cluster.wait_ready()
        items = scan_all(
            cluster.nodes[2].url, b"cmp/", query=f"consistency=stale&min_version={last_version}"
        )
        assert {item["key"].decode(): item["value"] for item in items} == expected
        # and writes continue
        assert http("PUT", f"{cluster.leader().url}/v1/kv/cmp/after", body=b"ok").status == 200
        # `rkv compact` does the same from a shell, for each node named
        urls = [cluster.nodes[0].url, cluster.nodes[1].url]
        done = subprocess.run(
            [str(RKV), "compact", "--url", ",".join(urls)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert all(f"{url}: " in done.stdout for url in urls), done.stdout
        assert "records" in done.stdout and "Traceback" not in done.stderr
        unreachable = subprocess.run(
            [str(RKV), "compact", "--url", "http://127.0.0.1:9"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert unreachable.returncode == 3 and "unreachable" in unreachable.stderr
    except (AssertionError, TimeoutError) as error:
        raise AssertionError(f"{error}\n{cluster.logs()}") from error
    finally:
        cluster.stop()
