"""`rkv lease grant | keepalive | revoke | list | show`: leases (docs/LEASES.md).

``grant TTL`` prints the new lease's id; ``keepalive ID`` renews it every third
of its TTL until interrupted (Ctrl-C, SIGTERM: the lease then expires after its
TTL), ``--once`` renews it once; ``revoke ID`` ends it now (its keys deleted,
its locks released); ``list`` prints ``ID<TAB>TTL<TAB>REMAINING<TAB>OWNER``
lines; ``show ID`` one lease with its keys and locks.

Exit status: 0 ok, 1 refused (the lease has ended: ``lease_expired``,
``lease_not_found``; ``lease_not_owned``; a bad TTL; a limit), 2 usage error,
3 cluster unreachable, or (keepalive) no keepalive acknowledged for a TTL.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from http_api.client import KeptLease, LeaseInfo, RkvClient, RkvClientError
from http_api.client.credentials import Credentials
from node.cli.common import EXIT_REFUSED, EXIT_USAGE, node_urls, positive_int, shown_bytes
from node.cli.credential_flags import credentials_from
from node.cli.holding import EXIT_LOST, Stopped, stop_on_signals
from node.cli.management import command_group, refusal, run_call

ENDED = ("lease_expired", "lease_not_found", "lease_not_owned")


def add_commands(sub: Any) -> None:
    action = command_group(sub, "lease", "grant, keep alive, revoke and list leases", run)
    grant = action("grant", "grant a lease; prints its id")
    grant.add_argument("ttl", type=positive_int, help="seconds, 1 to the cluster's --max-lease-ttl")
    keepalive = action(
        "keepalive", "renew a lease every third of its TTL until interrupted (Ctrl-C, SIGTERM)"
    )
    keepalive.add_argument("lease_id", metavar="ID", type=positive_int)
    keepalive.add_argument("--once", action="store_true", help="renew it once and exit")
    revoke = action("revoke", "end a lease now: its keys are deleted, its locks released")
    revoke.add_argument("lease_id", metavar="ID", type=positive_int)
    action("list", "the leases you may see (yours; every one for an admin)")
    show = action("show", "one lease: TTL, time left, owner, keys and locks")
    show.add_argument("lease_id", metavar="ID", type=positive_int)


def _info_json(info: LeaseInfo) -> dict[str, Any]:
    return {
        "id": info.id,
        "ttl": info.ttl,
        "remaining": info.remaining,
        "owner": info.owner,
        "keys": [shown_bytes(key) for key in info.keys],
        "locks": list(info.locks),
        "truncated": info.truncated,
    }


def _show_lease(answer: dict[str, Any]) -> None:
    print(f"lease {answer['id']}")
    print(f"ttl\t{answer['ttl']}")
    print(f"remaining\t{answer['remaining']:.1f}")
    print(f"owner\t{answer['owner'] or '-'}")
    for key in answer["keys"]:
        print(f"key\t{key}")
    if answer["truncated"]:
        print("key\t... (more than shown)")
    for lock in answer["locks"]:
        print(f"lock\t{lock}")


def _show_list(answer: dict[str, Any]) -> None:
    for lease in answer["leases"]:
        remaining = f"{lease['remaining']:.1f}"
        print(f"{lease['id']}\t{lease['ttl']}\t{remaining}\t{lease['owner'] or '-'}")


def _keep_alive(args: argparse.Namespace, where: str) -> int:
    """Renew the lease until interrupted; 1 when it has ended, 3 when it may have."""
    try:
        urls = node_urls(args.url)
        credentials = credentials_from(args)
    except ValueError as exc:
        print(f"{where}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    kept: KeptLease | None = None
    with RkvClient(urls, timeout=args.timeout, credentials=credentials) as client:
        try:
            with stop_on_signals():
                kept = client.adopt_lease(args.lease_id)
                print(
                    f"lease {kept.id} kept alive every {kept.ttl / 3:.3g}s (TTL {kept.ttl}s) "
                    "until interrupted",
                    file=sys.stderr,
                )
                while not kept.lost.wait(0.5):
                    pass
        except RkvClientError as exc:
            return refusal(where, exc)
        except (KeyboardInterrupt, Stopped):
            if kept is not None:
                kept.stop()
                print(
                    f"{where}: stopped; the lease expires in {kept.ttl}s unless kept alive",
                    file=sys.stderr,
                )
            return 0
    reason = kept.reason if kept is not None else None
    assert reason is not None
    print(f"{where}: {reason.message}", file=sys.stderr)
    return EXIT_REFUSED if reason.code in ENDED else EXIT_LOST


def run(args: argparse.Namespace) -> int:
    action: str = args.lease_command
    lease_id: int | None = getattr(args, "lease_id", None)
    where = f"rkv lease {action}" + ("" if lease_id is None else f" {lease_id}")
    if action == "grant":

        def grant(client: RkvClient, _: Credentials) -> dict[str, Any]:
            lease = client.grant_lease(args.ttl)
            return {"id": lease.id, "ttl": lease.ttl}

        return run_call(where, args, grant, lambda answer: print(answer["id"]))
    if action == "keepalive" and not args.once:
        return _keep_alive(args, where)
    if action == "keepalive":

        def once(client: RkvClient, _: Credentials) -> dict[str, Any]:
            lease = client.keepalive(args.lease_id)
            return {"id": lease.id, "ttl": lease.ttl}

        return run_call(
            where, args, once, lambda a: print(f"lease {a['id']} renewed (TTL {a['ttl']}s)")
        )
    if action == "revoke":

        def revoke(client: RkvClient, _: Credentials) -> dict[str, Any]:
            return {
                "id": args.lease_id,
                "revoked": True,
                "deleted_keys": client.revoke(args.lease_id),
            }

        return run_call(
            where,
            args,
            revoke,
            lambda a: print(f"lease {a['id']} revoked ({a['deleted_keys']} keys deleted)"),
        )
    if action == "list":

        def listed(client: RkvClient, _: Credentials) -> dict[str, Any]:
            return {"leases": [_info_json(info) for info in client.leases()]}

        return run_call(where, args, listed, _show_list)
    return run_call(where, args, lambda c, _: _info_json(c.lease_info(args.lease_id)), _show_lease)
