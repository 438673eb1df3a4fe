"""The node's space monitor as the composition root builds it: its quota (by default a
part of the data directory's filesystem, measured at start-up), the state machine's
full-disk reports, and the relay that asks another member to raise the alarm when
this node's own raft cannot (node/service/space.py)."""

from __future__ import annotations

import asyncio
import logging

from http_api.client.control import request_json
from node.cli.settings import NodeConfig
from node.service.auth_tokens import member_headers
from node.service.space import Relay, SpaceMonitor, default_quota
from node.state.alarm_commands import AlarmKind
from node.state.machine import StateMachine
from raft.consensus import RaftConsensus

logger = logging.getLogger(__name__)

_RELAY_TIMEOUT = 10.0


def space_monitor(
    config: NodeConfig, machine: StateMachine, consensus: RaftConsensus
) -> SpaceMonitor:
    quota = config.space.quota_bytes
    if quota is None:
        quota = default_quota(config.data_dir)
    logger.info("space quota: %d bytes (--quota-bytes)", quota)
    monitor = SpaceMonitor(
        config.node_id,
        config.data_dir,
        quota,
        machine.alarms,
        consensus,
        free_floor=config.space.free_floor,
        relay=alarm_relay(config, consensus),
        propose_timeout=config.raft.proposal_timeout + 1.0,
        raft_healthy=lambda: not any(consensus.readiness().values()),
    )
    machine.space_hook = monitor.disk_full
    return monitor


def alarm_relay(config: NodeConfig, consensus: RaftConsensus) -> Relay:
    """POST /v1/alarms to the other members in turn, as this member (its token)."""
    headers = member_headers(config.secret, config.node_id)

    async def relay(member: str, kind: AlarmKind, reason: str) -> str | None:
        urls = [m["url"] for m in consensus.member_list() if m["id"] != config.node_id]
        why = "no other member is known"
        body = {"member": member, "kind": kind.value, "reason": reason}
        for url in urls:
            status, answer = await asyncio.to_thread(
                request_json,
                [url],
                "POST",
                "/v1/alarms",
                body,
                _RELAY_TIMEOUT,
                credentials=config.tls.peer_credentials,
                headers=headers,
            )
            if status == 200:
                return None
            why = f"{url} answered {status or 'nothing'}: {answer!r:.200}"
        return why

    return relay
