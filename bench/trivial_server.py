"""The upper bound for bench/http.py: the least an aiohttp server in one process can do.

PUT /v1/kv/{key} reads the body and answers {"version": n}; GET /v1/kv/{key} answers a
fixed 100-byte body; GET /readyz answers 200. No storage, no replication: whatever rkv's
REST API reaches, this is the ceiling for one Python process on the same machine.

Run with ``python -P bench/trivial_server.py --port N`` (``-P``: bench/http.py must not
shadow the standard library's ``http`` package, which aiohttp imports).
"""

from __future__ import annotations

import argparse

from aiohttp import web

VALUE = b"v" * 100


def make_app() -> web.Application:
    version = 0

    async def put(request: web.Request) -> web.Response:
        nonlocal version
        await request.read()
        version += 1
        return web.json_response({"version": version})

    async def get(request: web.Request) -> web.Response:
        return web.Response(body=VALUE, content_type="application/octet-stream")

    async def ready(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_put("/v1/kv/{key}", put)
    app.router.add_get("/v1/kv/{key}", get)
    app.router.add_get("/readyz", ready)
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    web.run_app(make_app(), host="127.0.0.1", port=args.port, access_log=None, print=None)


if __name__ == "__main__":
    main()
