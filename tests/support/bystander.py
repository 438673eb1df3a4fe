"""A well-behaved client beside an attack (issue 15's tests).

:class:`Bystander` writes and reads its own keys in a loop on one node while a
test sends something hostile to the same cluster. It records every answer that
is not a success or a documented refusal (429 or 503), and every key whose
write was acknowledged, so the test can then check that each of them reads back
identically on every node. :func:`peak_rss` reads a process's memory high-water
mark, for the bounds the tests state.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from types import TracebackType
from urllib.parse import quote

from tests.support.cluster import LocalCluster, http, wait_until
from tests.support.processes import memory_bytes

DOCUMENTED_REFUSALS = (429, 503)


def rss_bytes(pid: int) -> int:
    return memory_bytes(pid, "VmRSS")


def peak_rss(pid: int) -> int:
    return memory_bytes(pid, "VmHWM")


@dataclass
class Bystander:
    url: str
    prefix: str = "bystander"
    acknowledged: dict[str, bytes] = field(default_factory=dict)
    unexpected: list[str] = field(default_factory=list)
    refused: int = 0
    served: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Bystander:
        self._thread = threading.Thread(target=self._run, name="bystander", daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(60)

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            key = f"{self.prefix}/{i % 50}"
            value = f"{self.prefix}-{i}".encode()
            try:
                put = http("PUT", f"{self.url}/v1/kv/{quote(key)}", value, timeout=30)
                if put.status == 200:
                    self.acknowledged[key] = value
                    got = http("GET", f"{self.url}/v1/kv/{quote(key)}", timeout=30)
                    self._note("GET", got.status, got.body)
                self._note("PUT", put.status, put.body)
            except OSError as exc:  # refused, reset, timed out: the node did not serve us
                self.unexpected.append(f"{type(exc).__name__}: {exc}")
            i += 1

    def _note(self, what: str, status: int, body: bytes) -> None:
        if status == 200:
            self.served += 1
        elif status in DOCUMENTED_REFUSALS:
            self.refused += 1
        else:
            self.unexpected.append(f"{what} {status}: {body[:200]!r}")

    def check(self, cluster: LocalCluster) -> None:
        """Served at least once, no undocumented answer, and every acknowledged key
        reads back identically on every live node (once each has applied it)."""
        assert self.served > 0, "the bystander was never served"
        assert not self.unexpected, self.unexpected[:10]
        for node in cluster.live():
            for key, value in self.acknowledged.items():
                url = f"{node.url}/v1/kv/{quote(key)}?consistency=stale"

                def reads_back(url: str = url, value: bytes = value) -> bool:
                    answer = http("GET", url)
                    return answer.status == 200 and answer.body == value

                wait_until(reads_back, 30, f"{key} on {node.node_id}")
