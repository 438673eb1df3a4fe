"""`rkv certs create`: a CA and node and client certificates for a dev or compose cluster.

The certificates are made by node/cli/cert_authority.py (the `cryptography`
package, no openssl command). Exit status: 0 written, 1 refused (a file in the
way without --force, a bad host or name), 2 usage error.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from node.cli.common import EXIT_REFUSED, EXIT_USAGE, positive_int

DEFAULT_DAYS = 825  # node/cli/cert_authority.py DEFAULT_DAYS (imported only when it runs)


def _names(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def add_commands(sub: Any) -> None:
    certs = sub.add_parser("certs", help="make TLS certificates for a dev or compose cluster")
    actions = certs.add_subparsers(dest="certs_command", required=True)
    create = actions.add_parser(
        "create",
        help="write a CA, one certificate per node and client certificates into a directory",
        description="Writes ca.crt and ca.key, then <node>.crt/.key per node (server and "
        "client use; every --hosts entry, 127.0.0.1, ::1 and localhost as subjectAltNames) "
        "and <name>.crt/.key per --client (its CN is the user a node sees under mutual "
        "TLS). Keys are ECDSA P-256, written 0600. Nodes take --tls-cert <node>.crt "
        "--tls-key <node>.key --tls-ca ca.crt (and --tls-client-ca ca.crt for mutual "
        "TLS); clients --cacert ca.crt.",
        epilog="exit status: 0 written, 1 refused (files in the way, a bad host), 2 usage",
    )
    create.add_argument("--out", type=Path, required=True, metavar="DIR", help="where to write")
    create.add_argument(
        "--hosts",
        required=True,
        metavar="HOST[,HOST...]",
        help="the DNS names and IP addresses clients and members reach the nodes by",
    )
    create.add_argument(
        "--nodes",
        default="node",
        metavar="ID[,ID...]",
        help="one certificate per node, named by its id (default: one, 'node')",
    )
    create.add_argument(
        "--client",
        dest="clients",
        action="append",
        default=[],
        metavar="NAME",
        help="a client certificate whose CN is NAME; repeat it (or separate with commas)",
    )
    create.add_argument(
        "--days",
        type=positive_int,
        default=DEFAULT_DAYS,
        help=f"validity of the node and client certificates (default {DEFAULT_DAYS})",
    )
    create.add_argument(
        "--use-existing-ca",
        action="store_true",
        help="sign with ca.crt/ca.key already in --out (to add a node or a client later)",
    )
    create.add_argument("--force", action="store_true", help="overwrite files already there")
    create.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    # cryptography loads only when certificates are made, not for every rkv command.
    from node.cli.cert_authority import (  # noqa: PLC0415
        CertificateError,
        CertificatePlan,
        create_certificates,
    )

    hosts = _names(args.hosts)
    nodes = _names(args.nodes)
    clients = [name for text in args.clients for name in _names(text)]
    if not hosts:
        print("rkv certs create: --hosts names no host", file=sys.stderr)
        return EXIT_USAGE
    if not nodes and not clients:
        print("rkv certs create: --nodes and --client name nothing to make", file=sys.stderr)
        return EXIT_USAGE
    plan = CertificatePlan(
        args.out, tuple(hosts), tuple(nodes), tuple(clients), args.days, args.force
    )
    try:
        written = create_certificates(plan, reuse_ca=args.use_existing_ca)
    except CertificateError as exc:
        print(f"rkv certs create: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    except OSError as exc:
        print(f"rkv certs create: cannot write {exc.filename}: {exc.strerror}", file=sys.stderr)
        return EXIT_REFUSED
    for path in written:
        kind = "key, 0600" if path.suffix == ".key" else "certificate"
        print(f"wrote {path} ({kind})")
    return 0
