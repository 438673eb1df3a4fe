"""`rkv auth`, `rkv user` and `rkv role` against real node processes: an operator sets
auth up with the CLI alone (docs/OPERATIONS.md, Security), then every refusal is one
clear line and the documented exit status (1 refused, 2 usage, 3 unreachable)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cluster import LocalCluster
from tests.support.rkv_cli import CliResult, rkv

pytestmark = pytest.mark.timeout(300)

ROOT_PW = "root-secret-1"
ALICE_PW = "alice-secret-1"


class Cli:
    """`rkv` aimed at one cluster, with password files for its users."""

    def __init__(self, cluster: LocalCluster, directory: Path) -> None:
        self.url = ",".join(n.url for n in cluster.nodes)
        self.directory = directory

    def password_file(self, name: str, password: str) -> str:
        path = self.directory / f"{name}.pw"
        path.write_text(password + "\n")
        path.chmod(0o600)
        return str(path)

    def __call__(self, *args: str, stdin: str | None = None) -> CliResult:
        return rkv(*args, "--url", self.url, stdin=stdin)

    def as_root(self, *args: str) -> CliResult:
        return self(*args, "--user", "root", "--password-file", self.password_file("root", ROOT_PW))


def ok(result: CliResult) -> str:
    assert result.code == 0, result.both
    assert "Traceback" not in result.both
    return result.out


def refused(result: CliResult, *fragments: str, code: int = 1) -> str:
    """The command failed with ``code`` and one line on stderr holding ``fragments``."""
    assert result.code == code, result.both
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    assert result.out == ""
    return lines[0]


@pytest.fixture(scope="module")
def cli(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cli]:
    base = tmp_path_factory.mktemp("auth-cli")
    cluster = LocalCluster(
        base / "cluster",
        extra_args=["--max-failed-logins", "3", "--max-failed-logins-per-address", "1000"],
    )
    try:
        cluster.start()
        yield Cli(cluster, base)
    finally:
        cluster.stop()


def test_an_operator_turns_auth_on_with_the_cli(cli: Cli) -> None:
    assert ok(cli("auth", "status")).startswith("authentication disabled")
    # Enabling before root exists is refused, and says what is missing.
    refused(cli("auth", "enable"), "root", "[root_required]")

    root_pw = cli.password_file("root", ROOT_PW)
    added = cli("user", "add", "root", "--role", "root", "--new-password-file", root_pw)
    assert "user root added" in ok(added)
    ok(cli("role", "add", "app-rw"))
    ok(cli("role", "grant", "app-rw", "--prefix", "app/", "--permission", "readwrite"))
    ok(cli("role", "grant", "app-rw", "--exact", "shared/config", "--permission", "read"))
    ok(cli("role", "grant", "app-rw", "--checkpoint", "redis:app/", "--permission", "readwrite"))
    # The password from stdin: never in argv.
    ok(cli("user", "add", "alice", "--role", "app-rw", "--new-password-file", "-", stdin=ALICE_PW))
    ok(cli("user", "add", "bob", "--new-password-file", cli.password_file("bob", "bob-pw")))
    assert "authentication enabled" in ok(cli("auth", "enable"))

    # From now on: credentials.
    line = refused(cli("auth", "status"), "[unauthenticated]", "--user")
    assert ROOT_PW not in line
    assert ok(cli.as_root("auth", "status")).startswith("authentication enabled")
    users = ok(cli.as_root("user", "list")).splitlines()
    assert users == ["alice\tapp-rw", "bob\t", "root\troot"]
    listed = json.loads(ok(cli.as_root("user", "list", "--json")))
    assert {"name": "alice", "roles": ["app-rw"]} in listed["users"]
    assert ROOT_PW not in json.dumps(listed) and ALICE_PW not in json.dumps(listed)
    role = json.loads(ok(cli.as_root("role", "get", "app-rw", "--json")))
    assert role["permissions"] == [
        {"permission": "readwrite", "prefix": "app/"},
        {"permission": "read", "key": "shared/config"},
        {"permission": "readwrite", "checkpoint": "redis:app/"},
    ]
    shown = ok(cli.as_root("role", "get", "app-rw")).splitlines()
    assert shown[0] == "app-rw" and "\treadwrite\tprefix\tapp/" in shown
    names = [line for line in ok(cli.as_root("role", "list")).splitlines() if line[:1] != "\t"]
    assert names == ["root\t(built in)", "app-rw"]


def test_a_token_for_scripts_and_what_it_allows(cli: Cli) -> None:
    alice_pw = cli.password_file("alice", ALICE_PW)
    token = ok(cli("auth", "token", "--user", "alice", "--password-file", alice_pw)).strip()
    assert token and ALICE_PW not in token
    assert ok(cli("put", "app/x", "1", "--token", token)).strip().isdigit()
    line = refused(cli("put", "other/x", "1", "--token", token), "[permission_denied]")
    assert "alice needs write on key 'other/x'" in line
    # A user who is no admin cannot manage users: 403 naming the permission.
    line = refused(
        cli("user", "list", "--token", token), "alice needs admin", "[permission_denied]"
    )
    assert token not in line
    bob_pw = cli.password_file("bob", "bob-pw")
    refused(cli("auth", "token", "--user", "alice:wrong"), "[invalid_credentials]")
    refused(cli("auth", "token", "--token", token), "--user", code=2)
    refused(cli("put", "app/y", "1", "--user", "bob", "--password-file", bob_pw), "bob needs write")


def test_users_and_roles_change_and_refusals_are_clear(cli: Cli) -> None:
    refused(
        cli.as_root("user", "add", "alice", "--new-password-file", cli.password_file("a", "x")),
        "[user_exists]",
    )
    refused(cli.as_root("user", "delete", "root"), "[root_required]")
    refused(cli.as_root("role", "get", "nope"), "[role_not_found]")
    refused(cli.as_root("user", "grant-role", "bob", "nope"), "[role_not_found]")
    refused(cli.as_root("role", "add", "root"), "[root_role_built_in]")
    refused(cli.as_root("user", "add", "carol"), "--new-password-file", code=2)
    refused(cli.as_root("role", "grant", "app-rw", "--permission", "read"), "--prefix", code=2)

    # bob gets the role, then loses it.
    bob = ("--user", "bob", "--password-file", cli.password_file("bob", "bob-pw"))
    ok(cli.as_root("user", "grant-role", "bob", "app-rw"))
    assert ok(cli.as_root("user", "get", "bob")) == "bob\tapp-rw\n"
    ok(cli("put", "app/bob", "1", *bob))
    ok(cli.as_root("user", "revoke-role", "bob", "app-rw"))
    refused(cli("put", "app/bob", "2", *bob), "bob needs write")

    # A new password: the old one and tokens made with it stop working.
    token = ok(cli("auth", "token", *bob)).strip()
    new = cli.password_file("bob-new", "bob-pw-2")
    ok(cli.as_root("user", "passwd", "bob", "--new-password-file", new))
    refused(cli("auth", "status", *bob), "[invalid_credentials]")
    refused(cli("auth", "status", "--token", token), "[invalid_token]")
    assert "enabled" in ok(cli("auth", "status", "--user", "bob", "--password-file", new))

    # Revoking and deleting.
    ok(cli.as_root("role", "revoke", "app-rw", "--exact", "shared/config"))
    refused(
        cli.as_root("role", "revoke", "app-rw", "--exact", "shared/config"),
        "[permission_not_granted]",
    )
    role = json.loads(ok(cli.as_root("role", "get", "app-rw", "--json")))
    assert {"permission": "read", "key": "shared/config"} not in role["permissions"]
    ok(cli.as_root("role", "add", "ops"))
    ok(cli.as_root("role", "grant", "ops", "--permission", "admin"))
    ok(cli.as_root("user", "grant-role", "bob", "ops"))
    bob_new = ("--user", "bob", "--password-file", new)
    ok(cli("user", "list", *bob_new))
    ok(cli.as_root("role", "revoke", "ops", "--admin"))
    refused(cli("user", "list", *bob_new), "bob needs admin")
    ok(cli.as_root("role", "delete", "ops"))
    assert ok(cli.as_root("user", "get", "bob")) == "bob\t\n"
    ok(cli.as_root("user", "delete", "bob"))
    refused(cli.as_root("user", "get", "bob"), "[user_not_found]")
    refused(cli("auth", "status", *bob_new), "[invalid_credentials]")


def test_unreachable_is_exit_3(cli: Cli) -> None:
    result = rkv("user", "list", "--url", "http://127.0.0.1:9", "--user", "root:" + ROOT_PW)
    refused(result, "unreach", code=3)
    assert ROOT_PW not in result.err


def test_too_many_failed_logins_then_disable(cli: Cli) -> None:
    """Last: it leaves a name locked out of this address for a minute."""
    for _ in range(3):  # --max-failed-logins 3
        refused(cli("auth", "token", "--user", "mallory:guess"), "[invalid_credentials]")
    line = refused(cli("auth", "token", "--user", "mallory:guess"), "[too_many_failed_logins]")
    assert "retry in" in line
    refused(cli("auth", "status", "--user", "mallory:guess"), "[too_many_failed_logins]")
    # Others are not held back; turning auth off opens everything again.
    assert "authentication disabled" in ok(cli.as_root("auth", "disable"))
    assert ok(cli("auth", "status")).startswith("authentication disabled")
    ok(cli("put", "other/x", "1"))
