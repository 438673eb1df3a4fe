"""node/service/space.py: what a node measures, when it raises its NOSPACE alarm, and
which way (its own raft over quota; another member when its disk is full)."""

from __future__ import annotations

import asyncio
import errno
from pathlib import Path

from node.errors import StoreFullError, out_of_space
from node.service.space import SpaceMonitor, data_usage
from node.state.alarm_commands import AlarmKind, RaiseAlarm
from node.state.alarms import Alarm
from node.state.commands import Command
from node.state.results import CommandResult, ResultCode


class FakeRaft:
    def __init__(self) -> None:
        self.proposed: list[Command] = []

    async def propose(self, command: Command) -> CommandResult:
        self.proposed.append(command)
        return CommandResult(ResultCode.OK)


def monitor(
    tmp_path: Path, quota: int, alarms: list[Alarm], relayed: list[str]
) -> tuple[SpaceMonitor, FakeRaft]:
    raft = FakeRaft()

    async def relay(member: str, kind: AlarmKind, reason: str) -> str | None:
        relayed.append(reason)
        return None

    watched = SpaceMonitor("n1", tmp_path, quota, lambda: tuple(alarms), raft, relay=relay)
    return watched, raft


def test_usage_counts_the_data_folders_only(tmp_path: Path) -> None:
    (tmp_path / "log").mkdir()
    (tmp_path / "log" / "1.log").write_bytes(b"x" * 10_000)
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "data.mdb").write_bytes(b"y" * 5_000)
    (tmp_path / "audit").mkdir()
    (tmp_path / "audit" / "export").write_bytes(b"z" * 100_000)  # not the node's data
    assert 15_000 <= data_usage(tmp_path) < 100_000


def test_over_quota_the_node_proposes_its_alarm_once_it_is_not_raised(tmp_path: Path) -> None:
    (tmp_path / "log").mkdir()
    (tmp_path / "log" / "1.log").write_bytes(b"x" * 10_000)
    alarms: list[Alarm] = []
    relayed: list[str] = []
    watched, raft = monitor(tmp_path, 1_000, alarms, relayed)
    asyncio.run(watched.check())
    (raised,) = raft.proposed
    assert isinstance(raised, RaiseAlarm) and raised.member == "n1"
    assert raised.reason.startswith("over quota") and "--quota-bytes 1000" in raised.reason
    assert watched.problem == raised.reason and relayed == []
    alarms.append(Alarm("n1", AlarmKind.NOSPACE, raised.reason, 1))
    asyncio.run(watched.check())
    assert len(raft.proposed) == 1  # seen raised: not proposed again
    watched.quota_bytes = 0
    asyncio.run(watched.check())
    assert watched.problem is None


def test_with_a_full_disk_another_member_is_asked_now_and_then(tmp_path: Path) -> None:
    relayed: list[str] = []
    watched, raft = monitor(tmp_path, 0, [], relayed)
    asyncio.run(watched.check())
    assert watched.problem is None and relayed == [] and raft.proposed == []
    watched.disk_full("LMDB write failed: No space left on device")
    assert watched.problem is not None and watched.problem.startswith("disk full")
    asyncio.run(watched.check())  # the disk has room again by now (tmp_path's)...
    assert relayed == [] and watched.problem is None
    watched._free_floor = 2**62  # ...unless it is under the floor
    asyncio.run(watched.check())
    asyncio.run(watched.check())
    assert len(relayed) == 1 and relayed[0].startswith("disk full")
    assert raft.proposed == []  # never through a raft that may not write its journal


def test_out_of_space_reads_the_chain_of_causes() -> None:
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device", "/data/log/1.log")
        except OSError as exc:
            raise RuntimeError("append failed") from exc
    except RuntimeError as wrapped:
        assert out_of_space(wrapped) == "No space left on device: /data/log/1.log"
    assert out_of_space(StoreFullError("map full")) == "map full"
    assert out_of_space(OSError(errno.EIO, "I/O error")) is None
