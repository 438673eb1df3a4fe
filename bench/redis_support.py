"""What the Redis benchmarks share: a minimal RESP connection and the replicator's
checkpoint as rkv's ``GET /v1/checkpoints`` shows it."""

from __future__ import annotations

import json
import socket
from typing import Any

from bench.rkv_cluster import RkvCluster
from bench.support import BenchError, http_json


class Resp:
    """The few RESP calls the benchmark needs (pipelined sends, replies read back)."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=120)
        self.buffer = b""

    def _line(self) -> bytes:
        while b"\r\n" not in self.buffer:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise BenchError("redis closed the connection")
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\r\n")
        return line

    def _reply(self) -> Any:
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"$":
            size = int(rest)
            if size < 0:
                return None
            while len(self.buffer) < size + 2:
                self.buffer += self.sock.recv(1 << 20)
            data, self.buffer = self.buffer[:size], self.buffer[size + 2 :]
            return data
        if kind == b"*":
            return [self._reply() for _ in range(int(rest))]
        if kind == b"-":
            raise BenchError(f"redis error: {rest.decode()}")
        return rest

    def pipeline(self, commands: list[list[str]]) -> list[Any]:
        out = bytearray()
        for command in commands:
            out += b"*%d\r\n" % len(command)
            for arg in command:
                data = arg.encode()
                out += b"$%d\r\n%s\r\n" % (len(data), data)
        self.sock.sendall(out)
        return [self._reply() for _ in commands]

    def call(self, *args: str) -> Any:
        return self.pipeline([list(args)])[0]

    def offset(self) -> int:
        info = self.call("INFO", "replication").decode()
        return int(info.split("master_repl_offset:")[1].split()[0])


class Checkpoints:
    def __init__(self, cluster: RkvCluster, prefix: str) -> None:
        self.cluster = cluster
        self.name = f"redis:{prefix}"

    def read(self) -> dict[str, Any] | None:
        answer = http_json(f"{self.cluster.leader_url}/v1/checkpoints?encoding=utf-8")
        for item in answer["checkpoints"]:
            if item["name"] == self.name:
                found: dict[str, Any] = json.loads(item["value"])
                return found
        return None

    def committed(self) -> int:
        found = self.read()
        return 0 if found is None or found["state"] != "streaming" else int(found["offset"])
