"""The member directory and the add/remove member flows (run on the leader).

The directory maps raft addresses to members: the static members from the
flags, then the replicated member records (``SetMember`` / ``RemoveMember``
under the reserved members prefix). Adding a member records it, then asks
raft to add it; removing asks raft first, then drops the record.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from pysyncobj.config import FAIL_REASON

from node.errors import Conflict, KeyNotFound, NotApplied, NotLeader, RequestError, UnknownOutcome
from node.keyspace import MEMBERS_PREFIX
from node.state.commands import Command, RemoveMember, SetMember
from node.state.results import CommandResult
from node.storage.recovery import NodeStorage
from raft.config import Member, RaftConfig
from raft.outcomes import outcome
from raft.probe import raft_answers
from raft.syncobj_node import RkvSyncObj

logger = logging.getLogger(__name__)


class Membership:
    def __init__(
        self,
        config: RaftConfig,
        storage: NodeStorage,
        syncobj: Callable[[], RkvSyncObj | None],
        leader_http_url: Callable[[], str | None],
        propose: Callable[[Command], Awaitable[CommandResult]],
    ) -> None:
        self._config = config
        self._storage = storage
        self._syncobj = syncobj
        self._leader_http_url = leader_http_url
        self._propose = propose
        # The static members (flags); the replicated directory adds to them.
        self._members = {m.raft_address: m for m in config.members}

    def directory(self) -> dict[str, Member]:
        """raft address -> member: the static members, then the replicated records
        (a record replaces a static member with the same id or address)."""
        directory = dict(self._members)
        with self._storage.store.reader() as view:
            items = view.scan(MEMBERS_PREFIX, None, 10_000, include_internal=True)
        for _, stored in items:
            try:
                raw = json.loads(stored.value)
                member = Member(str(raw["id"]), str(raw["raft_address"]), str(raw["url"]))
            except (ValueError, KeyError, TypeError):
                logger.warning("ignoring a malformed member record: %r", stored.value[:200])
                continue
            for address, known in list(directory.items()):
                if known.node_id == member.node_id:
                    del directory[address]
            directory[member.raft_address] = member
        return directory

    def members(self) -> list[Member]:
        """The voting members raft knows now (this node first), with ids and URLs."""
        syncobj = self._syncobj()
        directory = self.directory()
        if syncobj is None:
            addresses = [m.raft_address for m in self._config.members]
        else:
            addresses = syncobj.cluster_addresses()
        return [directory.get(a) or Member(a, a, "") for a in addresses]

    def member_url(self, node_id: str) -> str | None:
        for member in self.directory().values():
            if member.node_id == node_id:
                return member.http_url
        return None

    def member_list(self) -> list[dict[str, str]]:
        return [member_json(m) for m in self.members()]

    def _require_leader(self) -> RkvSyncObj:
        syncobj = self._syncobj()
        if syncobj is None:
            raise NotApplied("raft is not running")
        if not syncobj._isLeader():
            raise NotLeader("membership changes run on the leader", self._leader_http_url())
        if syncobj.membership_change_pending():
            raise Conflict(
                "another membership change is in progress; retry once it is committed",
                code="membership_change_in_progress",
            )
        return syncobj

    async def _membership_call(self, fn: Callable[..., None], address: str) -> int:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[int] = loop.create_future()

        def settle(error: int) -> None:
            if not done.done():
                done.set_result(error)

        def callback(result: Any, error: int) -> None:
            loop.call_soon_threadsafe(settle, int(error))

        fn(address, callback=callback)
        timeout = 3 * self._config.proposal_timeout
        try:
            return await asyncio.wait_for(done, timeout)
        except TimeoutError:
            raise UnknownOutcome(
                f"the membership change was not committed within {timeout:g}s"
            ) from None

    @staticmethod
    def _membership_failure(error: int) -> RequestError:
        if error == FAIL_REASON.REQUEST_DENIED:
            return Conflict(
                "raft refused the change: another membership change is in progress",
                code="membership_change_in_progress",
            )
        failure = outcome(None, error)
        assert isinstance(failure, RequestError)
        return failure

    async def _propose_member_record(self, command: SetMember | RemoveMember) -> None:
        result = await self._propose(command)
        if not result.ok:
            raise UnknownOutcome(f"the member record was not written: {result.code.value}")

    async def add_member(self, node_id: str, raft_address: str, url: str) -> dict[str, Any]:
        """Add a voting member (on the leader): record it, then raft's add."""
        member = Member(node_id, raft_address, url)
        syncobj = self._require_leader()
        for known in self.members():
            if known.node_id == member.node_id and known.raft_address == member.raft_address:
                if known.http_url != member.http_url:
                    raise Conflict(
                        f"member {member.node_id} exists with url {known.http_url}; changing "
                        f"it is its own operation: PUT /v1/cluster/members/{member.node_id}",
                        code="member_exists",
                    )
                return {"added": False, "member": member_json(member)}
            if known.node_id == member.node_id:
                raise Conflict(
                    f"member {member.node_id} exists with raft address {known.raft_address}; "
                    "remove it first",
                    code="member_exists",
                )
            if known.raft_address == member.raft_address:
                raise Conflict(
                    f"raft address {member.raft_address} belongs to member {known.node_id}",
                    code="address_in_use",
                )
        problem = await raft_answers(member.raft_address, syncobj.encryptor)
        if problem is not None:
            raise Conflict(
                f"{problem}; start the new member (with the cluster secret) before adding it",
                code="member_unreachable",
            )
        await self._propose_member_record(
            SetMember(member.node_id, member.raft_address, member.http_url)
        )
        error = await self._membership_call(syncobj.addNodeToCluster, member.raft_address)
        if error != FAIL_REASON.SUCCESS:
            failure = self._membership_failure(error)
            if error == FAIL_REASON.REQUEST_DENIED and member.raft_address not in (
                syncobj.cluster_addresses()
            ):
                with contextlib.suppress(RequestError):
                    await self._propose_member_record(RemoveMember(member.node_id))
            raise failure
        logger.info("member %s (%s) added", member.node_id, member.raft_address)
        return {"added": True, "member": member_json(member)}

    async def set_member_url(self, node_id: str, url: str) -> dict[str, Any]:
        """Change the HTTP URL a member is known by (on the leader): where clients are
        redirected and where members download catch-up state from."""
        self._require_leader()
        target = next((m for m in self.members() if m.node_id == node_id), None)
        if target is None:
            raise KeyNotFound(f"no member has the id {node_id!r}", code="member_not_found")
        if target.http_url != url:
            await self._propose_member_record(SetMember(node_id, target.raft_address, url))
            logger.info("member %s: url %s -> %s", node_id, target.http_url, url)
        return {"member": member_json(Member(node_id, target.raft_address, url))}

    async def remove_member(self, node_id: str) -> dict[str, Any]:
        """Remove a voting member (on the leader): raft's remove, then the record."""
        syncobj = self._require_leader()
        members = self.members()
        target = next((m for m in members if m.node_id == node_id), None)
        if target is None:
            raise KeyNotFound(f"no member has the id {node_id!r}", code="member_not_found")
        if len(members) == 1:
            raise Conflict(
                f"{node_id} is the last member of the cluster; it cannot be removed",
                code="last_member",
            )
        if target.raft_address == self._config.self_member.raft_address:
            syncobj.transferLeadership(None, callback=None)
            raise Conflict(
                f"{node_id} is the leader: leadership is being transferred to another "
                "member; retry the request (it will be redirected to the new leader)",
                code="member_is_leader",
            )
        error = await self._membership_call(syncobj.removeNodeFromCluster, target.raft_address)
        if error != FAIL_REASON.SUCCESS:
            raise self._membership_failure(error)
        await self._propose_member_record(RemoveMember(node_id))
        logger.info("member %s (%s) removed", node_id, target.raft_address)
        return {"removed": True, "member": member_json(target)}


def member_json(member: Member) -> dict[str, str]:
    return {"id": member.node_id, "raft_address": member.raft_address, "url": member.http_url}
