"""`rkv status`: one table for the whole cluster, as `etcdctl endpoint status -w table`.

The members come from the first node of --url that answers (its /v1/status);
then each member's own /v1/status fills its row: role, leader, raft term,
applied index, lag (the leader's commit index, else the highest one seen, minus
the member's applied index), LMDB entries (user keys and internal records),
commit-log bytes, last compaction, version.
A member that does not answer is a row saying so, with its error on stderr,
and the command exits 3. ``-o json`` prints the rows as JSON; ``--json`` the
raw /v1/status of the first node that answers.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from http_api.client import RkvClient, RkvClientError
from node.cli.common import EXIT_OK, EXIT_UNREACHABLE

MEMBER_TIMEOUT = 2.0  # seconds at most per member (or --timeout, when shorter)
COLUMNS = (
    ("ID", "id"),
    ("URL", "url"),
    ("ROLE", "role"),
    ("REACHABLE", "reachable"),
    ("LEADER", "leader"),
    ("TERM", "term"),
    ("APPLIED", "applied_index"),
    ("LAG", "lag"),
    ("ENTRIES", "entries"),
    ("LOG-BYTES", "log_bytes"),
    ("LAST-COMPACTION", "last_compaction"),
    ("VERSION", "version"),
)


@dataclass(frozen=True, slots=True)
class MemberRow:
    id: str
    url: str
    reachable: bool
    role: str | None = None
    leader: str | None = None
    term: int | None = None
    applied_index: int | None = None
    commit_index: int | None = None
    lag: int | None = None
    entries: int | None = None
    """LMDB entries: user keys plus rkv's internal records."""
    log_bytes: int | None = None
    last_compaction: str | None = None
    """When this member's last compaction finished (ISO 8601, UTC); None: never."""
    version: str | None = None
    error: str | None = None


def add_status_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-o",
        "--output",
        choices=("table", "json"),
        default="table",
        help="table (default), or json: one object per member",
    )
    parser.add_argument(
        "--json", action="store_true", help="the raw /v1/status of the first node that answers"
    )


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _finished_at(status: dict[str, Any]) -> str | None:
    last = (status.get("compaction") or {}).get("last") or {}
    finished = last.get("finished_at")
    if not isinstance(finished, int | float) or finished <= 0:
        return None
    moment = datetime.fromtimestamp(finished, tz=UTC).replace(microsecond=0)
    return moment.isoformat().replace("+00:00", "Z")


def _row(member: dict[str, Any], seen: dict[str, Any]) -> MemberRow:
    storage = seen.get("storage") or {}
    leader = seen.get("leader") or {}
    return MemberRow(
        id=str(member.get("id")),
        url=str(member.get("url")),
        reachable=True,
        role=str(seen.get("role", "?")),
        leader=str(leader["id"]) if leader.get("id") is not None else None,
        term=_int(seen.get("term")),
        applied_index=_int(seen.get("applied_index")),
        commit_index=_int(seen.get("commit_index")),
        entries=_int(storage.get("entries")),
        log_bytes=_int(storage.get("log_bytes")),
        last_compaction=_finished_at(seen),
        version=str(seen["version"]) if "version" in seen else None,
    )


def _with_lag(rows: list[MemberRow]) -> list[MemberRow]:
    """Each reachable row's lag behind the leader's commit index (the highest seen when
    no reachable member leads)."""
    leading = [r.commit_index for r in rows if r.role == "leader" and r.commit_index is not None]
    seen = [r.commit_index for r in rows if r.commit_index is not None]
    reference = leading[0] if leading else max(seen, default=None)
    out = []
    for row in rows:
        lag = None
        if reference is not None and row.applied_index is not None:
            lag = max(0, reference - row.applied_index)
        out.append(MemberRow(**{**asdict(row), "lag": lag}))
    return out


def member_rows(client: RkvClient, first: dict[str, Any], timeout: float) -> list[MemberRow]:
    """A row per member that ``first`` (a node's /v1/status) lists, asked one by one."""
    members = first.get("members") or [{"id": first.get("id"), "url": first.get("url")}]
    rows = []
    for member in sorted(members, key=lambda m: str(m.get("id"))):
        url = str(member.get("url"))
        seen: dict[str, Any] | None = first if member.get("self") else None
        if seen is None:
            try:
                seen = client.status(url, timeout=min(timeout, MEMBER_TIMEOUT))
            except RkvClientError as exc:
                error = f"{exc.message} [{exc.code}]"
                rows.append(MemberRow(str(member.get("id")), url, False, error=error))
                continue
        rows.append(_row(member, seen))
    return _with_lag(rows)


def _cell(row: MemberRow, field: str) -> str:
    value = getattr(row, field)
    if field == "reachable":
        return "yes" if value else "no"
    if value is None:
        return "?" if field == "role" else "-"
    return str(value)


def print_table(rows: list[MemberRow]) -> None:
    lines = [tuple(title for title, _ in COLUMNS)]
    lines += [tuple(_cell(row, field) for _, field in COLUMNS) for row in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(COLUMNS))]
    for line in lines:
        cells = (cell.ljust(width) for cell, width in zip(line, widths, strict=True))
        print("  ".join(cells).rstrip())


def run_status(client: RkvClient, args: argparse.Namespace) -> int:
    first = client.status()
    if args.json:
        print(json.dumps(first, indent=2))
        return EXIT_OK
    rows = member_rows(client, first, args.timeout)
    if args.output == "json":
        print(json.dumps({"members": [asdict(row) for row in rows]}, indent=2))
    else:
        print_table(rows)
    for row in rows:
        if not row.reachable:
            print(f"rkv status: {row.id} at {row.url}: unreachable: {row.error}", file=sys.stderr)
    return EXIT_OK if all(row.reachable for row in rows) else EXIT_UNREACHABLE
