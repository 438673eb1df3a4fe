"""schemathesis hooks for tests/cluster/test_fuzz_api.py (loaded through fuzz_api.toml).

map_case: the OpenAPI document states each parameter on its own; a few rules hold
between parameters, which it can only say in prose. Without this hook most
requests the fuzzer builds to follow the document would break one of those rules,
get a 400, and never reach what they were meant to test. It completes or drops
the one parameter that breaks a rule, in those requests only: a request made to
break the document is sent as it was made.

Leases (docs/LEASES.md): an Rkv-Fencing header that breaks its pattern is dropped (see
_follow_lease_rules); a PUT takes ?lease or ?ttl, not both (keep lease). In every
mode, a lock or campaign the fuzz makes tries once (timeout 0: a lease it granted may
find the lock held, and a wait would outlast the request timeout), and an election is
read, never observed (an endless stream, like the watch);
tests/cluster/test_leases_http.py covers both.

filter_case: a request that would change the cluster's membership is not sent.

A bulk load's body is JSON Lines (application/x-ndjson), which a schema cannot
state: it is sent as the text generated (``ndjson``), and a request that follows
the document gets one well-formed line made of that text.
"""

from __future__ import annotations

import base64
import json
from collections.abc import MutableMapping
from typing import Any

import schemathesis
from schemathesis import Case, GenerationMode, HookContext

from http_api.encoding import PRODUCER_HEADERS
from http_api.lease_input import FENCING_HEADER, fence
from node.errors import InvalidRequest
from node.service.kv import member_problem


def _find(params: MutableMapping[str, Any], name: str) -> str | None:
    return next((key for key in params if key.lower() == name.lower()), None)


def _follow_header_rules(headers: MutableMapping[str, Any]) -> None:
    # An idempotent write carries Rkv-Producer-Id, -Epoch and Rkv-Sequence all three or
    # none: complete a partial set (0 is a well-formed value of each).
    present = [_find(headers, name) for name in PRODUCER_HEADERS]
    if any(present) and not all(present):
        for name, key in zip(PRODUCER_HEADERS, present, strict=True):
            if key is None:
                headers[name] = "0"
    # If-Match or If-None-Match, not both: keep If-Match.
    none_match = _find(headers, "If-None-Match")
    if none_match is not None and _find(headers, "If-Match") is not None:
        del headers[none_match]


def _follow_lease_rules(case: Case[Any]) -> None:
    # schemathesis's coverage phase makes no header value whose pattern needs a character
    # other than a letter or a digit (Rkv-Fencing's "="), and sends one that breaks the
    # pattern in a request it counts as valid; and the pattern cannot say that a token
    # stops at 2**63 - 1. Such a request is sent without the header.
    headers: MutableMapping[str, Any] = case.headers or {}
    fencing = _find(headers, FENCING_HEADER)
    if fencing is not None:
        try:
            fence(str(headers[fencing]))
        except InvalidRequest:
            del headers[fencing]
    path, method = case.operation.path, case.operation.method.upper()
    if path == "/v1/kv/{key}" and method == "PUT" and case.query and "lease" in case.query:
        case.query.pop("ttl", None)


def _never_wait(case: Case[Any]) -> None:
    """Whatever the mode: a well-formed wait becomes a try (timeout 0), and an election
    is read instead of observed. (A request made to break the document in one of these
    two breaks it with another value, which stays.)"""
    path, method = case.operation.path, case.operation.method.upper()
    body = case.body
    if path in ("/v1/locks/{name}", "/v1/elections/{name}") and isinstance(body, dict):
        wait = body.get("timeout")
        if isinstance(wait, int | float) and not isinstance(wait, bool) and 0 <= wait <= 300:
            body["timeout"] = 0
    observes = path == "/v1/elections/{name}" and method == "GET" and case.query
    if observes and case.query.get("observe") == "true":
        case.query["observe"] = "false"


@schemathesis.serializer("application/x-ndjson")
def ndjson(context: Any, value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    return (value if isinstance(value, str) else json.dumps(value)).encode()


def _one_load_line(case: Case[Any]) -> None:
    """POST /v1/kv:load: the generated text becomes the key and value of one line."""
    if case.operation.path == "/v1/kv:load" and isinstance(case.body, str):
        key = base64.b64encode(case.body.encode()[:4000] or b"k").decode()
        value = base64.b64encode(case.body.encode()).decode()
        case.body = json.dumps({"key": key, "value": value}) + "\n"
        case.query = {**(case.query or {}), "encoding": "base64"}


@schemathesis.hook
def map_case(context: HookContext, case: Case[Any]) -> Case[Any]:
    _never_wait(case)
    if case.meta is None or case.meta.generation.mode is not GenerationMode.POSITIVE:
        return case
    if case.headers:
        _follow_header_rules(case.headers)
    _follow_lease_rules(case)
    _one_load_line(case)
    # GET /v1/snapshot: after= resumes a transfer, so it needs transfer=.
    if case.operation.path == "/v1/snapshot" and case.query and "transfer" not in case.query:
        case.query.pop("after", None)
    # Permissions' keys and prefixes are base64 unless encoding=utf-8: any string the
    # document allows is a key in utf-8. Listing roles in utf-8 is refused (not_utf8) once
    # a key that is not UTF-8 was granted, so roles are listed in base64.
    if case.operation.path.startswith("/v1/auth/roles"):
        wants_text = case.operation.method.upper() in ("POST", "DELETE") and isinstance(
            case.body, dict
        )
        case.query = {**(case.query or {}), "encoding": "utf-8" if wants_text else "base64"}
    return case


@schemathesis.hook
def filter_case(context: HookContext, case: Case[Any]) -> bool:
    # A member the node accepts would join as a voter that never starts: a few of them
    # and the cluster loses its quorum for the requests after. (A request made to break
    # the document may break it elsewhere than in its body.)
    if case.operation.method.upper() == "POST" and case.operation.path == "/v1/cluster/members":
        body = case.body
        if isinstance(body, dict):
            fields = (body.get(name) for name in ("id", "raft_address", "url"))
            return member_problem(*fields) is not None
    return True
