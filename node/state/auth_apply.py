"""How the state machine decides an :class:`node.state.auth_commands.AuthChange`.

Rules (every replica decides them from the state alone):

- ENABLE needs the user ``root`` holding the role ``root`` (``root_required``).
  While enabled, ``root`` cannot be deleted nor lose the role ``root``.
- BOOTSTRAP_ROOT (``--root-password-file``) adds ``root`` with the role ``root``
  and enables auth in one entry, only while no auth change was ever applied
  (revision 0); otherwise it is ``auth_already_set_up`` and writes nothing, so
  several nodes may propose it at once and an operator's later DISABLE stays.
- The role ``root`` is built in: adding, deleting or changing it is
  ``root_role_built_in``; granting it to a user is allowed.
- Granting a role that does not exist is ``role_not_found``; deleting a role
  takes it away from every user holding it, in the same entry.
- Granting a permission on a target a role already has (the same key, or the
  same prefix) replaces its kind, as etcd does; revoking takes the permission on
  that target away, whatever its kind.
- A new user past ``limit`` users, a new role past ``limit`` roles, or a
  permission past ``limit`` per role is refused (``too_many_users``,
  ``too_many_roles``, ``too_many_role_permissions``), nothing written.
- Every change that writes something raises the revision by one (in
  :data:`AUTH_META_KEY`, with the enabled flag); a change that finds nothing to
  do (granting a role a user holds) writes nothing and keeps it.

The result's ``value`` is the revision after the change, as decimal text.
"""

from __future__ import annotations

from node.state.auth_commands import AuthChange, AuthOp
from node.state.auth_records import (
    AUTH_META_KEY,
    AUTH_USERS_PREFIX,
    ROOT,
    AuthMeta,
    Permission,
    PermissionKind,
    UserRecord,
    decode_meta,
    decode_role,
    decode_user,
    encode_meta,
    encode_role,
    encode_user,
    role_key,
    user_key,
)
from node.state.entry_writer import EntryWriter
from node.state.results import CommandResult, ResultCode

_PAGE = 1000


def _refuse(code: ResultCode, message: str) -> CommandResult:
    return CommandResult(code, message=message)


def _count(writer: EntryWriter, prefix: bytes) -> int:
    """Keys under ``prefix`` at this point of the entry."""
    count = writer.view.count_prefix(prefix)
    for key, value in writer.pending.items():
        if key.startswith(prefix):
            before = writer.view.get(key) is not None
            count += (value is not None) - before
    return count


def _user_names(writer: EntryWriter) -> list[str]:
    """Every user's name at this point of the entry, in key order."""
    keys: set[bytes] = {k for k in writer.pending if k.startswith(AUTH_USERS_PREFIX)}
    after: bytes | None = None
    while True:
        page = writer.view.scan(AUTH_USERS_PREFIX, after, _PAGE, include_internal=True)
        keys.update(key for key, _ in page)
        if len(page) < _PAGE:
            break
        after = page[-1][0]
    skip = len(AUTH_USERS_PREFIX)
    return [key[skip:].decode() for key in sorted(keys) if writer.current(key) is not None]


def _user(writer: EntryWriter, name: str) -> UserRecord | None:
    stored = writer.current(user_key(name))
    return None if stored is None else decode_user(stored.value)


def _role_exists(writer: EntryWriter, name: str) -> bool:
    return name == ROOT or writer.current(role_key(name)) is not None


def _put(writer: EntryWriter, key: bytes, value: bytes) -> None:
    writer.put(key, value, writer.current(key))


def _delete(writer: EntryWriter, key: bytes) -> None:
    if writer.current(key) is not None:
        writer.delete(key)


def decide_auth(writer: EntryWriter, change: AuthChange) -> CommandResult:
    stored_meta = writer.current(AUTH_META_KEY)
    meta = decode_meta(None if stored_meta is None else stored_meta.value)
    outcome = _decide(writer, change, meta)
    if isinstance(outcome, CommandResult):
        return outcome
    if outcome is None:  # nothing to do: nothing written, the revision stays
        return CommandResult(ResultCode.OK, version=writer.offset - 1, value=b"%d" % meta.revision)
    revision = meta.revision + 1
    stored = writer.put(
        AUTH_META_KEY, encode_meta(AuthMeta(outcome, revision)), writer.current(AUTH_META_KEY)
    )
    return CommandResult(ResultCode.OK, version=stored.version, value=b"%d" % revision)


def _decide(writer: EntryWriter, change: AuthChange, meta: AuthMeta) -> CommandResult | bool | None:
    """A refusal, None (nothing to do), or the enabled flag after the change (written)."""
    op = change.op
    if op is AuthOp.BOOTSTRAP_ROOT:
        if meta.revision != 0 or _user(writer, ROOT) is not None:
            return _refuse(
                ResultCode.AUTH_ALREADY_SET_UP,
                f"authentication was set up before (auth revision {meta.revision}): "
                "the bootstrap does nothing",
            )
        _put(writer, user_key(ROOT), encode_user(UserRecord(change.password_hash, (ROOT,))))
        return True
    if op is AuthOp.ENABLE:
        root = _user(writer, ROOT)
        if root is None or ROOT not in root.roles:
            return _refuse(
                ResultCode.ROOT_REQUIRED,
                "add the user root with the role root before enabling authentication",
            )
        return None if meta.enabled else True
    if op is AuthOp.DISABLE:
        return False if meta.enabled else None
    if op in (
        AuthOp.ADD_ROLE,
        AuthOp.DELETE_ROLE,
        AuthOp.GRANT_PERMISSION,
        AuthOp.REVOKE_PERMISSION,
    ):
        return _decide_role(writer, change, meta)
    return _decide_user(writer, change, meta)


def _decide_user(
    writer: EntryWriter, change: AuthChange, meta: AuthMeta
) -> CommandResult | bool | None:
    op, name = change.op, change.name
    user = _user(writer, name)
    if op is AuthOp.ADD_USER:
        if user is not None:
            return _refuse(ResultCode.USER_EXISTS, f"the user {name} exists")
        if change.limit and _count(writer, AUTH_USERS_PREFIX) >= change.limit:
            return _refuse(
                ResultCode.TOO_MANY_USERS,
                f"the cluster holds {change.limit} users, its limit (--max-auth-users)",
            )
        missing = [role for role in change.roles if not _role_exists(writer, role)]
        if missing:
            return _refuse(ResultCode.ROLE_NOT_FOUND, f"no such role: {missing[0]}")
        roles = tuple(dict.fromkeys(change.roles))
        _put(writer, user_key(name), encode_user(UserRecord(change.password_hash, roles)))
        return meta.enabled
    if user is None:
        return _refuse(ResultCode.USER_NOT_FOUND, f"no such user: {name}")
    if op is AuthOp.DELETE_USER:
        if name == ROOT and meta.enabled:
            return _refuse(
                ResultCode.ROOT_REQUIRED, "the user root cannot be deleted while auth is enabled"
            )
        _delete(writer, user_key(name))
        return meta.enabled
    if op is AuthOp.SET_PASSWORD:
        _put(writer, user_key(name), encode_user(user._replace(password_hash=change.password_hash)))
        return meta.enabled
    role = change.role
    if op is AuthOp.GRANT_ROLE:
        if not _role_exists(writer, role):
            return _refuse(ResultCode.ROLE_NOT_FOUND, f"no such role: {role}")
        if role in user.roles:
            return None
        _put(writer, user_key(name), encode_user(user._replace(roles=(*user.roles, role))))
        return meta.enabled
    # REVOKE_ROLE
    if role not in user.roles:
        return _refuse(
            ResultCode.ROLE_NOT_GRANTED, f"the user {name} does not hold the role {role}"
        )
    if name == ROOT and role == ROOT and meta.enabled:
        return _refuse(
            ResultCode.ROOT_REQUIRED,
            "the user root cannot lose the role root while auth is enabled",
        )
    roles = tuple(r for r in user.roles if r != role)
    _put(writer, user_key(name), encode_user(user._replace(roles=roles)))
    return meta.enabled


def _same_target(a: Permission, b: Permission) -> bool:
    admin_a, admin_b = a.kind is PermissionKind.ADMIN, b.kind is PermissionKind.ADMIN
    return admin_a == admin_b and a.target == b.target and a.is_prefix == b.is_prefix


def _decide_role(
    writer: EntryWriter, change: AuthChange, meta: AuthMeta
) -> CommandResult | bool | None:
    op, name = change.op, change.name
    if name == ROOT:
        return _refuse(
            ResultCode.ROOT_ROLE_BUILT_IN,
            "the role root is built in (every permission): it cannot be added, changed or deleted",
        )
    key = role_key(name)
    stored = writer.current(key)
    if op is AuthOp.ADD_ROLE:
        if stored is not None:
            return _refuse(ResultCode.ROLE_EXISTS, f"the role {name} exists")
        if change.limit and _count(writer, role_key("")) >= change.limit:
            return _refuse(
                ResultCode.TOO_MANY_ROLES,
                f"the cluster holds {change.limit} roles, its limit (--max-auth-roles)",
            )
        _put(writer, key, encode_role(()))
        return meta.enabled
    if stored is None:
        return _refuse(ResultCode.ROLE_NOT_FOUND, f"no such role: {name}")
    if op is AuthOp.DELETE_ROLE:
        writer.delete(key)
        for user_name in _user_names(writer):
            user = _user(writer, user_name)
            if user is not None and name in user.roles:
                roles = tuple(r for r in user.roles if r != name)
                _put(writer, user_key(user_name), encode_user(user._replace(roles=roles)))
        return meta.enabled
    permissions = decode_role(stored.value)
    permission = change.permission
    assert permission is not None  # decoding guarantees it for these ops
    others = tuple(p for p in permissions if not _same_target(p, permission))
    if op is AuthOp.GRANT_PERMISSION:
        if permission in permissions:
            return None
        if change.limit and len(others) >= change.limit:
            return _refuse(
                ResultCode.TOO_MANY_ROLE_PERMISSIONS,
                f"the role {name} holds {len(others)} permissions, the limit "
                "(--max-role-permissions)",
            )
        _put(writer, key, encode_role((*others, permission)))
        return meta.enabled
    # REVOKE_PERMISSION
    if len(others) == len(permissions):
        return _refuse(
            ResultCode.PERMISSION_NOT_GRANTED, f"the role {name} has no permission on that target"
        )
    _put(writer, key, encode_role(others))
    return meta.enabled
