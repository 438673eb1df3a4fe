"""The snapshot commands: save a node's snapshot to a file, restore one into a data dir.

`rkv snapshot save FILE` and `rkv snapshot restore FILE --data-dir DIR`: their
arguments and handlers. Each returns an exit status and prints one line, never a traceback:
0 done; 1 refused (a bad or truncated file, a non-empty data directory, the
server refused, a local file error); 2 a bad option value; 3 the node could
not be reached or the download broke off. Messages read ``rkv snapshot save:
...`` / ``rkv snapshot restore: ...`` (rename _SAVE/_RESTORE if the parser
names the commands differently).
"""

from __future__ import annotations

import argparse
import http.client
import os
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from http_api.client.control import HttpStatusError, open_stream, snapshot_url
from http_api.client.credentials import Credentials
from node.cli.common import (
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    default_url,
    default_url_help,
    positive_float,
    positive_int,
)
from node.cli.credential_flags import add_credentials_arguments, credentials_from
from node.errors import ConfigError, SnapshotFormatError, StorageError
from node.keyspace import DEFAULT_MAX_VALUE_BYTES
from node.snapshot.file import SnapshotHeader, restore_snapshot, verify_snapshot
from node.storage.config import FsyncPolicy, StorageConfig
from node.storage.datadir import fsync_directory

_SAVE = "snapshot save"
_RESTORE = "snapshot restore"
_CHUNK = 1024 * 1024
_PROGRESS_SECONDS = 2.0


class _Failed(Exception):
    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def _say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _complain(text: str, command: str) -> None:
    sys.stderr.write(f"rkv {command}: {text}\n")
    sys.stderr.flush()


class _Ticker:
    """Prints a progress line to stderr at most every 2 s."""

    def __init__(self) -> None:
        self._last = time.monotonic()

    def __call__(self, text: str) -> None:
        now = time.monotonic()
        if now - self._last >= _PROGRESS_SECONDS:
            self._last = now
            sys.stderr.write(text + "\n")
            sys.stderr.flush()


def _download(source: str, target: Path, timeout: float, credentials: Credentials | None) -> int:
    """Stream ``source`` into ``target``; returns the bytes received."""
    tick = _Ticker()
    received = 0
    with ExitStack() as stack:
        try:
            response = stack.enter_context(open_stream(source, timeout, credentials=credentials))
        except HttpStatusError as error:
            raise _Failed(f"{source} refused: {error.describe()}", EXIT_REFUSED) from None
        except (OSError, ValueError) as error:
            raise _Failed(f"cannot reach {source}: {error}", EXIT_UNREACHABLE) from None
        out = stack.enter_context(open(target, "wb"))
        expected = response.getheader("Content-Length")
        while True:
            try:
                chunk = response.read(_CHUNK)
            except (OSError, http.client.HTTPException) as error:
                raise _Failed(
                    f"the download from {source} broke off after {received} bytes: "
                    f"{error or type(error).__name__}",
                    EXIT_UNREACHABLE,
                ) from None
            if not chunk:
                break
            out.write(chunk)
            received += len(chunk)
            tick(f"downloading snapshot: {received / 2**20:.1f} MiB")
        out.flush()
        os.fsync(out.fileno())
    if expected is not None and expected.isdigit() and int(expected) != received:
        raise _Failed(
            f"the download from {source} is incomplete: {received} of {expected} bytes",
            EXIT_UNREACHABLE,
        )
    return received


def save_snapshot(
    url: str, path: Path, timeout: float = 600.0, credentials: Credentials | None = None
) -> int:
    """Download a node's snapshot (``GET /v1/snapshot``) to ``path``.

    The file goes to a temporary name beside ``path``, is verified whole
    (format, every record's CRC-32, the SHA-256), and only then renamed to
    ``path`` (replacing a file there). ``timeout`` bounds each network wait; the
    first one lasts as long as the node takes to write its whole export.
    """
    source = snapshot_url(url)
    if path.is_dir():
        _complain(f"{path} is a directory: give the snapshot's file name", _SAVE)
        return EXIT_REFUSED
    directory = path.parent
    try:
        fd, name = tempfile.mkstemp(dir=directory, prefix=f".{path.name}.", suffix=".partial")
    except OSError as error:
        _complain(f"cannot write into {directory}: {error.strerror or error}", _SAVE)
        return EXIT_REFUSED
    os.close(fd)
    partial = Path(name)
    try:
        size = _download(source, partial, timeout, credentials)
        header = verify_snapshot(partial)
        os.replace(partial, path)
        fsync_directory(directory)
    except _Failed as failure:
        _complain(str(failure), _SAVE)
        return failure.status
    except SnapshotFormatError as error:
        _complain(f"the snapshot downloaded from {source} is not valid: {error.reason}", _SAVE)
        return EXIT_REFUSED
    except OSError as error:
        _complain(f"cannot write {path}: {error.strerror or error}", _SAVE)
        return EXIT_REFUSED
    finally:
        partial.unlink(missing_ok=True)
    _say(
        f"saved snapshot of {header.record_count} keys at raft index {header.applied_index} "
        f"(offset {header.applied_offset}) from {source} to {path} ({_mib(size)})"
    )
    return EXIT_OK


def restore_snapshot_command(
    path: Path,
    data_dir: Path,
    *,
    keep_raft_index: bool = False,
    max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES,
) -> int:
    """Seed the new, empty ``data_dir`` from the snapshot file ``path``.

    By default the restored node starts a NEW cluster (its raft index restarts
    at 0; start it with no --peer, or with new members that have no data).
    ``keep_raft_index`` keeps the snapshot's raft index, for rebuilding a lost
    member of the same cluster in place (same --id and addresses, no raft/
    directory). ``max_value_bytes`` must be the cluster's --max-value-bytes.
    """
    if not path.is_file():
        _complain(f"{path} is not a file", _RESTORE)
        return EXIT_REFUSED
    tick = _Ticker()

    def progress(phase: str, done: int, total: int) -> None:
        tick(f"restoring snapshot: {phase}: {done} of {total} records")

    try:
        config = StorageConfig(fsync=FsyncPolicy.ON_SYNC, max_value_bytes=max_value_bytes)
        result = restore_snapshot(
            path, data_dir, config=config, keep_raft_index=keep_raft_index, progress=progress
        )
    except ConfigError as error:
        _complain(str(error), _RESTORE)
        return EXIT_USAGE
    except (SnapshotFormatError, StorageError) as error:
        _complain(str(error), _RESTORE)
        return EXIT_REFUSED
    except OSError as error:
        _complain(f"cannot restore into {data_dir}: {error.strerror or error}", _RESTORE)
        return EXIT_REFUSED
    header: SnapshotHeader = result.header
    mode = (
        f"raft index {result.raft_index} kept (rejoin the same cluster)"
        if keep_raft_index
        else "raft index reset for a new cluster"
    )
    _say(
        f"restored {header.record_count} keys at offset {header.applied_offset} from {path} "
        f"into {data_dir} in {result.seconds:.1f}s ({mode})"
    )
    return EXIT_OK


def _mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB" if size >= 2**20 else f"{size} bytes"


def add_commands(sub: Any) -> None:
    snapshot = sub.add_parser("snapshot", help="save a node's consistent export, or restore one")
    snapshot.set_defaults(run=run)
    actions = snapshot.add_subparsers(dest="snapshot_command", required=True)
    save = actions.add_parser("save", help="download GET /v1/snapshot from a node to FILE")
    save.add_argument("file", type=Path)
    save.add_argument("--url", default=None, help=f"the node (default: {default_url_help()})")
    save.add_argument("--timeout", type=positive_float, default=600.0)
    add_credentials_arguments(save)
    restore = actions.add_parser(
        "restore", help="seed a new, empty data directory from a snapshot FILE"
    )
    restore.add_argument("file", type=Path)
    restore.add_argument("--data-dir", type=Path, required=True)
    restore.add_argument(
        "--keep-raft-index",
        action="store_true",
        help="rebuild a lost member of the same cluster in place (default: a new cluster)",
    )
    restore.add_argument("--max-value-bytes", type=positive_int, default=None)


def run(args: argparse.Namespace) -> int:
    if args.snapshot_command == "save":
        url = args.url or default_url()
        try:
            credentials = credentials_from(args)
        except ValueError as exc:
            _complain(str(exc), _SAVE)
            return EXIT_USAGE
        return save_snapshot(url, args.file, timeout=args.timeout, credentials=credentials)
    options = {} if args.max_value_bytes is None else {"max_value_bytes": args.max_value_bytes}
    return restore_snapshot_command(
        args.file, args.data_dir, keep_raft_index=args.keep_raft_index, **options
    )
