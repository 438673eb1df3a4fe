"""Secure by default, the flags' part (node/cli/secure_start.py through node/cli/settings.py):
--root-password-file is read and checked at start-up, a non-loopback --listen needs TLS
and auth or --insecure-no-auth, and the decisions that need the node's auth state.
The same refusals on real node processes: tests/cluster/test_secure_start.py."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from node.cli.cert_authority import CertificatePlan, create_certificates
from node.cli.secure_start import StartSecurity, auth_state_problem, insecure_warning
from node.cli.settings import NodeConfig, add_node_arguments, node_config
from node.errors import ConfigError
from node.service.passwords import MAX_PASSWORD_CHARS

BASE = ["--id", "n0", "--data-dir", "/tmp/x", "--raft-listen", "127.0.0.1:9001"]
SECRET = {"RKV_CLUSTER_SECRET": "s" * 32}
PASSWORD = "pä ss:word with spaces"


def parse(argv: list[str], env: dict[str, str] | None = None) -> NodeConfig:
    parser = argparse.ArgumentParser()
    add_node_arguments(parser)
    return node_config(parser.parse_args([*BASE, *argv]), {**SECRET, **(env or {})})


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    out = Path(tmp_path_factory.mktemp("certs"))
    create_certificates(CertificatePlan(out, ("127.0.0.1",), ("n0",)))
    return ["--tls-cert", str(out / "n0.crt"), "--tls-key", str(out / "n0.key")]


def password_file(
    tmp_path: Path, text: str = PASSWORD + "\nsecond line\n", mode: int = 0o600
) -> str:
    path = tmp_path / "root.password"
    path.write_text(text, encoding="utf-8")
    path.chmod(mode)
    return str(path)


def test_the_root_password_is_the_first_line_and_never_shown(tmp_path: Path) -> None:
    config = parse(["--root-password-file", password_file(tmp_path)])
    assert config.security.root_password == PASSWORD
    assert PASSWORD not in repr(config) and PASSWORD not in repr(config.security)
    by_env = parse([], {"RKV_ROOT_PASSWORD_FILE": password_file(tmp_path)})
    assert by_env.security.root_password == PASSWORD


@pytest.mark.parametrize(
    ("text", "mode", "message"),
    [
        (PASSWORD, 0o640, "group or others may read or write it \\(mode 0640\\): chmod 600"),
        (PASSWORD, 0o604, "mode 0604"),
        ("\nsecret", 0o600, "the first line is empty"),
        ("x" * (MAX_PASSWORD_CHARS + 1), 0o600, f"at most {MAX_PASSWORD_CHARS} characters"),
    ],
)
def test_a_root_password_file_it_cannot_trust_is_refused(
    tmp_path: Path, text: str, mode: int, message: str
) -> None:
    path = password_file(tmp_path, text, mode)
    with pytest.raises(ConfigError, match=message) as refused:
        parse(["--root-password-file", path])
    assert "--root-password-file" in str(refused.value) and "secret" not in str(refused.value)


def test_a_missing_or_binary_root_password_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read it"):
        parse(["--root-password-file", str(tmp_path / "absent")])
    binary = tmp_path / "binary"
    binary.write_bytes(b"\xff\xfe\n")
    binary.chmod(0o600)
    with pytest.raises(ConfigError, match="not UTF-8"):
        parse(["--root-password-file", str(binary)])


def test_loopback_needs_nothing(tmp_path: Path) -> None:
    for listen in ("127.0.0.1:8001", "[::1]:8001", "localhost:8001", "127.9.9.9:8001"):
        assert parse(["--listen", listen]).security.loopback


def test_beyond_loopback_without_tls_names_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as refused:
        parse(["--listen", "0.0.0.0:8001"])
    message = str(refused.value)
    assert "--listen 0.0.0.0 is not loopback" in message
    assert "TLS (--tls-cert and --tls-key) and auth (--root-password-file" in message
    assert "--insecure-no-auth" in message
    with pytest.raises(ConfigError) as refused:
        parse(["--listen", "10.1.2.3:8001", "--root-password-file", password_file(tmp_path)])
    assert "missing: TLS (--tls-cert and --tls-key)." in str(refused.value)


def test_beyond_loopback_with_tls_defers_the_auth_check_to_the_node_state(
    tmp_path: Path, tls: list[str]
) -> None:
    config = parse(["--listen", "0.0.0.0:8443", *tls])
    assert not config.security.loopback and config.security.tls
    assert config.security.root_password is None


def test_insecure_no_auth_lets_it_start(tmp_path: Path) -> None:
    assert parse(["--listen", "0.0.0.0:8001", "--insecure-no-auth"]).security.insecure_no_auth
    by_env = parse(["--listen", "0.0.0.0:8001"], {"RKV_INSECURE_NO_AUTH": "1"})
    assert by_env.security.insecure_no_auth


BEYOND = StartSecurity(loopback=False, tls=True)
WITH_ROOT = StartSecurity(root_password="pw", loopback=False, tls=True)


def test_the_auth_state_check() -> None:
    # Auth enabled in the node's state: starts, with or without the file.
    assert auth_state_problem(BEYOND, enabled=True, revision=3) is None
    assert auth_state_problem(WITH_ROOT, enabled=True, revision=3) is None
    # Never set up: the file will set it up; without it, auth is missing.
    assert auth_state_problem(WITH_ROOT, enabled=False, revision=0) is None
    missing = auth_state_problem(BEYOND, enabled=False, revision=0)
    assert missing is not None and "missing: auth (--root-password-file)" in missing
    # Set up, then disabled by an operator: the file never enables it again.
    disabled = auth_state_problem(WITH_ROOT, enabled=False, revision=4)
    assert disabled is not None and "disabled (auth revision 4)" in disabled
    # Loopback, or the explicit flag: no check.
    assert auth_state_problem(StartSecurity(), enabled=False, revision=4) is None
    insecure = StartSecurity(loopback=False, insecure_no_auth=True)
    assert auth_state_problem(insecure, enabled=False, revision=0) is None


def test_the_warning_names_what_is_off() -> None:
    assert insecure_warning(StartSecurity(), auth_enabled=False) is None
    assert insecure_warning(BEYOND, auth_enabled=True) is None
    insecure = StartSecurity(loopback=False, insecure_no_auth=True)
    warning = insecure_warning(insecure, auth_enabled=False)
    assert warning is not None and "TLS and auth off (--insecure-no-auth)" in warning
    assert "auth off" in (insecure_warning(BEYOND, auth_enabled=False) or "")
