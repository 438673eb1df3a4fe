"""A node's TLS flags (node/cli/tls_settings.py through node/cli/settings.py): HTTPS on
the port, the advertised https:// URL, what calls to members present, and the mistakes
refused at start-up with a message naming the flag."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from node.cli.cert_authority import CertificatePlan, create_certificates
from node.cli.settings import NodeConfig, add_node_arguments, node_config
from node.errors import ConfigError

BASE = ["--id", "n0", "--data-dir", "/tmp/x", "--raft-listen", "127.0.0.1:9001"]
SECRET = {"RKV_CLUSTER_SECRET": "s" * 32}


def parse(argv: list[str], env: dict[str, str] | None = None) -> NodeConfig:
    parser = argparse.ArgumentParser()
    add_node_arguments(parser)
    return node_config(parser.parse_args([*BASE, *argv]), {**SECRET, **(env or {})})


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = Path(tmp_path_factory.mktemp("certs"))
    create_certificates(CertificatePlan(out, ("127.0.0.1",), ("n0", "n1")))
    return out


def tls_flags(certs: Path, node: str = "n0") -> list[str]:
    return ["--tls-cert", str(certs / f"{node}.crt"), "--tls-key", str(certs / f"{node}.key")]


def test_no_tls_flags_keep_plain_http(certs: Path) -> None:
    config = parse([])
    assert config.tls.server is None
    assert config.advertise_url == "http://127.0.0.1:8001"
    assert config.tls.peer_credentials.ssl_context() is None


def test_tls_serves_https_and_presents_the_node_certificate_to_members(certs: Path) -> None:
    config = parse(
        [*tls_flags(certs), "--tls-client-ca", str(certs / "ca.crt"), "--listen", "0.0.0.0:8443"],
        {"RKV_TLS_CA": str(certs / "ca.crt"), "RKV_TLS_HANDSHAKE_TIMEOUT": "3"},
    )
    assert config.tls.server is not None
    assert config.tls.server.client_cafile == certs / "ca.crt"
    assert config.tls.server.handshake_timeout == 3.0
    assert config.advertise_url == "https://0.0.0.0:8443"
    peers = config.tls.peer_credentials
    assert (peers.cafile, peers.certfile) == (str(certs / "ca.crt"), str(certs / "n0.crt"))
    explicit = parse([*tls_flags(certs), "--advertise-url", "https://n0.example:8443/"])
    assert explicit.advertise_url == "https://n0.example:8443"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--tls-cert", "{certs}/n0.crt"], "go together"),
        (["--tls-client-ca", "{certs}/ca.crt"], "--tls-client-ca needs"),
        (["--tls-cert", "{certs}/n0.crt", "--tls-key", "{certs}/n1.key"], "cannot use them"),
        (["--tls-cert", "{certs}/missing.crt", "--tls-key", "{certs}/n0.key"], "missing.crt"),
        (["--tls-ca", "{certs}/n0.key"], "--tls-ca"),
        (["{tls}", "--advertise-url", "http://127.0.0.1:8001"], "https://"),
        (["{tls}", "--tls-handshake-timeout", "0"], "--tls-handshake-timeout"),
    ],
)
def test_mistakes_are_refused_at_start_up(certs: Path, argv: list[str], message: str) -> None:
    expanded: list[str] = []
    for arg in argv:
        if arg == "{tls}":
            expanded += tls_flags(certs)
        else:
            expanded.append(arg.format(certs=certs))
    with pytest.raises(ConfigError, match=message):
        parse(expanded)
