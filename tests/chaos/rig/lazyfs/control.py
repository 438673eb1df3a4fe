"""The daemon's control channel: one JSON request and one JSON answer per
connection on a Unix socket. Requests: ``{"op": "stats"}``,
``{"op": "cap", "bytes": N or null}`` (the disk-full mode), and
``{"op": "arm_power_cut"}`` (the next unmount drops everything not durable
instead of keeping it)."""

from __future__ import annotations

import json
import socket
import socketserver
import threading
from typing import Any

from tests.chaos.rig.lazyfs.filesystem import LazyFS


class ControlServer(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True

    def __init__(self, path: str, fs: LazyFS) -> None:
        self.fs = fs
        self.power_cut_armed = threading.Event()
        super().__init__(path, _Handler)

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        if op == "stats":
            return {"ok": True, **self.fs.stats(), "armed": self.power_cut_armed.is_set()}
        if op == "cap":
            cap = request.get("bytes")
            if cap is not None and (not isinstance(cap, int) or cap < 0):
                return {"ok": False, "error": "bytes: a non-negative integer or null"}
            self.fs.set_cap(cap)
            return {"ok": True, **self.fs.stats()}
        if op == "arm_power_cut":
            self.power_cut_armed.set()
            return {"ok": True}
        return {"ok": False, "error": f"unknown op {op!r}"}


class _Handler(socketserver.StreamRequestHandler):
    server: ControlServer

    def handle(self) -> None:
        try:
            request = json.loads(self.rfile.readline())
            answer = self.server.answer(request if isinstance(request, dict) else {})
        except ValueError as exc:
            answer = {"ok": False, "error": f"bad request: {exc}"}
        self.wfile.write(json.dumps(answer).encode() + b"\n")


def call(path: str, request: dict[str, Any], timeout: float = 10.0) -> dict[str, Any]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(path)
        sock.sendall(json.dumps(request).encode() + b"\n")
        answer = json.loads(sock.makefile("rb").readline())
    if not answer.get("ok"):
        raise RuntimeError(f"lazyfs control {request}: {answer.get('error')}")
    return dict(answer)
