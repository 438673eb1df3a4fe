"""A certificate authority for a dev or compose cluster, made with `cryptography`.

:func:`create_certificates` writes a CA (ca.crt, ca.key), one certificate per
node (<node>.crt, <node>.key) naming every given host as a subjectAltName (DNS
names and IP addresses; 127.0.0.1, ::1 and localhost always), usable as a TLS
server and as a client (a node presents it when it calls another member of a
mutual-TLS cluster), and client certificates (<name>.crt, <name>.key) whose
subject CN is the user name a node sees under mutual TLS. Keys are ECDSA P-256
(a handshake costs the node's event loop far less than RSA), written 0600.
Nothing is overwritten unless asked. No openssl command line is involved.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DEFAULT_DAYS = 825  # what browsers accept for a server certificate; a CA lives 10 years
CA_DAYS = 3650
ALWAYS_HOSTS = ("localhost", "127.0.0.1", "::1")
CA_NAME = "ca"


class CertificateError(Exception):
    """A request that cannot be made (a file in the way, a bad host or name)."""


@dataclass(frozen=True, slots=True)
class CertificatePlan:
    """What :func:`create_certificates` makes."""

    out: Path
    hosts: tuple[str, ...]
    nodes: tuple[str, ...] = ("node",)
    clients: tuple[str, ...] = ()
    days: int = DEFAULT_DAYS
    force: bool = False


def _name_problem(name: str) -> str | None:
    if not name or name in (".", "..") or "/" in name or "\x00" in name:
        return f"{name!r} cannot name a file"
    if name == CA_NAME:
        return f"{name!r} is the CA's file name"
    return None


def subject_alt_names(hosts: Sequence[str]) -> list[x509.GeneralName]:
    """Each host as an IP address or a DNS name, the loopback names added, no repeats."""
    names: list[x509.GeneralName] = []
    seen: set[str] = set()
    for given in [*hosts, *ALWAYS_HOSTS]:
        host = given.strip().strip("[]")
        if not host or host.lower() in seen:
            continue
        seen.add(host.lower())
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            if any(c.isspace() or c in "/:@" for c in host):
                raise CertificateError(
                    f"{given!r} is neither a host name nor an IP address"
                ) from None
            names.append(x509.DNSName(host))
    return names


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _subject(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "rkv"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _builder(
    subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePrivateKey, days: int
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))  # clocks a little apart
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
    )


def make_ca() -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _new_key()
    name = _subject("rkv CA")
    cert = (
        _builder(name, name, key, CA_DAYS)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return cert, key


def make_leaf(
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    common_name: str,
    days: int,
    hosts: Sequence[str] | None = None,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A certificate signed by the CA: with ``hosts``, a node's (server and client),
    else a client's."""
    key = _new_key()
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
    if hosts is not None:
        usages.insert(0, ExtendedKeyUsageOID.SERVER_AUTH)
    ca_ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    builder = (
        _builder(_subject(common_name), ca_cert.subject, key, days)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), False
        )
    )
    if hosts is not None:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(subject_alt_names(hosts)), critical=False
        )
    return builder.sign(ca_key, hashes.SHA256()), key


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _write(path: Path, data: bytes, mode: int, force: bool) -> None:
    """Write ``data`` with ``mode`` from the start (a key is never readable by others,
    not even for a moment)."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if force else os.O_EXCL)
    fd = os.open(path, flags, mode)
    try:
        os.fchmod(fd, mode)
        os.write(fd, data)
    finally:
        os.close(fd)


def _load_ca(out: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None:
    cert_path, key_path = out / f"{CA_NAME}.crt", out / f"{CA_NAME}.key"
    if not cert_path.exists() or not key_path.exists():
        return None
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise CertificateError(f"{key_path} is not a key this tool made")
    return cert, key


def planned_files(plan: CertificatePlan) -> list[Path]:
    """The files the plan writes, CA first."""
    names = [CA_NAME, *plan.nodes, *plan.clients]
    return [plan.out / f"{name}.{ext}" for name in names for ext in ("crt", "key")]


def create_certificates(plan: CertificatePlan, *, reuse_ca: bool = False) -> list[Path]:
    """Write the CA and the certificates of ``plan``; returns the files written.

    With ``reuse_ca`` an existing ca.crt/ca.key in ``plan.out`` signs the new
    certificates (to add a node or a client later). Raises CertificateError when a
    file exists (without ``force``) or a name or host is unusable."""
    for name in [*plan.nodes, *plan.clients]:
        if problem := _name_problem(name):
            raise CertificateError(problem)
    names = [*plan.nodes, *plan.clients]
    if len(set(names)) != len(names):
        raise CertificateError("a node or client name is given twice")
    if plan.days < 1:
        raise CertificateError("--days must be at least 1")
    subject_alt_names(plan.hosts)  # refuse a bad host before writing anything
    existing = _load_ca(plan.out) if reuse_ca else None
    files = planned_files(plan)
    if existing is not None:
        files = files[2:]
    in_the_way = [p for p in files if p.exists()]
    if in_the_way and not plan.force:
        raise CertificateError(
            f"{', '.join(str(p) for p in in_the_way)} already exist(s); --force overwrites"
        )
    plan.out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    if existing is None:
        ca_cert, ca_key = make_ca()
        _write(plan.out / f"{CA_NAME}.crt", _pem(ca_cert), 0o644, plan.force)
        _write(plan.out / f"{CA_NAME}.key", _key_pem(ca_key), 0o600, plan.force)
        written += [plan.out / f"{CA_NAME}.crt", plan.out / f"{CA_NAME}.key"]
    else:
        ca_cert, ca_key = existing
    for name in plan.nodes:
        cert, key = make_leaf(ca_cert, ca_key, name, plan.days, plan.hosts)
        written += _write_pair(plan, name, cert, key)
    for name in plan.clients:
        cert, key = make_leaf(ca_cert, ca_key, name, plan.days)
        written += _write_pair(plan, name, cert, key)
    return written


def _write_pair(
    plan: CertificatePlan, name: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey
) -> list[Path]:
    cert_path, key_path = plan.out / f"{name}.crt", plan.out / f"{name}.key"
    _write(cert_path, _pem(cert), 0o644, plan.force)
    _write(key_path, _key_pem(key), 0o600, plan.force)
    return [cert_path, key_path]
