"""`rkv certs create`: a CA, node and client certificates, written as a user runs it."""

from __future__ import annotations

import ipaddress
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from node.cli.main import main


def load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def common_name(cert: x509.Certificate) -> str:
    return str(cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)


def create(out: Path, *extra: str) -> int:
    return main(["certs", "create", "--out", str(out), *extra])


def test_writes_a_ca_node_and_client_certificates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "certs"
    code = create(out, "--hosts", "db.example,10.1.2.3", "--nodes", "n0,n1", "--client", "alice")
    assert code == 0
    printed = capsys.readouterr().out
    names = ["ca", "n0", "n1", "alice"]
    for name in names:
        assert f"{out / name}.crt" in printed and f"{out / name}.key" in printed
        assert stat.S_IMODE((out / f"{name}.key").stat().st_mode) == 0o600
        assert load(out / f"{name}.crt")  # PEM certificates
    ca = load(out / "ca.crt")
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    node = load(out / "n0.crt")
    assert common_name(node) == "n0"
    assert node.issuer == ca.subject
    ca_key = ca.public_key()
    assert isinstance(ca_key, ec.EllipticCurvePublicKey)
    node.verify_directly_issued_by(ca)
    sans = node.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(sans.get_values_for_type(x509.DNSName)) == {"db.example", "localhost"}
    assert set(sans.get_values_for_type(x509.IPAddress)) == {
        ipaddress.ip_address("10.1.2.3"),
        ipaddress.ip_address("127.0.0.1"),
        ipaddress.ip_address("::1"),
    }
    usages = node.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert set(usages) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    client = load(out / "alice.crt")
    assert common_name(client) == "alice"
    client.verify_directly_issued_by(ca)
    client_usages = client.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(client_usages) == [ExtendedKeyUsageOID.CLIENT_AUTH]


def test_refuses_to_overwrite_unless_forced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "certs"
    assert create(out, "--hosts", "127.0.0.1", "--nodes", "n0") == 0
    before = (out / "ca.crt").read_bytes()
    capsys.readouterr()
    assert create(out, "--hosts", "127.0.0.1", "--nodes", "n0") == 1
    assert "already exist" in capsys.readouterr().err
    assert (out / "ca.crt").read_bytes() == before
    assert create(out, "--hosts", "127.0.0.1", "--nodes", "n0", "--force") == 0
    assert (out / "ca.crt").read_bytes() != before
    assert stat.S_IMODE((out / "n0.key").stat().st_mode) == 0o600


def test_adds_a_node_signed_by_the_existing_ca(tmp_path: Path) -> None:
    out = tmp_path / "certs"
    assert create(out, "--hosts", "127.0.0.1", "--nodes", "n0") == 0
    ca = (out / "ca.crt").read_bytes()
    assert create(out, "--hosts", "127.0.0.1", "--nodes", "n3", "--use-existing-ca") == 0
    assert (out / "ca.crt").read_bytes() == ca
    load(out / "n3.crt").verify_directly_issued_by(load(out / "ca.crt"))


@pytest.mark.parametrize(
    "argv",
    [
        ["--hosts", "bad host"],
        ["--hosts", "127.0.0.1", "--nodes", "../escape"],
        ["--hosts", "127.0.0.1", "--nodes", "n0", "--client", "n0"],
        ["--hosts", "127.0.0.1", "--nodes", "ca"],
    ],
)
def test_refuses_unusable_names_before_writing(
    tmp_path: Path, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "certs"
    assert create(out, *argv) == 1
    assert "rkv certs create:" in capsys.readouterr().err
    assert not out.exists() or not any(out.iterdir())
