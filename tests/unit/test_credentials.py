"""One Credentials value: the Authorization header, the client TLS context, and how the
CLI's flags and RKV_* variables make it."""

from __future__ import annotations

import base64
import ssl
from pathlib import Path

import pytest

from http_api.client import Credentials
from node.cli.cert_authority import CertificatePlan, create_certificates
from node.cli.credential_flags import credentials_from
from node.cli.main import build_parser


def test_basic_for_a_user_bearer_for_a_token_nothing_without() -> None:
    basic = Credentials(user="bob", password="s3cret:x")
    assert basic.authorization() == "Basic " + base64.b64encode(b"bob:s3cret:x").decode()
    assert Credentials(token="abc.def").headers() == {"Authorization": "Bearer abc.def"}
    assert Credentials().headers() == {}
    assert Credentials().ssl_context() is None


def test_the_repr_hides_the_password_and_the_token() -> None:
    shown = repr(Credentials(user="bob", password="hunter2")) + repr(Credentials(token="tok-9"))
    assert "bob" in shown
    assert "hunter2" not in shown and "tok-9" not in shown


@pytest.mark.parametrize(
    "fields",
    [
        {"user": "bob", "password": "p", "token": "t"},
        {"password": "p"},
        {"user": "bob"},
        {"user": "a:b", "password": "p"},
        {"keyfile": "k.pem"},
        {"token": "  "},
    ],
)
def test_combinations_that_cannot_be_sent_are_refused(fields: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        Credentials(**fields)


def test_the_tls_context_verifies_and_presents_the_client_certificate(tmp_path: Path) -> None:
    create_certificates(CertificatePlan(tmp_path, ("127.0.0.1",), ("n0",), ("alice",)))
    context = Credentials(
        cafile=str(tmp_path / "ca.crt"),
        certfile=str(tmp_path / "alice.crt"),
        keyfile=str(tmp_path / "alice.key"),
    ).ssl_context()
    assert context is not None
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert context.minimum_version >= ssl.TLSVersion.TLSv1_2
    assert len(context.get_ca_certs()) == 1


def parsed(*argv: str) -> object:
    return build_parser().parse_args(["get", "k", *argv])


def from_cli(*argv: str, env: dict[str, str] | None = None, **kwargs: object) -> Credentials:
    return credentials_from(parsed(*argv), env or {}, **kwargs)  # type: ignore[arg-type]


def test_cli_user_with_password_password_file_variable_or_prompt(tmp_path: Path) -> None:
    assert from_cli("--user", "bob:pw:with:colons").password == "pw:with:colons"
    secret = tmp_path / "pw"
    secret.write_text("from-file\nignored\n")
    assert from_cli("--user", "bob", "--password-file", str(secret)).password == "from-file"
    assert from_cli("--user", "bob", env={"RKV_PASSWORD": "env-pw"}).password == "env-pw"
    asked: list[str] = []

    def ask(prompt: str) -> str:
        asked.append(prompt)
        return "typed"

    typed = from_cli("--user", "bob", ask=ask, interactive=True)
    assert (typed.user, typed.password, asked) == ("bob", "typed", ["password for bob: "])
    with pytest.raises(ValueError, match="no terminal"):
        from_cli("--user", "bob", interactive=False)


def test_cli_variables_fill_in_and_flags_win(tmp_path: Path) -> None:
    env = {"RKV_USER": "env-user", "RKV_PASSWORD": "p", "RKV_CACERT": str(tmp_path / "x")}
    create_certificates(CertificatePlan(tmp_path, ("127.0.0.1",), ("n0",)))
    env["RKV_CACERT"] = str(tmp_path / "ca.crt")
    from_env = from_cli(env=env)
    assert (from_env.user, from_env.cafile) == ("env-user", str(tmp_path / "ca.crt"))
    flagged = from_cli("--token", "tok", env=env)
    assert (flagged.user, flagged.token) == (None, "tok")
    assert from_cli(env={"RKV_TOKEN": "t2"}).token == "t2"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--user", "bob:pw", "--token", "t"], "not both"),
        (["--password-file", "/nonexistent"], "needs --user"),
        (["--user", "bob", "--password-file", "/nonexistent/pw"], "cannot read"),
        (["--cacert", "/nonexistent/ca.crt"], "/nonexistent/ca.crt"),
        (["--key", "k.pem"], "--cert"),
        (["--user", ":pw"], "needs a name"),
    ],
)
def test_cli_mistakes_are_one_clear_line(argv: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message) as caught:
        from_cli(*argv, interactive=False)
    assert "\n" not in str(caught.value)
    assert "bob:pw" not in str(caught.value)


def test_a_certificate_that_is_not_pem_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "ca.crt"
    bad.write_text("not a certificate")
    with pytest.raises(ValueError, match="not usable"):
        from_cli("--cacert", str(bad))
