"""Users, roles and permissions applied by the real state machine on real storage: the
rules every replica decides alike, the revision, the limits, the entry format, and the
records surviving a reopen and a compaction."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import msgpack
import pytest

from node.errors import EntryDecodeError, UnsupportedEntryVersion
from node.state.auth_commands import AuthChange, AuthOp
from node.state.auth_records import (
    AUTH_META_KEY,
    AUTH_PREFIX,
    Permission,
    PermissionKind,
    decode_meta,
    decode_role,
    decode_user,
    role_key,
    user_key,
)
from node.state.commands import FORMAT_VERSION, Batch, Put, decode_entry, encode_entry
from node.state.results import ResultCode
from node.storage.compaction import CompactionPolicy, compact
from node.storage.config import StorageConfig
from tests.unit.test_producers import Node

NO_TOMBSTONES = CompactionPolicy(tombstone_retention_ms=0, tombstone_retention_offsets=0)
READ_APP = Permission(PermissionKind.READ, b"app/", True)


@pytest.fixture
def node(tmp_path: Path, small_config: StorageConfig) -> Iterator[Node]:
    opened = Node(tmp_path / "node", small_config)
    yield opened
    opened.close()


def add_user(name: str, *roles: str, limit: int = 0) -> AuthChange:
    return AuthChange(AuthOp.ADD_USER, name, password_hash="h-" + name, roles=roles, limit=limit)


def add_role(name: str, limit: int = 0) -> AuthChange:
    return AuthChange(AuthOp.ADD_ROLE, name, limit=limit)


def grant(role: str, permission: Permission, limit: int = 0) -> AuthChange:
    return AuthChange(AuthOp.GRANT_PERMISSION, role, permission=permission, limit=limit)


def revision(node: Node) -> int:
    return decode_meta(node.value(AUTH_META_KEY)).revision


def enabled(node: Node) -> bool:
    return decode_meta(node.value(AUTH_META_KEY)).enabled


def roles_of(node: Node, name: str) -> tuple[str, ...]:
    value = node.value(user_key(name))
    assert value is not None
    return decode_user(value).roles


def test_enabling_needs_root_with_the_root_role(node: Node) -> None:
    refused = node.one(AuthChange(AuthOp.ENABLE))
    assert refused.code is ResultCode.ROOT_REQUIRED and not enabled(node)
    assert node.one(add_user("root")).ok
    assert node.one(AuthChange(AuthOp.ENABLE)).code is ResultCode.ROOT_REQUIRED
    assert node.one(AuthChange(AuthOp.GRANT_ROLE, "root", role="root")).ok
    assert node.one(AuthChange(AuthOp.ENABLE)).ok and enabled(node)
    # While enabled, root stays root.
    assert node.one(AuthChange(AuthOp.DELETE_USER, "root")).code is ResultCode.ROOT_REQUIRED
    revoke = AuthChange(AuthOp.REVOKE_ROLE, "root", role="root")
    assert node.one(revoke).code is ResultCode.ROOT_REQUIRED
    assert node.one(AuthChange(AuthOp.DISABLE)).ok and not enabled(node)
    assert node.one(revoke).ok


def bootstrap(password_hash: str = "h-boot") -> AuthChange:
    return AuthChange(AuthOp.BOOTSTRAP_ROOT, "root", password_hash=password_hash)


def test_the_bootstrap_adds_root_and_enables_auth_once_on_a_cluster_that_never_had_auth(
    node: Node,
) -> None:
    assert revision(node) == 0
    first = node.one(bootstrap("h-first"))
    assert first.ok and first.value == b"1"
    assert enabled(node) and roles_of(node, "root") == ("root",)
    # A second bootstrap (another node, a restart) changes nothing, not even the password.
    again = node.one(bootstrap("h-second"))
    assert again.code is ResultCode.AUTH_ALREADY_SET_UP and revision(node) == 1
    root = node.value(user_key("root"))
    assert root is not None and decode_user(root).password_hash == "h-first"
    # Disabled by an operator later: a bootstrap never enables it again.
    assert node.one(AuthChange(AuthOp.DISABLE)).ok and not enabled(node)
    assert node.one(bootstrap()).code is ResultCode.AUTH_ALREADY_SET_UP
    assert not enabled(node) and revision(node) == 2


def test_the_bootstrap_does_nothing_once_any_auth_change_was_applied(node: Node) -> None:
    assert node.one(add_role("r")).ok  # set up by hand, auth still disabled
    assert node.one(bootstrap()).code is ResultCode.AUTH_ALREADY_SET_UP
    assert not enabled(node) and node.value(user_key("root")) is None and revision(node) == 1


def test_the_bootstrap_makes_only_root() -> None:
    with pytest.raises(ValueError, match="bootstrap makes the user root"):
        encode_entry(Batch((AuthChange(AuthOp.BOOTSTRAP_ROOT, "alice", password_hash="h"),)))
    with pytest.raises(ValueError, match="password hash"):
        encode_entry(Batch((AuthChange(AuthOp.BOOTSTRAP_ROOT, "root"),)))
    change = bootstrap()
    assert decode_entry(encode_entry(Batch((change,), 3))).commands == (change,)


def test_the_root_role_is_built_in(node: Node) -> None:
    for change in (
        add_role("root"),
        grant("root", READ_APP),
        AuthChange(AuthOp.DELETE_ROLE, "root"),
    ):
        assert node.one(change).code is ResultCode.ROOT_ROLE_BUILT_IN
    assert node.value(role_key("root")) is None


def test_every_change_raises_the_revision_and_a_no_op_does_not(node: Node) -> None:
    assert revision(node) == 0
    assert node.one(add_role("r")).value == b"1"
    assert node.one(add_user("u", "r")).value == b"2"
    assert node.one(AuthChange(AuthOp.GRANT_ROLE, "u", role="r")).value == b"2"  # held already
    assert node.one(AuthChange(AuthOp.SET_PASSWORD, "u", password_hash="new")).value == b"3"
    assert revision(node) == 3


def test_granting_an_unknown_role_fails_and_deleting_a_role_takes_it_from_users(
    node: Node,
) -> None:
    assert node.one(add_user("u", "nope")).code is ResultCode.ROLE_NOT_FOUND
    assert node.value(user_key("u")) is None
    assert node.one(add_role("r")).ok and node.one(add_role("s")).ok
    # Created in the same entry as the deletion: the deletion sees it too.
    results = node.apply(
        add_user("u", "r", "s"), add_user("v", "r"), AuthChange(AuthOp.DELETE_ROLE, "r")
    )
    assert all(r.ok for r in results)
    assert roles_of(node, "u") == ("s",) and roles_of(node, "v") == ()
    assert node.one(AuthChange(AuthOp.GRANT_ROLE, "u", role="r")).code is ResultCode.ROLE_NOT_FOUND
    revoke = AuthChange(AuthOp.REVOKE_ROLE, "v", role="s")
    assert node.one(revoke).code is ResultCode.ROLE_NOT_GRANTED


def test_a_grant_on_the_same_target_replaces_its_kind_and_revoke_removes_it(node: Node) -> None:
    assert node.one(add_role("r")).ok
    assert node.one(grant("r", READ_APP)).ok
    assert node.one(grant("r", Permission(PermissionKind.ADMIN))).ok
    assert node.one(grant("r", Permission(PermissionKind.READWRITE, b"app/", True))).ok
    stored = node.value(role_key("r"))
    assert stored is not None
    assert set(decode_role(stored)) == {
        Permission(PermissionKind.ADMIN),
        Permission(PermissionKind.READWRITE, b"app/", True),
    }
    revoke = AuthChange(AuthOp.REVOKE_PERMISSION, "r", permission=READ_APP)
    assert node.one(revoke).ok
    assert node.one(revoke).code is ResultCode.PERMISSION_NOT_GRANTED
    stored = node.value(role_key("r"))
    assert stored is not None and decode_role(stored) == (Permission(PermissionKind.ADMIN),)


def test_limits_refuse_and_write_nothing(node: Node) -> None:
    assert node.one(add_user("a", limit=2)).ok
    both = node.apply(add_user("b", limit=2), add_user("c", limit=2))
    assert both[0].ok and both[1].code is ResultCode.TOO_MANY_USERS
    assert "--max-auth-users" in both[1].message and node.value(user_key("c")) is None
    assert node.one(add_role("r", limit=1)).ok
    assert node.one(add_role("s", limit=1)).code is ResultCode.TOO_MANY_ROLES
    assert node.one(grant("r", READ_APP, limit=1)).ok
    other = Permission(PermissionKind.WRITE, b"x", False)
    assert node.one(grant("r", other, limit=1)).code is ResultCode.TOO_MANY_ROLE_PERMISSIONS
    # Replacing the kind on a target it holds is no new permission.
    assert node.one(grant("r", READ_APP._replace(kind=PermissionKind.WRITE), limit=1)).ok


def test_user_commands_cannot_touch_the_auth_records(node: Node) -> None:
    assert node.one(add_user("u")).ok
    refused = node.one(Put(user_key("u"), b"mine"))
    assert refused.code is ResultCode.RESERVED_KEY
    assert node.value(user_key("u")) is not None


def test_the_records_survive_a_reopen_and_a_compaction(node: Node) -> None:
    assert node.one(add_role("r")).ok and node.one(grant("r", READ_APP)).ok
    assert node.one(add_user("root", "root")).ok and node.one(AuthChange(AuthOp.ENABLE)).ok
    for i in range(50):  # roll a few segments so compaction has closed ones to rewrite
        assert node.one(Put(b"k%d" % (i % 3), b"v" * 40)).ok
    result = compact(node.storage.commit_log, node.storage.store, NO_TOMBSTONES, 4096)
    assert result.records_dropped > 0
    node.reopen()
    assert enabled(node) and revision(node) == 4
    assert roles_of(node, "root") == ("root",)
    stored = node.value(role_key("r"))
    assert stored is not None and decode_role(stored) == (READ_APP,)
    # The log alone rebuilds them (LMDB discarded, replayed from the compacted log).
    records = [r for r in node.storage.commit_log.read(1) if r.key.startswith(AUTH_PREFIX)]
    assert {r.key for r in records} >= {AUTH_META_KEY, user_key("root"), role_key("r")}


def test_an_auth_change_is_format_3_and_older_formats_still_decode() -> None:
    assert FORMAT_VERSION == 6  # alarms (tests/unit/test_alarms.py)
    change = grant("r", READ_APP, 10)
    data = encode_entry(Batch((change,), 5))
    assert data[0] == 3 and decode_entry(data).commands == (change,)
    assert encode_entry(Batch((Put(b"k", b"v"),)))[0] == 1  # what an older node reads
    with pytest.raises(UnsupportedEntryVersion):
        decode_entry(b"\x07" + data[1:])
    # An auth change in an entry that claims an older format is malformed.
    with pytest.raises(EntryDecodeError, match="later format"):
        decode_entry(b"\x02" + data[1:])
    packed = msgpack.packb([1, [[13, 99, "r", "", "", [], None, 0]]], use_bin_type=True)
    with pytest.raises(EntryDecodeError, match="unknown auth op"):
        decode_entry(b"\x03" + packed)
