"""Auth from the first start (``--root-password-file``): the root bootstrap.

A node given a root password hashes it once, then, while its applied auth
state is at revision 0 (no auth change ever), proposes one
``AuthChange(BOOTSTRAP_ROOT)`` whenever it leads. The state machine decides it
(node/state/auth_apply.py): the first one applied adds ``root`` with the role
``root`` and enables auth in the same entry; any later one, from another node
or after a restart, is ``auth_already_set_up`` and writes nothing. So every
node of a cluster may run this at once, and an operator's later
``POST /v1/auth/disable`` stays (the revision is no longer 0).

The task ends as soon as this node's state holds any auth change: whoever
proposed it. Until then the node answers requests that need credentials with
503 ``auth_starting`` (node/service/auth.py), so there is no open window.
"""

from __future__ import annotations

import asyncio
import logging

from node.errors import RequestError
from node.service.auth import AuthService
from node.service.kv import ConsensusLog
from node.service.passwords import hash_password
from node.state.auth_commands import AuthChange, AuthOp
from node.state.auth_records import ROOT
from node.state.results import ResultCode

logger = logging.getLogger(__name__)

RETRY_SECONDS = 0.5
"""How often a node that does not lead (or whose proposal failed) looks again."""


async def bootstrap_root(
    auth: AuthService, consensus: ConsensusLog, password: str, retry: float = RETRY_SECONDS
) -> None:
    """Run until this node's auth state is past revision 0; propose the bootstrap while
    leading. Never logs the password or its hash."""
    if auth.meta().revision != 0:
        _report(auth)
        return
    password_hash = await asyncio.to_thread(hash_password, password)
    while auth.meta().revision == 0:
        if consensus.is_leader():
            change = AuthChange(AuthOp.BOOTSTRAP_ROOT, ROOT, password_hash=password_hash)
            try:
                result = await consensus.propose(change)
            except RequestError as exc:  # lost leadership, overloaded...: try again
                logger.info("root bootstrap not applied yet (%s): retrying", exc.code)
            else:
                if result.code is ResultCode.OK:
                    logger.warning(
                        "auth bootstrap: created the user root (role root) from "
                        "--root-password-file and enabled authentication"
                    )
                elif result.code is not ResultCode.AUTH_ALREADY_SET_UP:
                    logger.error("root bootstrap refused: %s", result.message)
                    return
                continue
        await asyncio.sleep(retry)
    _report(auth)


def _report(auth: AuthService) -> None:
    meta = auth.meta()
    if meta.enabled:
        logger.info("authentication is enabled (auth revision %d)", meta.revision)
    else:
        logger.warning(
            "--root-password-file ignored: auth was set up in this cluster before and is "
            "disabled (auth revision %d); it is never enabled again from the file",
            meta.revision,
        )
