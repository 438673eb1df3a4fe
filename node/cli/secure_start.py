"""Secure by default: auth from the first start, and no open port beyond loopback.

- ``--root-password-file FILE`` (RKV_ROOT_PASSWORD_FILE): when this node leads a
  cluster that never set auth up (auth revision 0), it proposes once the user
  ``root`` (role ``root``) with the file's first line as password and enables
  auth in the same entry (node/service/auth_bootstrap.py). The file is read at
  start-up and refused if group or others may read or write it; its content
  is never logged.
- A node whose ``--listen`` host is not loopback refuses to start without TLS
  (``--tls-cert``/``--tls-key``) and auth (enabled in its own state, or
  ``--root-password-file``), unless ``--insecure-no-auth``
  (RKV_INSECURE_NO_AUTH=1) is given, which is logged as a warning at start and
  shown in ``/v1/status``.

The checks run in two steps: the flags in node/cli/settings.py (through
:func:`start_security`), the node's own auth state once its storage is open
(:func:`auth_state_problem`, called by node/cli/wiring.py). Both raise or
return the same kind of message, naming what is missing.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import stat
from dataclasses import dataclass, field

from node.errors import ConfigError
from node.service.passwords import MAX_PASSWORD_CHARS


@dataclass(frozen=True, slots=True)
class StartSecurity:
    """What the node was given to secure its HTTP port, and where that port listens."""

    root_password: str | None = field(default=None, repr=False)  # never in a log line
    insecure_no_auth: bool = False
    loopback: bool = True
    """The HTTP port listens on loopback only."""
    tls: bool = False


def add_security_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add(
        "--root-password-file",
        metavar="FILE",
        help="on a cluster that never set auth up, the leader creates the user root (role "
        "root) with this file's first line as password and enables auth, once; the file "
        "must not be readable by group or others (RKV_ROOT_PASSWORD_FILE)",
    )
    add(
        "--insecure-no-auth",
        action="store_true",
        default=None,
        help="serve a non-loopback --listen address without TLS or auth: anyone who "
        "reaches the port can read, write and delete every key (RKV_INSECURE_NO_AUTH=1)",
    )


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or a name) is this machine's loopback only."""
    if host in ("localhost", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def read_root_password(path: str) -> str:
    """The first line of ``path``; raises ConfigError (never quoting the content)."""
    flag = f"--root-password-file {path}"
    try:
        with open(path, "rb") as f:
            mode = os.fstat(f.fileno()).st_mode
            if not stat.S_ISREG(mode):
                raise ConfigError(f"{flag}: not a regular file")
            if mode & 0o077:
                raise ConfigError(
                    f"{flag}: group or others may read or write it (mode "
                    f"{stat.S_IMODE(mode):04o}): chmod 600 it"
                )
            first = f.readline(4 * MAX_PASSWORD_CHARS + 2)
    except OSError as exc:
        raise ConfigError(f"{flag}: cannot read it: {exc.strerror}") from None
    try:
        password = first.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError:
        raise ConfigError(f"{flag}: not UTF-8 text") from None
    if not password:
        raise ConfigError(f"{flag}: the first line is empty")
    if len(password) > MAX_PASSWORD_CHARS:
        raise ConfigError(f"{flag}: a password is at most {MAX_PASSWORD_CHARS} characters")
    return password


_HOW = (
    "give --tls-cert/--tls-key and --root-password-file (auth from the first start), "
    "bind --listen to 127.0.0.1, or pass --insecure-no-auth (RKV_INSECURE_NO_AUTH=1) "
    "to serve it open anyway"
)


def start_security(
    host: str, tls: bool, root_password_file: str | None, insecure_no_auth: bool
) -> StartSecurity:
    """The flags' part of the check; raises ConfigError naming what is missing."""
    security = StartSecurity(
        root_password=None if not root_password_file else read_root_password(root_password_file),
        insecure_no_auth=insecure_no_auth,
        loopback=is_loopback(host),
        tls=tls,
    )
    if security.loopback or insecure_no_auth or tls:
        return security
    missing = "TLS (--tls-cert and --tls-key)"
    if security.root_password is None:
        missing += " and auth (--root-password-file, unless auth is enabled in its state)"
    raise ConfigError(
        f"--listen {host} is not loopback, and a node serving beyond loopback needs TLS "
        f"and auth; missing: {missing}. To start: {_HOW}"
    )


def auth_state_problem(security: StartSecurity, enabled: bool, revision: int) -> str | None:
    """The check that needs the node's own auth state (``enabled`` and ``revision`` as
    its storage holds them): why it must not start, or None."""
    if security.loopback or security.insecure_no_auth or enabled:
        return None
    if security.root_password is None:
        return (
            "--listen is not loopback and auth is not enabled in this node's state; "
            f"missing: auth (--root-password-file). To start: {_HOW}"
        )
    if revision != 0:
        return (
            "--listen is not loopback and auth was set up in this cluster but is disabled "
            f"(auth revision {revision}): --root-password-file never enables it again. "
            "Start with --insecure-no-auth, POST /v1/auth/enable as an admin, then restart "
            "without it"
        )
    return None


def insecure_warning(security: StartSecurity, auth_enabled: bool) -> str | None:
    """What /v1/status and the start-up log say while the port is open beyond loopback."""
    if security.loopback or (security.tls and auth_enabled):
        return None
    off = [name for name, on in (("TLS", security.tls), ("auth", auth_enabled)) if not on]
    flag = " (--insecure-no-auth)" if security.insecure_no_auth else ""
    return (
        f"INSECURE: HTTP listens beyond loopback with {' and '.join(off)} off{flag}: "
        "anyone who reaches the port can read, write and delete every key"
    )
