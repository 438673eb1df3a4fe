"""The pieces of the auth management calls that need no node: permissions as the
client builds and reads them, and how the CLI takes a new password."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from http_api.client import Permission, RkvClientError, Role
from http_api.client.auth_plans import revoked_target
from node.cli.management import UsageError, read_new_password


def test_a_permission_names_exactly_one_target_unless_admin() -> None:
    assert Permission.of("read", prefix="app/").to_json() == {
        "permission": "read",
        "prefix": "YXBwLw==",
    }
    assert Permission.of("readwrite", checkpoint="redis:app/").to_json() == {
        "permission": "readwrite",
        "checkpoint": "redis:app/",
    }
    assert Permission("admin").to_json() == {"permission": "admin"}
    with pytest.raises(ValueError, match="exactly one"):
        Permission.of("read")
    with pytest.raises(ValueError, match="exactly one"):
        Permission.of("read", key="a", prefix="b")
    with pytest.raises(ValueError, match="admin takes no"):
        Permission.of("admin", key="a")
    with pytest.raises(ValueError, match="one of"):
        Permission.of("all", key="a")
    with pytest.raises(ValueError, match="not both"):
        revoked_target(b"k", None, None, True)


def test_a_listed_checkpoint_permission_is_given_back_by_name() -> None:
    role = Role.from_json(
        {
            "name": "r",
            "permissions": [
                {"permission": "readwrite", "key": "AHJrdi9jaGVja3BvaW50cy9yZWRpczphcHAv"},
                {"permission": "read", "key": "/w=="},
                {"permission": "admin"},
            ],
        }
    )
    assert role.permissions == (
        Permission("readwrite", checkpoint="redis:app/"),
        Permission("read", key=b"\xff"),
        Permission("admin"),
    )
    with pytest.raises(RkvClientError, match="malformed"):
        Role.from_json({"name": "r", "permissions": [{"permission": "read"}]})


def _args(path: str | None = None) -> argparse.Namespace:
    return argparse.Namespace(new_password_file=path)


def test_a_new_password_is_asked_twice_and_never_taken_from_nowhere(tmp_path: Path) -> None:
    answers = iter(["s3cret", "s3cret"])
    assert read_new_password(_args(), "bob", lambda _: next(answers), True) == "s3cret"
    answers = iter(["s3cret", "other"])
    with pytest.raises(UsageError, match="differ") as caught:
        read_new_password(_args(), "bob", lambda _: next(answers), True)
    assert "s3cret" not in str(caught.value)
    with pytest.raises(UsageError, match="empty"):
        read_new_password(_args(), "bob", lambda _: "", True)
    with pytest.raises(UsageError, match="no terminal"):
        read_new_password(_args(), "bob", lambda _: "x", False)
    file = tmp_path / "pw"
    file.write_text("from-file\nignored\n")
    assert read_new_password(_args(str(file)), "bob", lambda _: "x", False) == "from-file"
    file.write_text("\n")
    with pytest.raises(UsageError, match="empty"):
        read_new_password(_args(str(file)), "bob")
    with pytest.raises(UsageError, match="cannot read"):
        read_new_password(_args(str(tmp_path / "missing")), "bob")
