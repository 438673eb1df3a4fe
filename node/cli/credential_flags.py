"""The flags every command that talks to a node takes: TLS trust and who the user is.

``--cacert FILE`` (the CA that signed the nodes' certificates), ``--cert FILE``
and ``--key FILE`` (a client certificate, for mutual TLS), ``--user
NAME[:PASSWORD]`` with ``--password-file FILE``, or ``--token TOKEN``; each
also reads RKV_CACERT, RKV_CERT, RKV_KEY, RKV_USER, RKV_PASSWORD, RKV_TOKEN
(a flag wins; a user or token given by flag ignores both variables). A user
without a password is asked for one on the terminal, never echoed; without a
terminal the command fails with a message saying how to give it.

:func:`credentials_from` turns them into one
:class:`http_api.client.credentials.Credentials`; it raises ValueError with
a one-line message for anything unusable (the commands exit 2 with it).
"""

from __future__ import annotations

import argparse
import getpass
import os
import ssl
import sys
from collections.abc import Callable, Mapping
from typing import Any

from http_api.client.credentials import Credentials

ENV = {
    "cacert": "RKV_CACERT",
    "cert": "RKV_CERT",
    "key": "RKV_KEY",
    "user": "RKV_USER",
    "password": "RKV_PASSWORD",
    "token": "RKV_TOKEN",
}


def add_credentials_arguments(parser: Any) -> None:
    """The flags, in their own help group. Their dests start with ``cred_`` (a command
    may have a positional ``key``); absent flags leave no attribute (``SUPPRESS``), so
    a subcommand never overwrites what its parent parsed."""
    group = parser.add_argument_group("TLS and credentials")
    add = group.add_argument
    quiet = argparse.SUPPRESS
    add(
        "--cacert",
        dest="cred_cacert",
        metavar="FILE",
        default=quiet,
        help="verify https:// nodes against this CA certificate (RKV_CACERT; default: "
        "the system's CAs)",
    )
    add(
        "--cert",
        dest="cred_cert",
        metavar="FILE",
        default=quiet,
        help="present this client certificate (mutual TLS; its CN names the user) (RKV_CERT)",
    )
    add(
        "--key",
        dest="cred_key",
        metavar="FILE",
        default=quiet,
        help="the private key of --cert (RKV_KEY)",
    )
    add(
        "--user",
        dest="cred_user",
        metavar="NAME[:PASSWORD]",
        default=quiet,
        help="authenticate as NAME (HTTP Basic); without :PASSWORD it comes from "
        "--password-file, RKV_PASSWORD, or is asked on the terminal (RKV_USER)",
    )
    add(
        "--password-file",
        dest="cred_password_file",
        metavar="FILE",
        default=quiet,
        help="file holding --user's password (its first line)",
    )
    add(
        "--token",
        dest="cred_token",
        metavar="TOKEN",
        default=quiet,
        help="authenticate with this bearer token instead of a user (RKV_TOKEN)",
    )


def _read_password(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            line = f.readline()
    except OSError as exc:
        raise ValueError(f"--password-file {path}: cannot read it: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ValueError(f"--password-file {path}: not UTF-8 text") from None
    password = line.rstrip("\r\n")
    if not password:
        raise ValueError(f"--password-file {path}: the first line is empty")
    return password


def _identity(
    args: argparse.Namespace,
    env: Mapping[str, str],
    ask: Callable[[str], str],
    interactive: bool,
) -> tuple[str | None, str | None, str | None]:
    """(user, password, token)."""
    flag_user, flag_token = getattr(args, "cred_user", None), getattr(args, "cred_token", None)
    password_file = getattr(args, "cred_password_file", None)
    if flag_user is not None or flag_token is not None:
        user_text, token = flag_user, flag_token
    else:
        user_text, token = env.get(ENV["user"]) or None, env.get(ENV["token"]) or None
    if user_text is not None and token is not None:
        raise ValueError("give --user or --token (RKV_USER, RKV_TOKEN), not both")
    if user_text is None:
        if password_file is not None:
            raise ValueError("--password-file needs --user")
        return None, None, token
    name, sep, password = user_text.partition(":")
    if not name:
        raise ValueError("--user needs a name: --user NAME[:PASSWORD]")
    if sep and password_file is not None:
        raise ValueError("give the password in --user NAME:PASSWORD or --password-file, not both")
    if not sep:
        if password_file is not None:
            password = _read_password(password_file)
        elif env.get(ENV["password"]):
            password = env[ENV["password"]]
        elif interactive:
            password = ask(f"password for {name}: ")
        else:
            raise ValueError(
                f"--user {name} needs a password: --user {name}:PASSWORD, --password-file "
                "FILE or RKV_PASSWORD (no terminal to ask on)"
            )
    return name, password, None


def credentials_from(
    args: argparse.Namespace,
    env: Mapping[str, str] | None = None,
    ask: Callable[[str], str] = getpass.getpass,
    interactive: bool | None = None,
) -> Credentials:
    """The command's credentials from its flags and RKV_* variables. Raises ValueError
    (a message for the user, the secret never in it)."""
    env = os.environ if env is None else env
    if interactive is None:
        interactive = sys.stdin is not None and sys.stdin.isatty()
    cafile = getattr(args, "cred_cacert", None) or env.get(ENV["cacert"]) or None
    certfile = getattr(args, "cred_cert", None) or env.get(ENV["cert"]) or None
    keyfile = getattr(args, "cred_key", None) or env.get(ENV["key"]) or None
    user, password, token = _identity(args, env, ask, interactive)
    try:
        credentials = Credentials(cafile, certfile, keyfile, user, password, token)
    except ValueError as exc:
        raise ValueError(str(exc).replace("certfile", "--cert")) from None
    try:
        credentials.ssl_context()  # read the files now: one clear message, before any call
    except ssl.SSLError as exc:
        raise ValueError(
            f"the TLS files (--cacert, --cert, --key) are not usable: {exc.reason or exc}"
        ) from None
    except OSError as exc:
        raise ValueError(
            f"cannot read the TLS files (--cacert, --cert, --key): {exc.strerror or exc} "
            f"({exc.filename or cafile or certfile})"
        ) from None
    return credentials
