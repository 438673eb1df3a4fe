"""Authentication and the management of users and roles: what the HTTP layer calls.

The auth state is replicated records (node/state/auth_records.py) read from
this node's LMDB; changes are proposed as :class:`AuthChange` entries, with
passwords hashed here first (node/service/passwords.py), so a password never
reaches the log. While auth is disabled (the default) nothing is checked.

Authenticating a request (:meth:`AuthService.authenticate`) gives a
:class:`Principal`: a name and the permissions of its roles.

- ``Authorization: Bearer <token>``: node/service/auth_tokens.py (no scrypt).
- ``Authorization: Basic``: the failed-login counters are checked first
  (node/service/login_limits.py), then the password is verified with scrypt
  off the event loop, at most ``MAX_CONCURRENT_HASHES`` at once. A success is
  remembered (at most :data:`MAX_CACHED_LOGINS`, keyed by an HMAC of the
  credentials under a key this process draws at random, so the cache holds no
  password) until the auth revision changes: a client sending Basic on every
  request costs one scrypt, not one per request.
- no Authorization header but a verified client certificate (mTLS): its
  subject's common name is the user.

Principals are cached per auth revision too: a change of any user or role
clears every cache on the node that applies it.

With ``awaiting_bootstrap`` (the node has --root-password-file), a cluster that
never set auth up (revision 0) is not open while the bootstrap
(node/service/auth_bootstrap.py) is on its way: every request that needs
credentials is 503 ``auth_starting`` until root exists and auth is enabled,
but members' tokens (catch-up, join) are accepted.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import os
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

from node.errors import (
    Conflict,
    InvalidRequest,
    KeyNotFound,
    LimitReached,
    PayloadTooLarge,
    RequestError,
    Unauthenticated,
    Unavailable,
)
from node.service.auth_tokens import (
    DEFAULT_TOKEN_TTL,
    MEMBER_IDENTITY,
    MEMBER_KIND,
    USER_KIND,
    TokenSigner,
)
from node.service.kv import ConsensusLog
from node.service.kv_writes import result_error
from node.service.login_limits import FailedLogins
from node.service.passwords import (
    MAX_CONCURRENT_HASHES,
    MAX_PASSWORD_CHARS,
    hash_password,
    verify_password,
)
from node.state.auth_commands import AuthChange, AuthOp
from node.state.auth_records import (
    AUTH_META_KEY,
    AUTH_ROLES_PREFIX,
    AUTH_USERS_PREFIX,
    DEFAULT_MAX_ROLE_PERMISSIONS,
    DEFAULT_MAX_ROLES,
    DEFAULT_MAX_USERS,
    ROOT,
    ROOT_PERMISSIONS,
    AuthMeta,
    Permission,
    PermissionKind,
    UserRecord,
    decode_meta,
    decode_role,
    decode_user,
    name_problem,
    role_key,
    user_key,
)
from node.state.results import CommandResult, ResultCode
from node.storage.lmdb_store import LmdbStore, ReadOnlyStore

LoginCheck = Callable[[str, str, str], Awaitable[None]]
"""(user, password, client address): returns when the login checks, else raises
Unauthenticated or LimitReached."""

MAX_CACHED_LOGINS = 10_000
REFUSED_LOGIN_DELAY_SECONDS = 1.0
"""A login refused for too many failures is answered after this long (a tarpit): a
guesser on a keep-alive connection gets one 429 a second instead of as many as the
node can send, and the wait costs the node nothing but the held connection."""
"""Verified Basic credentials remembered per node (a few hundred bytes each)."""
_MAX_CACHED_PRINCIPALS = 10_000
_LIST_PAGE = 1000

MEMBER_PERMISSIONS = (
    Permission(PermissionKind.READ, b"", True),
    Permission(PermissionKind.ADMIN),
)


class Principal(NamedTuple):
    """Who a request comes from, and what its roles allow."""

    name: str
    permissions: tuple[Permission, ...]

    def allows_key(self, key: bytes, kind: PermissionKind) -> bool:
        return any(p.covers_key(key) and p.kind & kind == kind for p in self.permissions)

    def allows_prefix(self, prefix: bytes, kind: PermissionKind) -> bool:
        return any(p.covers_prefix(prefix) and p.kind & kind == kind for p in self.permissions)

    @property
    def admin(self) -> bool:
        return any(p.kind is PermissionKind.ADMIN for p in self.permissions)


MEMBER = Principal(MEMBER_IDENTITY, MEMBER_PERMISSIONS)

_AUTH_ERRORS: dict[ResultCode, type[RequestError]] = {
    ResultCode.USER_EXISTS: Conflict,
    ResultCode.ROLE_EXISTS: Conflict,
    ResultCode.ROOT_REQUIRED: Conflict,
    ResultCode.ROOT_ROLE_BUILT_IN: Conflict,
    ResultCode.USER_NOT_FOUND: KeyNotFound,
    ResultCode.ROLE_NOT_FOUND: KeyNotFound,
    ResultCode.ROLE_NOT_GRANTED: KeyNotFound,
    ResultCode.PERMISSION_NOT_GRANTED: KeyNotFound,
    ResultCode.TOO_MANY_USERS: LimitReached,
    ResultCode.TOO_MANY_ROLES: LimitReached,
    ResultCode.TOO_MANY_ROLE_PERMISSIONS: PayloadTooLarge,
}


def _auth_error(result: CommandResult) -> RequestError:
    kind = _AUTH_ERRORS.get(result.code)
    if kind is None:
        return result_error(result)
    return kind(result.message, code=result.code.value)


def _check_name(name: object, what: str) -> str:
    problem = name_problem(name, what)
    if problem is not None:
        raise InvalidRequest(problem, code=f"invalid_{what}_name")
    assert isinstance(name, str)
    return name


def _check_password(password: object) -> str:
    if not isinstance(password, str) or not 0 < len(password) <= MAX_PASSWORD_CHARS:
        raise InvalidRequest(
            f"a password is 1 to {MAX_PASSWORD_CHARS} characters", code="invalid_password"
        )
    return password


class AuthService:
    def __init__(
        self,
        consensus: ConsensusLog | None,
        store: LmdbStore | ReadOnlyStore,
        secret: bytes | None,
        *,
        token_ttl: float = DEFAULT_TOKEN_TTL,
        max_users: int = DEFAULT_MAX_USERS,
        max_roles: int = DEFAULT_MAX_ROLES,
        max_role_permissions: int = DEFAULT_MAX_ROLE_PERMISSIONS,
        failed_logins: FailedLogins | None = None,
        awaiting_bootstrap: bool = False,
        verify_login: LoginCheck | None = None,
    ) -> None:
        """``consensus`` None: authentication only (an HTTP worker); ``verify_login``:
        who checks a Basic login this service has not verified yet (a worker asks its
        node's main process, which keeps the node's failed-login counts)."""
        self._consensus = consensus
        self._verify_login = verify_login
        self._awaiting_bootstrap = awaiting_bootstrap
        self._store = store
        self._signer = None if secret is None else TokenSigner(secret)
        self._token_ttl = token_ttl
        self._max_users = max_users
        self._max_roles = max_roles
        self._max_role_permissions = max_role_permissions
        self._failed = failed_logins or FailedLogins()
        self._cache_key = os.urandom(32)
        self._revision = -1
        self._meta: AuthMeta | None = None
        self._meta_index = -1  # the store's applied index when _meta was read
        self._logins: OrderedDict[bytes, str] = OrderedDict()
        self._principals: dict[str, Principal] = {}
        self._hashing: asyncio.Semaphore | None = None

    # -- the state --------------------------------------------------------------------

    def meta(self) -> AuthMeta:
        """The enabled flag and revision this node has applied; clears the caches when
        the revision moved. Read again only once the store has applied another entry
        (the store sets its applied index after each write transaction commits)."""
        index = self._store.applied_index
        if self._meta is not None and index == self._meta_index:
            return self._meta
        found = self._store.get(AUTH_META_KEY)
        meta = decode_meta(None if found is None else found.value)
        self._meta, self._meta_index = meta, index
        if meta.revision != self._revision:
            self._revision = meta.revision
            self._logins.clear()
            self._principals.clear()
        return meta

    @property
    def enabled(self) -> bool:
        return self.meta().enabled

    def _user(self, name: str) -> UserRecord | None:
        found = self._store.get(user_key(name))
        return None if found is None else decode_user(found.value)

    def _principal(self, name: str) -> Principal | None:
        """The user's principal as of this node's state, or None without such a user."""
        known = self._principals.get(name)
        if known is not None:
            return known
        user = self._user(name)
        if user is None:
            return None
        permissions: list[Permission] = []
        for role in user.roles:
            if role == ROOT:
                permissions.extend(ROOT_PERMISSIONS)
                continue
            found = self._store.get(role_key(role))
            if found is not None:
                permissions.extend(decode_role(found.value))
        principal = Principal(name, tuple(permissions))
        if len(self._principals) >= _MAX_CACHED_PRINCIPALS:
            self._principals.clear()
        self._principals[name] = principal
        return principal

    # -- authentication -----------------------------------------------------------------

    async def authenticate(
        self, authorization: str | None, certificate_user: str | None, address: str
    ) -> Principal | None:
        """Who the request comes from; None while auth is disabled. Raises Unauthenticated
        or LimitReached (too many failed logins)."""
        meta = self.meta()
        if not meta.enabled:
            if meta.revision == 0 and self._awaiting_bootstrap:
                return self._while_bootstrapping(authorization)
            return None
        if authorization:
            scheme, _, credentials = authorization.strip().partition(" ")
            if scheme.lower() == "bearer":
                return self._bearer(credentials.strip(), meta.revision)
            if scheme.lower() == "basic":
                user, password = _basic(credentials.strip())
                return await self._login(user, password, address)
            raise Unauthenticated(
                f"unsupported authorization scheme {scheme[:20]!r}: use Basic or Bearer",
                code="invalid_credentials",
            )
        if certificate_user is not None:
            principal = self._principal(certificate_user)
            if principal is None:
                raise Unauthenticated(
                    "the client certificate names no user of this cluster",
                    code="invalid_credentials",
                )
            return principal
        raise Unauthenticated(
            "authentication is required: HTTP Basic, a bearer token from POST /v1/auth/token, "
            "or a client certificate",
            code="unauthenticated",
        )

    def _while_bootstrapping(self, authorization: str | None) -> Principal:
        """Before the root bootstrap is applied: members only."""
        scheme, _, token = (authorization or "").strip().partition(" ")
        if scheme.lower() == "bearer" and self._signer is not None:
            try:
                if self._signer.verify(token.strip()).kind == MEMBER_KIND:
                    return MEMBER
            except Unauthenticated:
                pass
        refused = Unavailable(
            "authentication is being set up (--root-password-file): the user root and "
            "auth are not applied on this node yet; retry in a moment",
            code="auth_starting",
        )
        refused.retry_after = 1.0
        raise refused

    def _bearer(self, token: str, revision: int) -> Principal:
        if self._signer is None:
            raise Unauthenticated("this node has no cluster secret", code="invalid_token")
        claims = self._signer.verify(token)
        if claims.kind == MEMBER_KIND:
            return MEMBER
        principal = self._principal(claims.name) if claims.kind == USER_KIND else None
        if claims.revision < revision or principal is None:
            raise Unauthenticated(
                "the token was issued before the last change of users or roles: ask for a new one",
                code="invalid_token",
            )
        return principal

    async def check_login(self, user: str, password: str, address: str) -> None:
        """A Basic login an HTTP worker has not verified yet (node/cli/http_workers.py):
        checked here, against this process's failed-login counts. Raises
        Unauthenticated or LimitReached."""
        await self._login(user, password, address)

    def _login_key(self, user: str, password: str) -> bytes:
        message = user.encode() + b"\x00" + password.encode()
        return hmac.new(self._cache_key, message, hashlib.sha256).digest()

    async def _login(self, user: str, password: str, address: str) -> Principal:
        """Check a user's password (cached per revision; rate-limited before scrypt)."""
        key = self._login_key(user, password)
        if self._logins.get(key) == user:
            principal = self._principal(user)
            if principal is not None:
                self._logins.move_to_end(key)
                return principal
        if self._verify_login is not None:
            await self._verify_login(user, password, address)
            principal = self._principal(user)
            if principal is None:
                raise Unauthenticated("wrong user name or password", code="invalid_credentials")
            self._remember_login(key, user)
            return principal
        try:
            self._failed.check(user, address)
        except LimitReached:
            await asyncio.sleep(REFUSED_LOGIN_DELAY_SECONDS)
            raise
        record = self._user(user)
        checked = record is not None and await self._verify(password, record.password_hash)
        principal = self._principal(user) if checked else None
        if principal is None:
            self._failed.failed(user, address)
            raise Unauthenticated("wrong user name or password", code="invalid_credentials")
        self._remember_login(key, user)
        return principal

    def _remember_login(self, key: bytes, user: str) -> None:
        self._logins[key] = user
        while len(self._logins) > MAX_CACHED_LOGINS:
            self._logins.popitem(last=False)

    async def _verify(self, password: str, stored: str) -> bool:
        if self._hashing is None:
            self._hashing = asyncio.Semaphore(MAX_CONCURRENT_HASHES)
        async with self._hashing:
            return await asyncio.to_thread(verify_password, password, stored)

    async def _hash(self, password: str) -> str:
        if self._hashing is None:
            self._hashing = asyncio.Semaphore(MAX_CONCURRENT_HASHES)
        async with self._hashing:
            return await asyncio.to_thread(hash_password, password)

    def member_token(self, node_id: str) -> str | None:
        """A token for this node's own calls to other members (None without a secret)."""
        return None if self._signer is None else self._signer.member_token(node_id)

    async def issue_token(self, user: Any, password: Any, address: str) -> dict[str, Any]:
        """POST /v1/auth/token: a signed token for a user whose password checks."""
        if self._signer is None:
            raise Conflict(
                "this node runs without a cluster secret: tokens cannot be signed",
                code="cluster_secret_required",
            )
        user = _check_name(user, "user")
        password = _check_password(password)
        meta = self.meta()
        principal = await self._login(user, password, address)
        token = self._signer.issue(USER_KIND, principal.name, meta.revision, self._token_ttl)
        return {"token": token, "expires_in": self._token_ttl}

    # -- management -----------------------------------------------------------------------

    async def _propose(self, change: AuthChange) -> dict[str, Any]:
        if self._consensus is None:
            raise Unavailable("this process serves reads only", code="read_only")
        result = await self._consensus.propose(change)
        if result.code is not ResultCode.OK:
            raise _auth_error(result)
        return {"revision": int(result.value or b"0")}

    def status(self) -> dict[str, Any]:
        meta = self.meta()
        return {"enabled": meta.enabled, "revision": meta.revision}

    async def enable(self) -> dict[str, Any]:
        if self._signer is None:
            raise Conflict(
                "authentication needs a cluster secret (--secret-file): without one this "
                "node cannot sign tokens, and its raft port is open to anyone",
                code="cluster_secret_required",
            )
        return await self._propose(AuthChange(AuthOp.ENABLE))

    async def disable(self) -> dict[str, Any]:
        return await self._propose(AuthChange(AuthOp.DISABLE))

    async def add_user(self, name: Any, password: Any, roles: Any) -> dict[str, Any]:
        name = _check_name(name, "user")
        password = _check_password(password)
        if not isinstance(roles, list):
            raise InvalidRequest("roles must be an array of role names")
        checked = tuple(_check_name(role, "role") for role in roles)
        password_hash = await self._hash(password)
        return await self._propose(
            AuthChange(
                AuthOp.ADD_USER,
                name,
                password_hash=password_hash,
                roles=checked,
                limit=self._max_users,
            )
        )

    async def delete_user(self, name: str) -> dict[str, Any]:
        return await self._propose(AuthChange(AuthOp.DELETE_USER, _check_name(name, "user")))

    async def set_password(self, name: str, password: Any) -> dict[str, Any]:
        name = _check_name(name, "user")
        password_hash = await self._hash(_check_password(password))
        return await self._propose(
            AuthChange(AuthOp.SET_PASSWORD, name, password_hash=password_hash)
        )

    async def grant_role(self, name: str, role: str, grant: bool) -> dict[str, Any]:
        op = AuthOp.GRANT_ROLE if grant else AuthOp.REVOKE_ROLE
        return await self._propose(
            AuthChange(op, _check_name(name, "user"), role=_check_name(role, "role"))
        )

    async def add_role(self, name: Any) -> dict[str, Any]:
        change = AuthChange(AuthOp.ADD_ROLE, _check_name(name, "role"), limit=self._max_roles)
        return await self._propose(change)

    async def delete_role(self, name: str) -> dict[str, Any]:
        return await self._propose(AuthChange(AuthOp.DELETE_ROLE, _check_name(name, "role")))

    async def change_permission(
        self, role: str, permission: Permission, grant: bool
    ) -> dict[str, Any]:
        op = AuthOp.GRANT_PERMISSION if grant else AuthOp.REVOKE_PERMISSION
        limit = self._max_role_permissions if grant else 0
        change = AuthChange(op, _check_name(role, "role"), permission=permission, limit=limit)
        return await self._propose(change)

    # -- listing (this node's applied state) --------------------------------------------------

    def _names(self, prefix: bytes) -> list[tuple[str, bytes]]:
        items: list[tuple[str, bytes]] = []
        after: bytes | None = None
        with self._store.reader() as view:
            while True:
                page = view.scan(prefix, after, _LIST_PAGE, include_internal=True)
                items.extend((key[len(prefix) :].decode(), stored.value) for key, stored in page)
                if len(page) < _LIST_PAGE:
                    return items
                after = page[-1][0]

    def users(self) -> list[dict[str, Any]]:
        """Names and roles only: a password hash is never returned."""
        return [
            {"name": name, "roles": list(decode_user(value).roles)}
            for name, value in self._names(AUTH_USERS_PREFIX)
        ]

    def user(self, name: str) -> dict[str, Any]:
        record = self._user(_check_name(name, "user"))
        if record is None:
            raise KeyNotFound(f"no such user: {name}", code="user_not_found")
        return {"name": name, "roles": list(record.roles)}

    def roles(self) -> list[dict[str, Any]]:
        built_in = {"name": ROOT, "permissions": list(ROOT_PERMISSIONS), "built_in": True}
        stored = [
            {"name": name, "permissions": list(decode_role(value))}
            for name, value in self._names(AUTH_ROLES_PREFIX)
        ]
        return [built_in, *stored]

    def role(self, name: str) -> dict[str, Any]:
        name = _check_name(name, "role")
        if name == ROOT:
            return {"name": ROOT, "permissions": list(ROOT_PERMISSIONS), "built_in": True}
        found = self._store.get(role_key(name))
        if found is None:
            raise KeyNotFound(f"no such role: {name}", code="role_not_found")
        return {"name": name, "permissions": list(decode_role(found.value))}


def _basic(credentials: str) -> tuple[str, str]:
    try:
        decoded = base64.b64decode(credentials, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        raise Unauthenticated(
            "Basic credentials must be base64 of USER:PASSWORD in UTF-8", code="invalid_credentials"
        ) from None
    user, colon, password = decoded.partition(":")
    if not colon or name_problem(user, "user") is not None or not password:
        raise Unauthenticated("wrong user name or password", code="invalid_credentials")
    if len(password) > MAX_PASSWORD_CHARS:
        raise Unauthenticated("wrong user name or password", code="invalid_credentials")
    return user, password
