"""Where audit exports live and what their manifests say.

For audit id A on replica N the node writes a directory ``<root>/<A>/<N>/``:

- ``bucket-00000.rkvsnap`` ...: the state in the snapshot file format
  (node/snapshot/format.py), one file per key-range bucket;
- ``log.rkvlog``: the replica's commit-log records up to the cut, in the framing
  ``GET /v1/log`` streams (node/storage/log_feed.py);
- ``manifest.json``: written last, so an export without it is incomplete
  (``error.json`` says why when the node's export failed).

The contract is node/audit/export.py's docstring.

Bucket ``i`` holds the keys ``k`` with ``split[i-1] <= k < split[i]`` in LMDB
order (byte order for keys up to 511 bytes).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spark_tools.audit_errors import UsageError

MANIFEST_NAME = "manifest.json"
ERROR_NAME = "error.json"
MANIFEST_FORMAT = 1
STATE_SUFFIX = ".rkvsnap"
LOG_SUFFIX = ".rkvlog"
DIGEST_HEX_CHARS = 64


@dataclass(frozen=True)
class Manifest:
    """A replica's manifest.json, checked for shape (not against the files)."""

    audit_id: str
    replica: str
    raft_index: int
    applied_offset: int
    key_count: int
    split_points: tuple[bytes, ...]
    bucket_counts: tuple[int, ...]
    bucket_digests: tuple[str, ...]
    state_files: tuple[str, ...]
    log_file: str | None
    log_records: int | None

    @property
    def buckets(self) -> int:
        return len(self.state_files)


class ManifestError(ValueError):
    """The manifest is not one this audit can read."""


def _int(raw: dict[str, Any], name: str, *, optional: bool = False) -> int | None:
    value = raw.get(name)
    if value is None and optional:
        return None
    if type(value) is not int or value < 0:
        raise ManifestError(f"{name} must be a non-negative integer, not {value!r}")
    return value


def _list(raw: dict[str, Any], name: str, source: Any = None) -> list[Any]:
    value = raw.get(name) if source is None else source
    if not isinstance(value, list):
        raise ManifestError(f"{name} must be a list, not {value!r}")
    return value


def parse_manifest(raw: Any) -> Manifest:
    """A :class:`Manifest` from the decoded JSON; raises ManifestError naming the field."""
    if not isinstance(raw, dict):
        raise ManifestError("the manifest is not a JSON object")
    if raw.get("format") != MANIFEST_FORMAT:
        found = raw.get("format")
        raise ManifestError(
            f"unsupported manifest format {found!r} (this audit reads {MANIFEST_FORMAT})"
        )
    audit_id, replica = raw.get("audit_id"), raw.get("replica")
    if not isinstance(audit_id, str | int) or isinstance(audit_id, bool):
        raise ManifestError(f"audit_id must be a string, not {audit_id!r}")
    if not isinstance(replica, str | int) or isinstance(replica, bool) or replica == "":
        raise ManifestError(f"replica must be a string, not {replica!r}")
    buckets = _int(raw, "buckets")
    assert buckets is not None
    if buckets < 1:
        raise ManifestError("buckets must be at least 1")
    try:
        splits = tuple(base64.b64decode(s, validate=True) for s in _list(raw, "split_points"))
    except (binascii.Error, TypeError, ValueError):
        raise ManifestError("split_points must be base64 strings") from None
    counts = _list(raw, "bucket_counts")
    digests = _list(raw, "bucket_digests")
    files = raw.get("files")
    if not isinstance(files, dict):
        raise ManifestError(f"files must be an object, not {files!r}")
    state = _list({}, "files.state", files.get("state"))
    if len(splits) != buckets - 1:
        raise ManifestError(f"{len(splits)} split points for {buckets} buckets")
    for name, values in (
        ("bucket_counts", counts),
        ("bucket_digests", digests),
        ("files.state", state),
    ):
        if len(values) != buckets:
            raise ManifestError(f"{name} has {len(values)} entries for {buckets} buckets")
    if any(type(c) is not int or c < 0 for c in counts):
        raise ManifestError("bucket_counts must be non-negative integers")
    if any(not isinstance(d, str) or len(d) != DIGEST_HEX_CHARS or not _is_hex(d) for d in digests):
        raise ManifestError("bucket_digests must be hex SHA-256 digests")
    if any(not isinstance(f, str) or not _plain_name(f) for f in state):
        raise ManifestError("files.state must be file names inside the export directory")
    log = files.get("log")
    if log is not None and (not isinstance(log, str) or not _plain_name(log)):
        raise ManifestError("files.log must be a file name inside the export directory")
    raft_index, applied_offset, key_count = (
        _int(raw, "raft_index"),
        _int(raw, "applied_offset"),
        _int(raw, "key_count"),
    )
    assert raft_index is not None and applied_offset is not None and key_count is not None
    return Manifest(
        audit_id=str(audit_id),
        replica=str(replica),
        raft_index=raft_index,
        applied_offset=applied_offset,
        key_count=key_count,
        split_points=splits,
        bucket_counts=tuple(counts),
        bucket_digests=tuple(d.lower() for d in digests),
        state_files=tuple(state),
        log_file=log,
        log_records=_int(raw, "log_records", optional=True) if log is not None else None,
    )


def _is_hex(text: str) -> bool:
    try:
        bytes.fromhex(text)
    except ValueError:
        return False
    return True


def _plain_name(name: str) -> bool:
    return bool(name) and "/" not in name and name not in (".", "..")


@dataclass(frozen=True)
class ReplicaExport:
    """One replica's export directory: its manifest, or why it cannot be used."""

    directory: Path
    replica: str
    manifest: Manifest | None
    problem: str | None

    def state_path(self, bucket: int) -> Path:
        assert self.manifest is not None
        return self.directory / self.manifest.state_files[bucket]

    @property
    def log_path(self) -> Path | None:
        if self.manifest is None or self.manifest.log_file is None:
            return None
        return self.directory / self.manifest.log_file


def looks_like_replica_export(directory: Path) -> bool:
    return (directory / MANIFEST_NAME).exists() or any(
        p.suffix in (STATE_SUFFIX, LOG_SUFFIX) for p in directory.iterdir()
    )


def replica_directories(paths: Sequence[Path]) -> list[Path]:
    """The replica export directories ``paths`` name.

    Each path is either one replica's export (it holds a manifest or export files)
    or an audit directory ``<root>/<A>`` whose subdirectories are replicas' exports.
    """
    if not paths:
        raise UsageError("no exports given")
    found: list[Path] = []
    for path in paths:
        if not path.is_dir():
            raise UsageError(f"{path} is not a directory")
        if looks_like_replica_export(path):
            found.append(path)
            continue
        children = sorted(p for p in path.iterdir() if p.is_dir())
        if not children:
            raise UsageError(f"{path} holds no replica exports")
        found.extend(children)
    resolved = [p.resolve() for p in found]
    if len(set(resolved)) != len(resolved):
        raise UsageError("the same export directory is given twice")
    return resolved


def _missing_manifest(directory: Path) -> str:
    """Why an export has no manifest: the node's error.json if it wrote one."""
    try:
        error = json.loads((directory / ERROR_NAME).read_bytes())
    except (OSError, ValueError):
        return "no manifest.json (incomplete)"
    if isinstance(error, dict):
        return f"no manifest.json: the export failed ({error.get('code')}: {error.get('message')})"
    return "no manifest.json (incomplete)"


def load_export(directory: Path) -> ReplicaExport:
    """Read ``directory``'s manifest; an export without one (or with a bad one, or
    missing a file it lists) is returned with ``problem`` set."""
    manifest_path = directory / MANIFEST_NAME
    if not manifest_path.exists():
        return ReplicaExport(directory, directory.name, None, _missing_manifest(directory))
    try:
        manifest = parse_manifest(json.loads(manifest_path.read_bytes()))
    except (ValueError, UnicodeDecodeError) as exc:
        return ReplicaExport(directory, directory.name, None, f"bad manifest.json: {exc}")
    export = ReplicaExport(directory, manifest.replica, manifest, None)
    missing = [
        name
        for name in (*manifest.state_files, manifest.log_file)
        if name is not None and not (directory / name).is_file()
    ]
    if missing:
        return ReplicaExport(
            directory, manifest.replica, manifest, f"missing files: {', '.join(missing)}"
        )
    return export
