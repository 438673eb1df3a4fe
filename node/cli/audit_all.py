"""`rkv audit --url URL` (composition root): the whole consistency audit in one command.

1. POST /v1/audit on the leader takes the cut (as `rkv audit snapshot` does);
2. every member (GET /v1/cluster/members) is polled until its export is done
   (node/cli/audit_cut.py's :func:`wait_for_exports`);
3. each finished export is downloaded, file by file and its ``manifest.json``
   last, into ``<out>/exports/<audit id>/<node id>/``; with ``--exports-dir DIR``
   (the nodes' --audit-dir on storage shared with this machine, such as a
   Compose volume) nothing is downloaded and ``DIR/<audit id>/`` is read in place;
4. spark_tools' ``run_audit`` compares them and writes its report into
   ``<out>`` (docs/AUDIT.md), expecting as many replicas as there are members:
   a member whose export failed or did not finish makes the audit
   INCONCLUSIVE.

Exit status (run_audit's): 0 consistent, 1 divergent, 2 usage error,
3 inconsistent or incomplete cut, 4 the audit failed (the cluster unreachable,
the cut refused, a download failed, the comparison failed).
The parser options are added by node/cli/main.py; the audit itself (spark_tools/,
pyspark) is imported only when it runs.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import Any

from http_api.client.control import ControlClient
from http_api.client.credentials import Credentials
from node.cli.audit_cut import wait_for_exports
from node.cli.common import EXIT_USAGE, node_urls, url_help
from node.cli.credential_flags import credentials_from

EXIT_INCONCLUSIVE = 3
EXIT_FAILURE = 4
DEFAULT_OUT = Path("audit-report")
_MAX_REQUEST_SECONDS = 30.0


def _err(text: str) -> None:
    sys.stderr.write(f"rkv audit: {text}\n")


def add_audit_all_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `rkv audit` itself (no action). Their dests are prefixed ``all_`` so
    that they never mix with the options of its actions (snapshot, run)."""
    parser.add_argument(
        "--url",
        dest="all_url",
        action="append",
        metavar="URL",
        help=f"run the whole audit against this cluster: {url_help()}",
    )
    parser.add_argument(
        "--out",
        dest="all_out",
        metavar="DIR",
        type=Path,
        default=DEFAULT_OUT,
        help=f"the report goes here, the downloaded exports under OUT/exports/ ({DEFAULT_OUT})",
    )
    parser.add_argument(
        "--exports-dir",
        dest="all_exports_dir",
        metavar="DIR",
        type=Path,
        default=None,
        help="the nodes' --audit-dir, shared with this machine: read the exports from "
        "DIR/<audit id>/<node id>/ instead of downloading them",
    )
    parser.add_argument("--engine", dest="all_engine", choices=("spark", "python"), default="spark")
    parser.add_argument(
        "--master",
        dest="all_master",
        metavar="URL",
        default=None,
        help="Spark master URL (default: spark-submit's, else local[*])",
    )
    parser.add_argument(
        "--buckets",
        dest="all_buckets",
        metavar="N",
        type=int,
        default=None,
        help="key-range buckets (16)",
    )
    parser.add_argument(
        "--timeout",
        dest="all_timeout",
        metavar="S",
        type=float,
        default=600.0,
        help="seconds to wait for every export, and at most 30 per request (default 600)",
    )
    parser.add_argument(
        "--quiet", dest="all_quiet", action="store_true", help="no progress lines on stderr"
    )


def run_audit_all(args: argparse.Namespace) -> int:
    try:
        urls = node_urls(args.all_url)
        credentials = credentials_from(args)
    except ValueError as exc:
        _err(str(exc))
        return EXIT_USAGE
    if args.all_buckets is not None and not 1 <= args.all_buckets <= 1024:
        _err("--buckets must be between 1 and 1024")
        return EXIT_USAGE
    if args.all_timeout <= 0:
        _err("--timeout must be positive")
        return EXIT_USAGE
    if args.all_exports_dir is not None and not args.all_exports_dir.is_dir():
        _err(f"--exports-dir {args.all_exports_dir}: no such directory")
        return EXIT_USAGE
    per_request = min(args.all_timeout, _MAX_REQUEST_SECONDS)
    control = ControlClient(urls, per_request, credentials)
    status, started = control.start_audit(buckets=args.all_buckets)
    if status != 200:
        return _refused("the cut", status, started)
    audit_id = str(started["audit_id"])
    _info(args, f"audit {audit_id} at raft index {started['raft_index']}")
    status, answer = control.members()
    if status != 200:
        return _refused("the members", status, answer)
    members = {str(m["id"]): str(m["url"]) for m in answer.get("members", [])}
    return _gather_and_compare(
        args, audit_id, int(started["raft_index"]), members, per_request, credentials=credentials
    )


def _gather_and_compare(
    args: argparse.Namespace,
    audit_id: str,
    cut_index: int,
    members: dict[str, str],
    per_request: float,
    *,
    credentials: Credentials,
) -> int:

    exports = wait_for_exports(
        audit_id,
        members,
        total=args.all_timeout,
        per_request=per_request,
        cut_index=cut_index,
        credentials=credentials,
    )
    if not args.all_quiet:
        sys.stdout.flush()
        exports.report(as_json=False)
        sys.stdout.flush()
    if args.all_exports_dir is not None:
        from node.audit.export import MANIFEST_NAME  # noqa: PLC0415

        root = args.all_exports_dir / audit_id
        missing = [n for n in sorted(exports.done) if not (root / n / MANIFEST_NAME).is_file()]
        if missing:
            _err(
                f"{root}: no finished export of {', '.join(missing)} here; is --exports-dir "
                "the nodes' --audit-dir?"
            )
            return EXIT_FAILURE
    else:
        root = args.all_out / "exports" / audit_id
        try:
            for node_id, manifest in sorted(exports.done.items()):
                _download(
                    members[node_id],
                    audit_id,
                    manifest,
                    root / node_id,
                    per_request,
                    credentials=credentials,
                )
        except (OSError, ValueError) as exc:
            _err(f"downloading the exports: {exc}")
            return EXIT_FAILURE
    _info(args, f"exports of {len(exports.done)}/{len(members)} members in {root}")
    if not exports.done:
        _err(f"no member exported audit {audit_id}")
        return EXIT_INCONCLUSIVE

    from spark_tools.audit_run import run_audit  # noqa: PLC0415

    return run_audit(
        root,
        args.all_out,
        args.all_engine,
        args.all_master,
        expected_replicas=len(members),
        progress=None if args.all_quiet else sys.stderr,
    )


def _download(
    base: str,
    audit_id: str,
    manifest: dict[str, Any],
    directory: Path,
    timeout: float,
    *,
    credentials: Credentials,
) -> None:
    """Every file ``manifest`` lists, then manifest.json itself, into ``directory``."""
    from node.audit.export import MANIFEST_NAME, manifest_files  # noqa: PLC0415

    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    control = ControlClient([base], timeout, credentials)
    for name in [*sorted(manifest_files(manifest)), MANIFEST_NAME]:
        if "/" in name or name in (".", ".."):
            raise ValueError(f"bad file name in the manifest: {name!r}")
        partial = directory / (name + ".part")
        with control.audit_file(base, audit_id, name) as response, open(partial, "wb") as out:
            shutil.copyfileobj(response, out, 1 << 20)
        partial.rename(directory / name)


def _refused(what: str, status: int, answer: Any) -> int:
    answer = answer if isinstance(answer, dict) else {}
    _err(f"{what}: {answer.get('message', 'failed')} [{answer.get('code', status)}]")
    return EXIT_FAILURE


def _info(args: argparse.Namespace, text: str) -> None:
    if not args.all_quiet:
        _err(text)
