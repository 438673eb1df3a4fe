from __future__ import annotations

from tests.support.cluster import LocalCluster, http


def test_write_through_any_node_and_read_from_every_node(cluster: LocalCluster) -> None:
    for i, node in enumerate(cluster.nodes):
        response = http("PUT", f"{node.url}/v1/kv/smoke/{i}", body=b"value-%d" % i)
        assert response.status == 200, response.body
    for node in cluster.nodes:
        for i in range(len(cluster.nodes)):
            for consistency in ("linearizable", "stale"):
                url = f"{node.url}/v1/kv/smoke/{i}?consistency={consistency}"
                if consistency == "stale":
                    url += "&min_version=3"  # stale reads may lag: wait for the last write
                got = http("GET", url)
                assert got.status == 200, (node.node_id, i, consistency, got.body)
                assert got.body == b"value-%d" % i
