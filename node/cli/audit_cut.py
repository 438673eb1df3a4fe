"""`rkv audit snapshot`: take a consistency audit's cut.

POST /v1/audit goes to the leader (the control-plane calls follow 307s, as for
`rkv cluster`) and prints ``AUDIT_ID RAFT_INDEX``. With ``--wait`` it then polls
GET /v1/audit/{id} on every member until each export is done (a node that has
not applied the cut yet answers 404, one still writing 202; a node whose
applied raft index passed the cut with no export never had the entry applied,
having installed a later state, and is reported as failed) and prints one
summary line per node, then whether the bucket digests agree. The comparison
itself is `rkv audit run` (spark_tools/, node/cli/audit_run.py).

Exit status: 0 ok, 1 refused by the server, 2 usage error, 3 unreachable or
unable to serve, an export failed, or --wait timed out.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from typing import Any

from http_api.client.control import ControlClient
from http_api.client.credentials import Credentials
from node.cli.common import EXIT_REFUSED, EXIT_UNREACHABLE, EXIT_USAGE, node_urls
from node.cli.credential_flags import credentials_from

_POLL_SECONDS = 0.5
_MAX_REQUEST_SECONDS = 30.0


def _out(text: str) -> None:
    sys.stdout.write(text + "\n")


def _err(text: str) -> None:
    sys.stderr.write(f"rkv audit snapshot: {text}\n")


def _failed(status: int, answer: Any) -> int:
    answer = answer if isinstance(answer, dict) else {}
    _err(f"{answer.get('message', 'failed')} [{answer.get('code', status)}]")
    return EXIT_UNREACHABLE if status == 0 or status >= 500 else EXIT_REFUSED


def run_audit_cut(args: argparse.Namespace) -> int:
    try:
        urls = node_urls(args.url)
        credentials = credentials_from(args)
    except ValueError as exc:
        _err(str(exc))
        return EXIT_USAGE
    per_request = min(args.timeout, _MAX_REQUEST_SECONDS)
    control = ControlClient(urls, per_request, credentials)
    status, started = control.start_audit(args.audit_id, args.buckets)
    if status != 200:
        return _failed(status, started)
    if args.json:
        _out(json.dumps(started))
    else:
        _out(f"{started['audit_id']} {started['raft_index']}")
    if not args.wait:
        return 0
    sys.stdout.flush()
    status, answer = control.members()
    if status != 200:
        return _failed(status, answer)
    members = {str(m["id"]): str(m["url"]) for m in answer.get("members", [])}
    exports = wait_for_exports(
        str(started["audit_id"]),
        members,
        total=args.timeout,
        per_request=per_request,
        cut_index=int(started["raft_index"]),
    )
    exports.report(args.json)
    return 0 if exports.complete else EXIT_UNREACHABLE


@dataclass
class Exports:
    """Where each member's export of one audit stands after :func:`wait_for_exports`."""

    done: dict[str, dict[str, Any]]  # node id -> its manifest
    failed: dict[str, str]  # node id -> why
    pending: dict[str, str]  # node id -> URL, not done when the time ran out
    last_seen: dict[str, str]

    @property
    def complete(self) -> bool:
        return not self.pending and not self.failed

    def report(self, as_json: bool) -> None:
        _report(self.done, self.failed, self.pending, self.last_seen, as_json)


def wait_for_exports(
    audit_id: str,
    members: dict[str, str],
    *,
    total: float,
    per_request: float,
    cut_index: int | None = None,
    credentials: Credentials | None = None,
) -> Exports:
    """Poll GET /v1/audit/{id} on every member (id -> URL) until each export is done
    or failed, or ``total`` seconds have passed. With ``cut_index`` (the raft index
    of the audit entry), a member that has applied past it and still has no export
    is failed at once: it installed a later state instead of applying the entry
    (a rebuild), so it will never export this audit."""
    deadline = time.monotonic() + total
    control = ControlClient([], per_request, credentials)
    pending = dict(members)
    done: dict[str, dict[str, Any]] = {}
    failed: dict[str, str] = {}
    last_seen: dict[str, str] = {}
    while pending:
        for node_id, url in list(pending.items()):
            status, answer = control.audit_status(url, audit_id)
            if status == 200:
                done[node_id] = answer
                del pending[node_id]
            elif status == 202:
                last_seen[node_id] = "writing"
            elif status == 404 and _missed_cut(control, url, audit_id, cut_index):
                failed[node_id] = f"applied past the cut (raft index {cut_index}) with no export"
                del pending[node_id]
            elif status in (0, 404, 503):  # unreachable, not applied yet, busy: again
                last_seen[node_id] = "not started" if status == 404 else "unreachable"
            else:
                message = answer.get("message") if isinstance(answer, dict) else None
                failed[node_id] = str(message or f"HTTP {status}")
                del pending[node_id]
        if not pending or time.monotonic() >= deadline:
            break
        time.sleep(_POLL_SECONDS)
    return Exports(done, failed, pending, last_seen)


def _missed_cut(control: ControlClient, url: str, audit_id: str, cut_index: int | None) -> bool:
    """True if the node at ``url`` applied entries past ``cut_index`` and still has
    no export (asked again after its status: the export is registered when the
    entry is applied, so a node past the entry without one skipped it)."""
    if cut_index is None:
        return False
    status, answer = control.status(url)
    if status != 200 or not isinstance(answer, dict):
        return False
    applied = answer.get("applied_index")
    if not isinstance(applied, int) or applied <= cut_index:
        return False
    status, _ = control.audit_status(url, audit_id)
    return status == 404


def _report(
    done: dict[str, dict[str, Any]],
    failed: dict[str, str],
    pending: dict[str, str],
    last_seen: dict[str, str],
    as_json: bool,
) -> None:
    if as_json:
        _out(json.dumps({"done": done, "failed": failed, "pending": sorted(pending)}, indent=2))
        return
    for node_id in sorted(done):
        m = done[node_id]
        _out(
            f"{node_id}: raft_index {m['raft_index']} offset {m['applied_offset']} "
            f"keys {m['key_count']} buckets {m['buckets']} log_records {m['log_records']} "
            f"({m['seconds']:.2f}s)"
        )
    for node_id in sorted(failed):
        _out(f"{node_id}: FAILED: {failed[node_id]}")
    for node_id in sorted(pending):
        _out(f"{node_id}: not done ({last_seen.get(node_id, 'no answer')}) when --timeout ran out")
    if len(done) > 1:
        digests = {json.dumps(m["bucket_digests"]) for m in done.values()}
        cuts = {(m["raft_index"], m["applied_offset"]) for m in done.values()}
        same = len(digests) == 1 and len(cuts) == 1
        _out(
            f"bucket digests: {'identical' if same else 'DIFFERENT'} on "
            f"{len(done)} nodes" + ("" if same else " (rkv audit run compares them)")
        )
