"""The auth management methods of :class:`http_api.client.RkvClient` and
:class:`http_api.client.AsyncRkvClient` (the async ones are the same, as coroutines).

What each needs once auth is on: ``token`` nothing (it checks the password
given), ``auth_status`` any user, everything else admin. While auth is off
every call is open, so that the root user can be created and given the role
``root`` before ``auth_enable()`` (which is refused with ConflictError
``root_required`` otherwise). Changes return the auth revision they made.

Refusals raise the client's exceptions (:mod:`http_api.client.errors`):
AuthenticationError (401), PermissionDeniedError (403, naming what is
missing), NotFoundError (``user_not_found``, ``role_not_found``,
``role_not_granted``, ``permission_not_granted``), ConflictError
(``user_exists``, ``role_exists``, ``root_required``, ``root_role_built_in``),
InvalidRequestError (a bad name, password or permission), TooManyRequestsError
(429: too many failed logins, or the cluster's user or role limit).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

from http_api.client.auth_model import AuthStatus, Permission, Role, User
from http_api.client.auth_plans import _AuthPlans, revoked_target
from http_api.client.model import BytesLike
from http_api.client.operations import _Core
from http_api.client.wire import _Plan

T = TypeVar("T")


class _SyncAuthMethods:
    """Mixed into RkvClient, which provides ``_core`` and ``_run``."""

    _core: _Core

    def _run(self, plan: _Plan[T]) -> T:
        raise NotImplementedError

    @property
    def _auth(self) -> _AuthPlans:
        return _AuthPlans(self._core)

    def token(self, user: str, password: str) -> str:
        """A bearer token for ``user`` (``POST /v1/auth/token``), valid for the cluster's
        ``--auth-token-ttl`` and until the next change of users or roles; use it as
        ``Credentials(token=...)``."""
        return self._run(self._auth.token(user, password))

    def auth_status(self) -> AuthStatus:
        return self._run(self._auth.status())

    def auth_enable(self) -> int:
        """Turn authentication on (the user ``root`` must exist with the role ``root``)."""
        return self._run(self._auth.enable())

    def auth_disable(self) -> int:
        return self._run(self._auth.disable())

    def user_add(self, name: str, password: str, roles: Iterable[str] = ()) -> int:
        return self._run(self._auth.user_add(name, password, tuple(roles)))

    def user_delete(self, name: str) -> int:
        return self._run(self._auth.user_delete(name))

    def user_passwd(self, name: str, password: str) -> int:
        """Set ``name``'s password (its tokens stop working)."""
        return self._run(self._auth.user_passwd(name, password))

    def user_grant_role(self, name: str, role: str) -> int:
        return self._run(self._auth.user_role(name, role, grant=True))

    def user_revoke_role(self, name: str, role: str) -> int:
        return self._run(self._auth.user_role(name, role, grant=False))

    def users(self) -> list[User]:
        """Every user's name and roles (never a password or its hash)."""
        return self._run(self._auth.users())

    def user(self, name: str) -> User:
        return self._run(self._auth.user(name))

    def role_add(self, name: str) -> int:
        return self._run(self._auth.role_add(name))

    def role_delete(self, name: str) -> int:
        """Delete the role and take it from every user that has it."""
        return self._run(self._auth.role_delete(name))

    def role_grant(
        self,
        name: str,
        *,
        permission: str,
        key: BytesLike | None = None,
        prefix: BytesLike | None = None,
        checkpoint: str | None = None,
    ) -> int:
        """Give the role ``permission`` (read, write, readwrite) on one ``key``, every key
        under ``prefix`` or a replicator's ``checkpoint`` (by name), or ``admin`` (no
        target). A permission on a target the role has already replaces it."""
        granted = Permission.of(permission, key=key, prefix=prefix, checkpoint=checkpoint)
        return self._run(self._auth.role_permission(name, granted, grant=True))

    def role_revoke(
        self,
        name: str,
        *,
        key: BytesLike | None = None,
        prefix: BytesLike | None = None,
        checkpoint: str | None = None,
        admin: bool = False,
    ) -> int:
        """Take the role's permission on that target (or its admin) away."""
        target = revoked_target(key, prefix, checkpoint, admin)
        return self._run(self._auth.role_permission(name, target, grant=False))

    def roles(self) -> list[Role]:
        """Every role with its permissions, the built-in ``root`` first."""
        return self._run(self._auth.roles())

    def role(self, name: str) -> Role:
        return self._run(self._auth.role(name))


class _AsyncAuthMethods:
    """Mixed into AsyncRkvClient: the same calls, as coroutines."""

    _core: _Core

    async def _run(self, plan: _Plan[T]) -> T:
        raise NotImplementedError

    @property
    def _auth(self) -> _AuthPlans:
        return _AuthPlans(self._core)

    async def token(self, user: str, password: str) -> str:
        return await self._run(self._auth.token(user, password))

    async def auth_status(self) -> AuthStatus:
        return await self._run(self._auth.status())

    async def auth_enable(self) -> int:
        return await self._run(self._auth.enable())

    async def auth_disable(self) -> int:
        return await self._run(self._auth.disable())

    async def user_add(self, name: str, password: str, roles: Iterable[str] = ()) -> int:
        return await self._run(self._auth.user_add(name, password, tuple(roles)))

    async def user_delete(self, name: str) -> int:
        return await self._run(self._auth.user_delete(name))

    async def user_passwd(self, name: str, password: str) -> int:
        return await self._run(self._auth.user_passwd(name, password))

    async def user_grant_role(self, name: str, role: str) -> int:
        return await self._run(self._auth.user_role(name, role, grant=True))

    async def user_revoke_role(self, name: str, role: str) -> int:
        return await self._run(self._auth.user_role(name, role, grant=False))

    async def users(self) -> list[User]:
        return await self._run(self._auth.users())

    async def user(self, name: str) -> User:
        return await self._run(self._auth.user(name))

    async def role_add(self, name: str) -> int:
        return await self._run(self._auth.role_add(name))

    async def role_delete(self, name: str) -> int:
        return await self._run(self._auth.role_delete(name))

    async def role_grant(
        self,
        name: str,
        *,
        permission: str,
        key: BytesLike | None = None,
        prefix: BytesLike | None = None,
        checkpoint: str | None = None,
    ) -> int:
        granted = Permission.of(permission, key=key, prefix=prefix, checkpoint=checkpoint)
        return await self._run(self._auth.role_permission(name, granted, grant=True))

    async def role_revoke(
        self,
        name: str,
        *,
        key: BytesLike | None = None,
        prefix: BytesLike | None = None,
        checkpoint: str | None = None,
        admin: bool = False,
    ) -> int:
        target = revoked_target(key, prefix, checkpoint, admin)
        return await self._run(self._auth.role_permission(name, target, grant=False))

    async def roles(self) -> list[Role]:
        return await self._run(self._auth.roles())

    async def role(self, name: str) -> Role:
        return await self._run(self._auth.role(name))
