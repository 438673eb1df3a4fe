"""Auth AND TLS on, real processes: the Python client's management calls, and each client
that comes with rkv working with a user holding just the permissions
docs/OPERATIONS.md says it needs (and refused, naming the permission, without
them): an exactly-once producer, `rkv redis-replicate` against a real
redis-server, `rkv audit`, and a node joining the cluster.

The cluster is set up with the CLI over HTTPS, as the docs say (auth is off at
first, so the management calls are open). The node that joins comes last: it
changes the cluster's membership.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from http_api.client import (
    AsyncRkvClient,
    AuthenticationError,
    ConflictError,
    Credentials,
    InvalidRequestError,
    NotFoundError,
    Permission,
    PermissionDeniedError,
    RkvClient,
    User,
)
from tests.redis.conftest import run_redis_server
from tests.redis.replica_support import Replicator
from tests.support.cluster import ClusterTls, LocalCluster, Response, http, wait_until
from tests.support.rkv_cli import CliResult, rkv

pytestmark = pytest.mark.timeout(400)

ROOT_PW = "root-tls-pw"
TOKEN_TTL = 2


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


class Secured:
    """The cluster, its CA, and a password file per user."""

    def __init__(self, cluster: LocalCluster, directory: Path) -> None:
        self.cluster = cluster
        self.directory = directory
        self.ca = str(cluster.ca_file)

    @property
    def url(self) -> str:
        return ",".join(n.url for n in self.cluster.nodes)

    def password_file(self, user: str, password: str | None = None) -> str:
        path = self.directory / f"{user}.pw"
        path.write_text((password or f"{user}-pw") + "\n")
        return str(path)

    def login(self, user: str) -> list[str]:
        """--cacert and --user flags for ``user`` (password ``<user>-pw``, root's ROOT_PW)."""
        password = ROOT_PW if user == "root" else None
        return [
            "--cacert",
            self.ca,
            "--user",
            user,
            "--password-file",
            self.password_file(user, password),
        ]

    def cli(self, *args: str, user: str | None = None, stdin: str | None = None) -> CliResult:
        login = self.login(user) if user else ["--cacert", self.ca]
        return rkv(*args, "--url", self.url, *login, stdin=stdin)

    def credentials(self, user: str | None = None, password: str | None = None) -> Credentials:
        if user is None:
            return Credentials(cafile=self.ca)
        return Credentials(cafile=self.ca, user=user, password=password or f"{user}-pw")

    def client(self, user: str | None = None, **kwargs: object) -> RkvClient:
        password = ROOT_PW if user == "root" else None
        return RkvClient(
            [n.url for n in self.cluster.nodes],
            credentials=self.credentials(user, password),
            **kwargs,  # type: ignore[arg-type]
        )


def ok(result: CliResult) -> str:
    assert result.code == 0, result.both
    return result.out


def add_user(secured: Secured, name: str, *roles: str) -> None:
    flags = [arg for role in roles for arg in ("--role", role)]
    ok(
        secured.cli(
            "user",
            "add",
            name,
            *flags,
            "--new-password-file",
            secured.password_file(name),
            user="root",
        )
    )


def grant(secured: Secured, role: str, *target: str, permission: str) -> None:
    ok(secured.cli("role", "grant", role, *target, "--permission", permission, user="root"))


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    base = tmp_path_factory.mktemp("auth-tls")
    cluster = LocalCluster(
        base / "cluster", tls=ClusterTls(), extra_args=["--auth-token-ttl", str(TOKEN_TTL)]
    )
    try:
        cluster.start()
        found = Secured(cluster, base)
        root_pw = found.password_file("root", ROOT_PW)
        ok(found.cli("user", "add", "root", "--role", "root", "--new-password-file", root_pw))
        ok(found.cli("auth", "enable"))
        cluster.use_headers(basic("root", ROOT_PW))
        yield found
    except (AssertionError, TimeoutError) as error:
        raise AssertionError(f"{error}\n{cluster.logs()}") from error
    finally:
        cluster.stop()


# -- the Python client's management calls ---------------------------------------------------


def test_the_client_manages_users_and_roles(secured: Secured) -> None:
    with secured.client("root") as root:
        assert root.auth_status().enabled is True
        first = root.role_add("api")
        assert root.role_grant("api", permission="readwrite", prefix="api/") > first
        root.role_grant("api", permission="read", key=b"conf\xff")
        root.role_grant("api", permission="read", checkpoint="redis:api/")
        root.user_add("api-user", "api-user-pw", roles=["api"])
        assert root.user("api-user") == User("api-user", ("api",))
        assert User("root", ("root",)) in root.users()
        role = root.role("api")
        assert role.permissions == (
            Permission("readwrite", prefix=b"api/"),
            Permission("read", key=b"conf\xff"),
            Permission("read", checkpoint="redis:api/"),
        )
        assert [r.name for r in root.roles()][:1] == ["root"]
        assert root.roles()[0].built_in

        with pytest.raises(ConflictError) as conflict:
            root.user_add("api-user", "x")
        assert conflict.value.code == "user_exists" and conflict.value.status == 409
        with pytest.raises(NotFoundError) as missing:
            root.role("nope")
        assert missing.value.code == "role_not_found"
        with pytest.raises(InvalidRequestError):
            root.user_add("a:b", "x")
        with pytest.raises(ConflictError, match="root"):
            root.user_delete("root")

    with secured.client("api-user") as user:
        user.put("api/a", "1")
        assert user.get("api/a").value == b"1"
        with pytest.raises(PermissionDeniedError) as denied:
            user.put("other/a", "1")
        assert "api-user needs write on key 'other/a'" in str(denied.value)
        with pytest.raises(PermissionDeniedError, match="needs admin"):
            user.users()
    wrong = RkvClient(
        secured.cluster.nodes[0].url, credentials=secured.credentials("api-user", "bad")
    )
    with wrong, pytest.raises(AuthenticationError) as failed:
        wrong.get("api/a")
    assert failed.value.code == "invalid_credentials" and failed.value.status == 401

    with secured.client("root") as root:
        root.role_revoke("api", prefix="api/")
        root.user_revoke_role("api-user", "api")
        root.user_grant_role("api-user", "api")
        root.user_passwd("api-user", "api-user-pw-2")
        assert root.role("api").permissions == (
            Permission("read", key=b"conf\xff"),
            Permission("read", checkpoint="redis:api/"),
        )
        root.user_delete("api-user")
        root.role_delete("api")
        assert "api" not in [r.name for r in root.roles()]


def test_the_async_client_manages_users_and_tokens(secured: Secured) -> None:
    urls = [n.url for n in secured.cluster.nodes]

    async def scenario() -> tuple[str, bytes]:
        async with AsyncRkvClient(urls, credentials=secured.credentials("root", ROOT_PW)) as root:
            await root.role_add("async-rw")
            await root.role_grant("async-rw", permission="readwrite", prefix="async/")
            await root.user_add("async-user", "async-user-pw", ["async-rw"])
            assert (await root.user("async-user")).roles == ("async-rw",)
        async with AsyncRkvClient(urls, credentials=secured.credentials()) as anonymous:
            token = await anonymous.token("async-user", "async-user-pw")
        credentials = Credentials(cafile=secured.ca, token=token)
        async with AsyncRkvClient(urls, credentials=credentials) as user:
            await user.put("async/k", "v")
            value = (await user.get("async/k")).value
            try:
                await user.put("nope/k", "v")
            except PermissionDeniedError as denied:
                assert "needs write on key 'nope/k'" in str(denied)
            else:
                raise AssertionError("a write outside the prefix was accepted")
        return token, value

    token, value = asyncio.run(scenario())
    assert value == b"v" and token


# -- the clients that come with rkv, each with just what it needs --------------------------


def test_an_exactly_once_producer_under_its_prefix(secured: Secured) -> None:
    ok(secured.cli("role", "add", "orders-rw", user="root"))
    grant(secured, "orders-rw", "--prefix", "orders/", permission="readwrite")
    add_user(secured, "orders", "orders-rw")
    add_user(secured, "nobody")

    with secured.client("orders") as client:
        producer = client.producer("orders-feed")
        assert producer.put("orders/1", "a") > 0
        assert producer.incr("orders/count", 5) == 5
        # Resent with the same sequence (as after a lost answer): applied once.
        again = client.resume_producer(producer.producer_id, producer.epoch, 1)
        assert again.incr("orders/count", 5) == 5 and again.last_was_duplicate
        assert client.get("orders/count").value == b"5"
        with pytest.raises(PermissionDeniedError) as denied:
            producer.put("billing/1", "x")
        assert "orders needs write on key 'billing/1'" in str(denied.value)

    # Any user may register a producer; its writes need the keys' permission.
    with secured.client("nobody") as client:
        stranger = client.producer()
        with pytest.raises(PermissionDeniedError, match="nobody needs write on key 'orders/2'"):
            stranger.put("orders/2", "x")


def test_the_redis_replicator_into_its_prefix_with_its_checkpoint(
    secured: Secured, tmp_path: Path
) -> None:
    ok(secured.cli("role", "add", "redis-repl", user="root"))
    grant(secured, "redis-repl", "--prefix", "cache/", permission="readwrite")
    grant(secured, "redis-repl", "--checkpoint", "redis:cache/", permission="readwrite")
    grant(secured, "redis-repl", "--lock", "redis-replicate:cache", permission="readwrite")
    add_user(secured, "replicator", "redis-repl")
    add_user(secured, "half")  # the prefix, then its lock, never the checkpoint
    ok(secured.cli("role", "add", "prefix-only", user="root"))
    grant(secured, "prefix-only", "--prefix", "cache/", permission="readwrite")
    ok(secured.cli("user", "grant-role", "half", "prefix-only", user="root"))

    with run_redis_server(tmp_path / "redis") as server:
        with server.client() as redis:
            redis.execute("SET", "greeting", "hello")
            redis.execute("HSET", "h", "f", "v")

        def replicator(user: str, log: str) -> Replicator:
            running = Replicator(
                server,
                secured.cluster,
                tmp_path / log,
                "--prefix",
                "cache/",
                *secured.login(user),
            )
            running.start()
            return running

        def refused(log: str) -> str:
            running = replicator("half", log)
            try:
                code = running.wait(60)
            finally:
                running.stop()
            assert code != 0
            output = running.output()
            assert "Traceback" not in output
            return output

        # The prefix's lock (every replicator of it campaigns: docs/REDIS.md), then
        # the checkpoint.
        output = refused("half-1.log")
        assert "half needs read on key '\\x00rkv/locks/redis-replicate:cache'" in output, output
        grant(secured, "prefix-only", "--lock", "redis-replicate:cache", permission="readwrite")
        output = refused("half-2.log")
        assert "half needs" in output and "checkpoint" in output, output[-2000:]

        running = replicator("replicator", "replicator.log")
        try:

            def dumped() -> set[str] | None:
                keys = _dumped_keys(secured)
                return keys if keys == {"greeting", "h"} else None

            wait_until(dumped, 60, "the replicated keys in redis-dump")
            with server.client() as redis:
                redis.execute("SET", "later", "x")
            wait_until(lambda: _dumped_keys(secured) >= {"later"}, 60, "a streamed command")
            assert running.process is not None and running.process.poll() is None
        finally:
            running.stop()
        assert "Traceback" not in running.output()
        # Its user reaches nothing else.
        with secured.client("replicator") as client, pytest.raises(PermissionDeniedError):
            client.put("orders/x", "1")


def _dumped_keys(secured: Secured) -> set[str]:
    """The keys `rkv redis-dump` shows, run as the replicator's user."""
    result = rkv(
        "redis-dump", "--url", secured.url, "--prefix", "cache/", *secured.login("replicator")
    )
    if result.code != 0:
        return set()
    return {json.loads(line)["key"] for line in result.out.splitlines() if line}


def test_the_audit_with_an_admin_user(secured: Secured, tmp_path: Path) -> None:
    ok(secured.cli("role", "add", "auditor", user="root"))
    grant(secured, "auditor", permission="admin")
    add_user(secured, "auditor", "auditor")
    add_user(secured, "reader")
    audit = secured.cli("audit", "--engine", "python", "--out", str(tmp_path / "a"), user="auditor")
    assert audit.code == 0, audit.both
    assert list((tmp_path / "a" / "exports").glob("*/n*/manifest.json"))
    refused = secured.cli(
        "audit", "--engine", "python", "--out", str(tmp_path / "b"), user="reader"
    )
    assert refused.code == 4, refused.both  # the audit's "could not run" (1 is "divergent")
    assert "reader needs admin" in refused.err and "Traceback" not in refused.err


def test_a_token_expires_and_a_new_one_works(secured: Secured) -> None:
    add_user(secured, "short", "orders-rw")
    token = ok(secured.cli("auth", "token", user="short")).strip()
    ok(rkv("put", "orders/t", "1", "--url", secured.url, "--cacert", secured.ca, "--token", token))
    time.sleep(TOKEN_TTL + 0.5)  # let it expire: the refusal is what is asserted
    expired = rkv("get", "orders/t", "--url", secured.url, "--cacert", secured.ca, "--token", token)
    assert expired.code == 1 and "[token_expired]" in expired.err, expired.both
    token = ok(secured.cli("auth", "token", user="short")).strip()
    got = rkv("get", "orders/t", "--url", secured.url, "--cacert", secured.ca, "--token", token)
    assert got.code == 0 and got.out == "1"


def test_a_node_joins_with_auth_and_tls_on(secured: Secured) -> None:
    """Last: the cluster gains a member."""
    cluster = secured.cluster
    with secured.client("root") as root:
        last = root.put("join/k", "v")
    joined = cluster.add_node("n3", cluster.nodes[0].url)
    joined.headers = basic("root", ROOT_PW)
    cluster.wait_ready(timeout=90, nodes=[joined])
    members = ok(secured.cli("cluster", "members", user="root"))
    assert joined.url in members
    target = f"{joined.url}/v1/kv/join/k?consistency=stale&min_version={last}"

    def served() -> Response | None:
        read = http("GET", target, headers=basic("root", ROOT_PW))
        return read if read.status == 200 else None

    read = wait_until(served, 60, "the new member to serve the data")
    assert read.body == b"v"
    # It enforces auth like the others.
    assert http("GET", f"{joined.url}/v1/kv/join/k?consistency=stale").status == 401
    log = joined.log_path.read_text(errors="replace")
    assert "Traceback" not in log
