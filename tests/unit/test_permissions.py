"""THE permission table covers every route the app serves, the OpenAPI document states
each operation's security from it, and the pieces of authentication behave on their own
(tokens, failed-login counting, password hashes)."""

from __future__ import annotations

import pytest
from aiohttp import web

from http_api.openapi import openapi_document
from http_api.permissions import ROUTE_NEEDS, Need
from node.errors import LimitReached, Unauthenticated
from node.service.auth_tokens import MEMBER_KIND, USER_KIND, TokenSigner
from node.service.login_limits import WINDOW_SECONDS, FailedLogins
from node.service.passwords import hash_password, verify_password
from tests.unit.test_openapi import HTTP_METHODS, served_routes


def test_every_served_route_is_in_the_permission_table(app: web.Application) -> None:
    served = served_routes(app)
    assert ("POST", "/v1/auth/token") in served
    assert served - set(ROUTE_NEEDS) == set(), "add these routes to http_api/permissions.py"
    assert set(ROUTE_NEEDS) - served == set(), "the table names routes nobody serves"


def test_only_probes_metrics_the_document_and_the_token_exchange_are_open() -> None:
    open_routes = {route for route, need in ROUTE_NEEDS.items() if need is Need.OPEN}
    assert open_routes == {
        ("GET", "/metrics"),  # as etcd's: counts only, never a key (docs/OBSERVABILITY.md)
        ("GET", "/livez"),
        ("GET", "/healthz"),
        ("GET", "/readyz"),
        ("GET", "/v1/openapi.json"),
        ("POST", "/v1/auth/token"),
    }
    for path, item in openapi_document()["paths"].items():
        for method, operation in item.items():
            if method not in HTTP_METHODS:
                continue
            is_open = ROUTE_NEEDS[(method.upper(), path)] is Need.OPEN
            assert (operation.get("security") == []) == is_open, (method, path)
            assert is_open or "401" in operation["responses"], (method, path)


@pytest.fixture(scope="module")
def app() -> web.Application:
    from http_api.app import build_app  # noqa: PLC0415
    from tests.unit.test_openapi import NoService  # noqa: PLC0415 (its stand-in service)

    return build_app(NoService())


def test_tokens_verify_under_the_same_secret_only() -> None:
    signer = TokenSigner(b"s" * 32)
    claims = signer.verify(signer.issue(USER_KIND, "alice", 7, 60))
    assert (claims.kind, claims.name, claims.revision) == (USER_KIND, "alice", 7)
    assert signer.verify(signer.member_token("n1")).kind == MEMBER_KIND
    other = TokenSigner(b"t" * 32).issue(USER_KIND, "alice", 7, 60)
    for bad in (other, "rkv1.x.y", "nonsense", signer.issue(USER_KIND, "a", 1, 60) + "A"):
        with pytest.raises(Unauthenticated) as refused:
            signer.verify(bad)
        assert refused.value.code == "invalid_token"
    with pytest.raises(Unauthenticated) as expired:
        signer.verify(signer.issue(USER_KIND, "alice", 7, -1))
    assert expired.value.code == "token_expired"


def test_failed_logins_are_counted_per_user_and_address_and_per_address() -> None:
    now = [1000.0]
    limits = FailedLogins(per_user=2, per_address=3, clock=lambda: now[0])
    for _ in range(2):
        limits.check("u", "a")
        limits.failed("u", "a")
    with pytest.raises(LimitReached) as held:
        limits.check("u", "a")
    assert held.value.code == "too_many_failed_logins" and held.value.retry_after == WINDOW_SECONDS
    limits.check("u", "b")  # another address: not held
    limits.check("v", "a")  # another user from it: one failure left for the address
    limits.failed("v", "a")
    with pytest.raises(LimitReached):
        limits.check("w", "a")  # the address is at its limit whatever the user
    now[0] += WINDOW_SECONDS + 1
    limits.check("u", "a")  # a minute later


def test_password_hashes_are_salted_and_verify() -> None:
    first, second = hash_password("pw"), hash_password("pw")
    assert first != second and first.startswith("scrypt$32768$8$3$")
    assert verify_password("pw", first) and not verify_password("pW", first)
    assert not verify_password("pw", "scrypt$garbage")


def test_reading_alarms_needs_read_on_their_prefix_and_disarming_needs_admin() -> None:
    from aiohttp.test_utils import make_mocked_request  # noqa: PLC0415

    from http_api.permissions import authorize, need_of  # noqa: PLC0415
    from node.errors import PermissionDenied  # noqa: PLC0415
    from node.service.auth import Principal  # noqa: PLC0415
    from node.state.auth_records import Permission, PermissionKind  # noqa: PLC0415

    request = make_mocked_request("GET", "/v1/alarms")
    everything = Principal("reader", (Permission(PermissionKind.READ, b"", is_prefix=True),))
    app_only = Principal("app", (Permission(PermissionKind.READWRITE, b"app/", is_prefix=True),))
    admin = Principal("root", (Permission(PermissionKind.ADMIN),))
    listing, disarming = need_of("GET", "/v1/alarms"), need_of("POST", "/v1/alarms:disarm")
    authorize(listing, everything, request)
    with pytest.raises(PermissionDenied, match="alarms"):
        authorize(listing, app_only, request)
    authorize(listing, admin, request)
    authorize(disarming, admin, request)
    for principal in (everything, app_only):
        with pytest.raises(PermissionDenied, match="admin"):
            authorize(disarming, principal, request)
