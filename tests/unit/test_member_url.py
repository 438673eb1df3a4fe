"""A member's url changes only on a node serving on loopback until authentication exists."""

from __future__ import annotations

from typing import Any, cast

import pytest

from node.cli.secure_start import is_loopback
from node.errors import Forbidden
from node.service.kv import ConsensusLog, KvService


class Consensus:
    def __init__(self) -> None:
        self.changed: list[tuple[str, str]] = []

    async def set_member_url(self, node_id: str, url: str) -> dict[str, Any]:
        self.changed.append((node_id, url))
        return {"member": {"id": node_id, "url": url}}


def service(consensus: Consensus, member_url_changes: bool) -> KvService:
    return KvService(
        cast(ConsensusLog, consensus),
        cast(Any, None),
        1024,
        compactor=cast(Any, None),
        log=cast(Any, None),
        member_url_changes=lambda: member_url_changes,
    )


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.0.1", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.5", False),
        ("node1.example", False),
    ],
)
def test_loopback_hosts(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


@pytest.mark.asyncio
async def test_a_node_beyond_loopback_refuses_to_change_a_url() -> None:
    consensus = Consensus()
    with pytest.raises(Forbidden) as refused:
        await service(consensus, member_url_changes=False).set_member_url("n1", "http://a:1")
    assert refused.value.code == "auth_required"
    assert consensus.changed == []
    answer = await service(consensus, member_url_changes=True).set_member_url("n1", "http://a:1/")
    assert answer["member"]["url"] == "http://a:1"
    assert consensus.changed == [("n1", "http://a:1")]
