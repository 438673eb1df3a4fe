"""`rkv node --join URL`: find a running cluster's members, then add this node.

Before raft starts, :func:`discover` asks URL for /v1/status and returns the
current members (ids, raft addresses, URLs), which become this node's peers.
Once the node serves, :func:`announce` POSTs it to the leader's
/v1/cluster/members (retrying while there is no leader or another change is in
progress); a node that is already a member with the same raft address (a wiped
member rejoining) skips that step. Its state then arrives through raft: the
journal or the leader's raft marker and the catch-up pull.

Blocking control-plane calls (http_api/client/control.py); :func:`announce` runs
them in an executor.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, NamedTuple

from http_api.client.control import HeadersHook, get_json, post_json
from http_api.client.credentials import Credentials
from node.errors import ConfigError

logger = logging.getLogger(__name__)

DISCOVER_SECONDS = 60.0
ANNOUNCE_SECONDS = 300.0
_REQUEST_TIMEOUT = 10.0


class Member(NamedTuple):
    """A member as /v1/status lists it (raft.config.Member's fields; node's core
    does not import raft/)."""

    node_id: str
    raft_address: str
    http_url: str


@dataclass(frozen=True, slots=True)
class Discovery:
    members: tuple[Member, ...]
    leader_url: str | None


def discover(
    url: str,
    timeout: float = DISCOVER_SECONDS,
    credentials: Credentials | None = None,
    headers: HeadersHook | None = None,
) -> Discovery:
    """The members and leader a running node at ``url`` reports. Raises ConfigError."""
    deadline = time.monotonic() + timeout
    base = url.rstrip("/")
    last = "no answer"
    while True:
        try:
            status = get_json(
                f"{base}/v1/status", _REQUEST_TIMEOUT, credentials=credentials, headers=headers
            )
            members = tuple(
                Member(str(m["id"]), str(m["raft_address"]), str(m["url"]).rstrip("/"))
                for m in status.get("members") or []
                if m.get("url")
            )
            leader = status.get("leader") or {}
            if members:
                return Discovery(members, leader.get("url"))
            last = "the node lists no members"
        except (OSError, ValueError, KeyError, TypeError) as exc:
            last = str(exc)
        if time.monotonic() >= deadline:
            raise ConfigError(f"--join {url}: cannot read the cluster's members: {last}")
        time.sleep(1.0)


def _post_member(
    url: str, me: Member, credentials: Credentials | None, headers: HeadersHook | None
) -> tuple[int, dict[str, Any], str | None]:
    body = {"id": me.node_id, "raft_address": me.raft_address, "url": me.http_url}
    target = f"{url.rstrip('/')}/v1/cluster/members"
    return post_json(target, body, 60.0, credentials=credentials, headers=headers)


def add_self(
    join_url: str,
    me: Member,
    leader_url: str | None,
    timeout: float = ANNOUNCE_SECONDS,
    *,
    stopped: threading.Event | None = None,
    credentials: Credentials | None = None,
    headers: HeadersHook | None = None,  # the member token (auth, issue 16)
) -> dict[str, Any]:
    """POST ``me`` to the leader until it is a member. Raises RuntimeError."""
    deadline = time.monotonic() + timeout
    target = leader_url or join_url
    last = ""
    stopped = stopped or threading.Event()
    while time.monotonic() < deadline and not stopped.is_set():
        try:
            status, answer, location = _post_member(target, me, credentials, headers)
        except OSError as exc:
            status, answer, location = 0, {"message": str(exc)}, None
        if status == 200:
            return answer
        if status == 307 and location:
            target = location.removesuffix("/v1/cluster/members")
            continue
        if status in (400, 404) or answer.get("code") in ("member_exists", "address_in_use"):
            raise RuntimeError(f"the cluster refused to add this node: HTTP {status} {answer}")
        last = f"HTTP {status} {answer}"
        # 409 change in progress, 503 no leader / not applied, unreachable: retry,
        # asking the cluster again who leads.
        time.sleep(1.0)
        try:
            target = discover(join_url, 5.0, credentials, headers).leader_url or join_url
        except ConfigError:
            target = join_url
    raise RuntimeError(f"could not add this node within {timeout:g}s: {last}")


async def announce(
    join_url: str,
    me: Member,
    discovery: Discovery,
    credentials: Credentials | None = None,
    headers: HeadersHook | None = None,
) -> None:
    """Add this node to the cluster unless it already is a member (logged, never raised)."""
    if any(
        m.node_id == me.node_id and m.raft_address == me.raft_address for m in discovery.members
    ):
        logger.info("join: %s is already a member; rebuilding through raft", me.node_id)
        return
    loop = asyncio.get_running_loop()
    done: asyncio.Future[dict[str, Any]] = loop.create_future()
    stopped = threading.Event()

    def settle(answer: dict[str, Any] | None, error: Exception | None) -> None:
        if done.done():
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(answer or {})

    def work() -> None:
        try:
            answer = add_self(
                join_url,
                me,
                discovery.leader_url,
                stopped=stopped,
                credentials=credentials,
                headers=headers,
            )
        except Exception as exc:  # handed to the loop
            loop.call_soon_threadsafe(settle, None, exc)
        else:
            loop.call_soon_threadsafe(settle, answer, None)

    # A daemon thread, not the loop's executor: shutting down must not wait for it.
    threading.Thread(target=work, name="rkv-join", daemon=True).start()
    try:
        answer = await done
    except RuntimeError as exc:
        logger.error("join: %s", exc)
        return
    finally:
        stopped.set()
    logger.info("join: added to the cluster: %s", answer)
