"""Alarms: GET /v1/alarms (the raised alarms), POST /v1/alarms (a member raises one
for itself through another member, when its own raft cannot) and POST
/v1/alarms:disarm (node/service/alarms.py; node/state/alarms.py says what a
raised one refuses)."""

from __future__ import annotations

from aiohttp import web

from http_api.bodies import read_json
from http_api.errors import json_response
from http_api.kv_api import KvApi
from node.errors import InvalidRequest
from node.service.alarms import checked_kind
from node.state.alarm_commands import MAX_ALARM_REASON_CHARS, AlarmKind
from node.state.alarms import Alarm

RAISE_BODY = 'JSON: {"member": ID, "kind": "nospace", "reason": TEXT}'
DISARM_BODY = 'JSON: {"kind": "nospace", "member": ID (optional: every member)}'


def _listed(alarms: tuple[Alarm, ...]) -> web.Response:
    return json_response({"alarms": [alarm.as_json() for alarm in alarms]})


def add_routes(app: web.Application, service_key: web.AppKey[KvApi]) -> None:
    async def list_alarms(request: web.Request) -> web.Response:
        return _listed(request.app[service_key].alarms())

    async def disarm(request: web.Request) -> web.Response:
        body = await read_json(request, DISARM_BODY) if request.can_read_body else {}
        if not isinstance(body, dict) or set(body) - {"kind", "member"}:
            raise InvalidRequest(f"the body must be {DISARM_BODY}", "invalid_alarm")
        member = body.get("member")
        if "member" in body and not isinstance(member, str):
            raise InvalidRequest("member must be a member id (a string)", "invalid_alarm")
        kind = checked_kind(body.get("kind", AlarmKind.NOSPACE.value))
        return _listed(await request.app[service_key].disarm_alarms(member, kind))

    async def raise_alarm(request: web.Request) -> web.Response:
        body = await read_json(request, RAISE_BODY)
        if not isinstance(body, dict) or set(body) - {"kind", "member", "reason"}:
            raise InvalidRequest(f"the body must be {RAISE_BODY}", "invalid_alarm")
        member, reason = body.get("member"), body.get("reason", "")
        if not isinstance(member, str) or not isinstance(reason, str):
            raise InvalidRequest(f"the body must be {RAISE_BODY}", "invalid_alarm")
        kind = checked_kind(body.get("kind", AlarmKind.NOSPACE.value))
        reason = reason[:MAX_ALARM_REASON_CHARS]
        return _listed(await request.app[service_key].raise_alarm(member, kind, reason))

    app.router.add_route("GET", "/v1/alarms", list_alarms)
    app.router.add_route("POST", "/v1/alarms", raise_alarm)
    app.router.add_route("POST", "/v1/alarms:disarm", disarm)
