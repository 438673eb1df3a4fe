"""`rkv lock NAME [--ttl S] [--timeout S] -- COMMAND...`: run COMMAND while holding
lock NAME (docs/LEASES.md, "Locks").

The lock is held under a lease of ``--ttl`` seconds that rkv keeps alive
while the command runs. The command gets ``RKV_LOCK_NAME``,
``RKV_LOCK_TOKEN`` (the fencing token), ``RKV_LOCK_LEASE`` and
``RKV_FENCING`` (``NAME=TOKEN``, what ``rkv put --fencing`` and the
``Rkv-Fencing`` header take) in its environment. When it exits, the lease is
revoked, which releases the lock.

Exit status: the command's (128+N when a signal N ended it); 2 when the lock
was not had within ``--timeout`` (or a usage error); 3 when the lock was lost
while the command ran (rkv says so, stops the command with SIGTERM, and with
SIGKILL after ``--kill-after`` seconds), or the cluster could not be reached;
1 when the server refused (a permission, a bad name); 126/127 when the
command cannot be run. Ctrl-C reaches the command directly (it is in the same
process group); SIGTERM and SIGHUP sent to rkv are passed on to it.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from types import FrameType
from typing import Any

from http_api.client import (
    HeldLock,
    LeaseLost,
    LockHeldError,
    LockLost,
    RkvClient,
    RkvClientError,
)
from node.cli.common import EXIT_USAGE, add_urls_argument, node_urls, positive_float, positive_int
from node.cli.credential_flags import add_credentials_arguments, credentials_from
from node.cli.holding import EXIT_LOST, STOP_SIGNALS, Stopped, stop_on_signals
from node.cli.management import refusal

EXIT_NOT_ACQUIRED = 2
POLL = 0.1  # seconds between looks at the command and at the lease
EPILOG = (
    "exit status: the command's; 2 the lock was not had within --timeout (or a usage "
    "error); 3 the lock was lost while the command ran (it is stopped) or the cluster "
    "is unreachable; 1 refused by the server; 126/127 the command cannot be run"
)


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError("must be 0 or more")
    return value


def _options(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument(
        "--ttl", type=positive_int, default=10, help="seconds of the lock's lease (default 10)"
    )
    parser.add_argument(
        "--timeout",
        type=non_negative_float,
        metavar="S",
        help="give up (exit 2) when the lock is not had within S seconds (default: wait)",
    )
    parser.add_argument(
        "--kill-after",
        type=positive_float,
        default=10.0,
        metavar="S",
        help="when the lock is lost: SIGKILL the command S seconds after SIGTERM (default 10)",
    )
    parser.add_argument(
        "--request-timeout",
        type=positive_float,
        default=10.0,
        metavar="S",
        help="seconds per request (default 10)",
    )
    add_urls_argument(parser)
    add_credentials_arguments(parser)
    return parser


def add_commands(sub: Any) -> None:
    parser = sub.add_parser(
        "lock",
        help="run a command while holding a lock (its fencing token in RKV_FENCING)",
        usage="rkv lock [OPTIONS] NAME [OPTIONS] -- COMMAND [ARG...]",
        epilog=EPILOG,
    )
    parser.add_argument("name", help="the lock: 1-200 of A-Z a-z 0-9 . _ : / @ -")
    parser.add_argument(
        "argv", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARG...]", help="the command"
    )
    _options(parser)
    parser.set_defaults(run=run)


def _command(args: argparse.Namespace) -> list[str]:
    """The command after ``--``; options between NAME and ``--`` are parsed into
    ``args`` (argparse leaves them to the remainder)."""
    rest: list[str] = list(args.argv)
    if rest and rest[0].startswith("-") and rest[0] != "--":
        cut = rest.index("--") if "--" in rest else len(rest)
        options = argparse.ArgumentParser(prog=f"rkv lock {args.name}", add_help=False)
        _options(options).parse_args(rest[:cut], namespace=args)
        rest = rest[cut:]
    return rest[1:] if rest[:1] == ["--"] else rest


def _environment(held: HeldLock) -> dict[str, str]:
    return {
        **os.environ,
        "RKV_LOCK_NAME": held.name,
        "RKV_LOCK_TOKEN": str(held.token),
        "RKV_LOCK_LEASE": str(held.lease_id),
        "RKV_FENCING": held.fencing.header(),
    }


def _status(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def _supervise(where: str, held: HeldLock, command: list[str], kill_after: float) -> int:
    """Run the command while the lock is held; its exit status, or 3 if the lock is lost."""
    try:
        child = subprocess.Popen(command, env=_environment(held))
    except OSError as exc:
        print(f"{where}: cannot run {command[0]}: {exc.strerror or exc}", file=sys.stderr)
        return 127 if isinstance(exc, FileNotFoundError) else 126

    def forward(signum: int, frame: FrameType | None) -> None:
        if child.poll() is None:
            child.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in STOP_SIGNALS}
    # Ctrl-C reaches the command from the terminal: rkv waits for it to end.
    previous[signal.SIGINT] = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        while True:
            try:
                return _status(child.wait(POLL))
            except subprocess.TimeoutExpired:
                pass
            if held.lost.is_set():
                reason = held.lease.reason
                print(
                    f"{where}: the lock was lost ({reason.message if reason else 'lease lost'}); "
                    "stopping the command (SIGTERM)",
                    file=sys.stderr,
                )
                child.terminate()
                try:
                    child.wait(kill_after)
                except subprocess.TimeoutExpired:
                    print(f"{where}: the command is still running: SIGKILL", file=sys.stderr)
                    child.kill()
                    child.wait()
                return EXIT_LOST
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run(args: argparse.Namespace) -> int:
    where = f"rkv lock {args.name}"
    command = _command(args)
    if not command:
        print(
            f"{where}: give the command to run: rkv lock NAME -- COMMAND [ARG...]", file=sys.stderr
        )
        return EXIT_USAGE
    try:
        urls = node_urls(args.url)
        credentials = credentials_from(args)
        with (
            RkvClient(urls, timeout=args.request_timeout, credentials=credentials) as client,
            stop_on_signals(),  # while waiting: stop, and revoke the lease on the way out
        ):
            lock = client.lock(args.name, ttl=args.ttl, timeout=args.timeout)
            with lock as held:
                status = _supervise(where, held, command, args.kill_after)
            return status
    except LockHeldError as exc:
        holder = "" if exc.token is None else f" (held with token {exc.token})"
        waited = "" if args.timeout is None else f" within {args.timeout:g}s"
        print(f"{where}: the lock was not had{waited}{holder}", file=sys.stderr)
        return EXIT_NOT_ACQUIRED
    except LockLost as exc:
        print(f"{where}: {exc.message}", file=sys.stderr)
        return EXIT_LOST
    except LeaseLost as exc:
        print(f"{where}: the lock's lease was lost while waiting: {exc.message}", file=sys.stderr)
        return EXIT_LOST
    except RkvClientError as exc:
        return refusal(where, exc)
    except ValueError as exc:
        print(f"{where}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"{where}: interrupted", file=sys.stderr)
        return 130
    except Stopped as stopped:
        print(f"{where}: stopped ({stopped})", file=sys.stderr)
        return 128 + stopped.signum
