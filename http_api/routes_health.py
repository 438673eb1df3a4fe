"""Health endpoints: /livez and its older name /healthz (the process serves HTTP), and
/readyz (the node can serve: node/service/readiness.py's checks).

``/readyz?verbose`` answers in text, one line per check as etcd does
(``[+]leader ok``, ``[-]leader failed: reason``, ``[+]leader excluded: ok``),
then ``readyz check passed`` or ``readyz check failed``; without it the answer
is JSON: ``ready``, ``reason`` (the first failing check's problem) and
``checks``. ``?exclude=NAME`` (repeatable) leaves a check out; an unknown name
is a 400 ``unknown_check``. 200 when ready, else 503.
"""

from __future__ import annotations

from aiohttp import web

from http_api.errors import json_response
from http_api.kv_api import KvApi
from node.service.readiness import Readiness


def verbose_text(readiness: Readiness) -> str:
    lines = [
        f"[+]{check.name} ok" if check.ok else f"[-]{check.name} failed: {check.problem}"
        for check in readiness.checks
    ]
    lines += [f"[+]{name} excluded: ok" for name in readiness.excluded]
    lines.append(f"readyz check {'passed' if readiness.ready else 'failed'}")
    return "\n".join(lines) + "\n"


def add_routes(app: web.Application, service_key: web.AppKey[KvApi]) -> None:
    async def livez(request: web.Request) -> web.Response:
        return json_response({"status": "alive"})

    async def readyz(request: web.Request) -> web.Response:
        readiness = request.app[service_key].readiness(request.query.getall("exclude", []))
        status = 200 if readiness.ready else 503
        if "verbose" in request.query:
            return web.Response(text=verbose_text(readiness), status=status)
        checks = {
            check.name: "ok" if check.ok else f"failed: {check.problem}"
            for check in readiness.checks
        }
        body = {
            "ready": readiness.ready,
            "reason": readiness.reason,
            "checks": checks,
            "excluded": list(readiness.excluded),
        }
        return json_response(body, status)

    app.router.add_route("GET", "/healthz", livez)
    app.router.add_route("GET", "/livez", livez)
    app.router.add_route("GET", "/readyz", readyz)
