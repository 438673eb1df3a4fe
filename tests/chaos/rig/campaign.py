"""A campaign: a workload under scheduled faults, then healing and every check.

1. Clients contend on a few keys (tests/chaos/rig/workload.py), idempotent
   producers increment a counter (http_api/client producers), and, when asked,
   lock clients contend for one lock and write under it with fencing tokens
   (tests/chaos/rig/lock_workload.py), while
2. nemeses (tests/chaos/rig/nemesis.py), picked by a seeded RNG, are injected,
   held, and healed, with quiet periods between. After each injection and
   each heal, a probe measures how long until the cluster accepts a write.
3. Then everything heals and the checks run:
   - every key's history is linearizable (tests/chaos/rig/checker.py), stale
     reads saw real values, no acknowledged write is lost (a final
     linearizable read of every key is part of the history);
   - the replicas converge: every node's keys, values and versions identical;
   - the cluster accepts writes again within a bound;
   - the counter equals the increments its producers were told succeeded;
   - with the lock workload, the lock's history and its log key
     (tests/chaos/rig/lock_checker.py): tokens strictly increase, holders'
     writes never interleave, no stale token is accepted, no acknowledged
     write is lost.
"""

from __future__ import annotations

import random
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from http_api.client import Credentials, RkvClient
from tests.chaos.rig.checker import Report, check_history
from tests.chaos.rig.history import History
from tests.chaos.rig.lock_workload import LockWorkload
from tests.chaos.rig.nemesis import Nemesis, Network, build
from tests.chaos.rig.workload import Workload, WorkloadConfig, final_reads
from tests.support.cluster import TEST_AUTH, LocalCluster, http, scan_all

COUNTER_KEY = "chaos-counter"
PROBE_TIMEOUT = 60.0
CONVERGE_TIMEOUT = 90.0


@dataclass
class FaultRecord:
    nemesis: str
    action: str
    injected_at: float
    healed_at: float | None = None
    writes_back_after_inject: float | None = None
    writes_back_after_heal: float | None = None


@dataclass
class CampaignResult:
    seed: int
    duration: float
    nemeses: list[str]
    operations: dict[str, int]
    faults: list[FaultRecord]
    anomalies: list[dict[str, Any]]
    checked_ops: int
    converged: bool
    convergence_detail: str
    writes_after_heal_s: float | None
    counter: dict[str, Any]
    history: History = field(default_factory=History, repr=False)
    locks: dict[str, int] = field(default_factory=dict)
    """The lock checker's counts (empty without the lock workload)."""
    lock_workload: LockWorkload | None = field(default=None, repr=False)

    @property
    def passed(self) -> bool:
        return not self.anomalies and self.converged and self.counter.get("exact", False)

    def leader_kill_recovery(self) -> list[float]:
        return [
            f.writes_back_after_inject
            for f in self.faults
            if f.nemesis == "kill" and "(leader)" in f.action and f.writes_back_after_inject
        ]

    def summary(self) -> dict[str, Any]:
        recoveries = self.leader_kill_recovery()
        return {
            "seed": self.seed,
            "passed": self.passed,
            "duration_s": round(self.duration, 1),
            "operations": self.operations,
            "checked_ops": self.checked_ops,
            "faults": len(self.faults),
            "faults_by_kind": _count(f.nemesis for f in self.faults),
            "anomalies": len(self.anomalies),
            "converged": self.converged,
            "leader_kill_recovery_s": {
                "count": len(recoveries),
                "p50": round(statistics.median(recoveries), 3) if recoveries else None,
                "max": round(max(recoveries), 3) if recoveries else None,
            },
            "writes_after_heal_s": self.writes_after_heal_s,
            "counter": self.counter,
            **({"locks": self.locks} if self.locks else {}),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "summary": self.summary(),
            "faults": [asdict(f) for f in self.faults],
            "anomalies": self.anomalies,
            "convergence_detail": self.convergence_detail,
        }


def _count(items: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for item in items:
        counts[item] = counts.get(item, 0) + 1
    return counts


def probe_write(cluster: LocalCluster, timeout: float = PROBE_TIMEOUT) -> float | None:
    """Seconds until some live node accepts a write (None: not within ``timeout``)."""
    started = time.monotonic()
    attempt = 0
    while time.monotonic() - started < timeout:
        for node in cluster.live():
            attempt += 1
            try:
                answer = http("PUT", f"{node.url}/v1/kv/chaos-probe", b"%d" % attempt, timeout=2)
            except OSError:
                continue
            if answer.status == 200:
                return time.monotonic() - started
        time.sleep(0.05)
    return None


class _Counters:
    """Idempotent producers incrementing one counter; they count acknowledgements."""

    def __init__(
        self, urls: list[str], producers: int, credentials: Credentials | None = None
    ) -> None:
        self.credentials = credentials
        self.acked = 0
        self.failures: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(urls,), daemon=True) for _ in range(producers)
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=180)
            if thread.is_alive():
                self.failures.append("a producer did not finish within 180 s")

    def _run(self, urls: list[str]) -> None:
        try:
            with RkvClient(urls, timeout=3.0, credentials=self.credentials) as client:
                producer = client.producer(deadline=150.0)
                while not self._stop.is_set():
                    producer.incr(COUNTER_KEY)
                    with self._lock:
                        self.acked += 1
                    time.sleep(0.01)
        except Exception as exc:  # reported as a failure of the campaign
            self.failures.append(f"{type(exc).__name__}: {exc}")


def _heal_everything(cluster: LocalCluster, network: Network | None) -> None:
    if network is not None:
        network.heal()
    for i, node in enumerate(cluster.nodes):
        if node.stopped_with_sigstop:
            cluster.resume(i)
        if not node.alive:
            cluster.start_node(i)
    cluster.wait_ready(120, nodes=cluster.nodes)


def _states(cluster: LocalCluster) -> list[dict[bytes, tuple[bytes, int]]]:
    states = []
    for node in cluster.nodes:
        items = scan_all(node.url, b"chaos", query="consistency=stale")
        states.append({i["key"]: (i["value"], i["version"]) for i in items})
    return states


def _converge(cluster: LocalCluster) -> tuple[bool, str]:
    deadline = time.monotonic() + CONVERGE_TIMEOUT
    detail = ""
    while time.monotonic() < deadline:
        try:
            states = _states(cluster)
        except (AssertionError, OSError) as exc:
            detail = f"scan failed: {exc}"
            time.sleep(0.5)
            continue
        if all(state == states[0] for state in states[1:]):
            return True, f"{len(states[0])} keys identical (values and versions) on every node"
        differing = {
            key.decode(errors="replace")
            for state in states[1:]
            for key in set(state) | set(states[0])
            if state.get(key) != states[0].get(key)
        }
        detail = f"keys differing: {sorted(differing)[:10]}"
        time.sleep(0.5)
    return False, detail


def run_campaign(
    cluster: LocalCluster,
    network: Network | None,
    *,
    duration: float,
    nemeses: list[str],
    seed: int,
    config: WorkloadConfig | None = None,
    counter_producers: int = 2,
    progress: Callable[[str], None] = lambda message: None,
    credentials: Credentials | None = None,
    lock_clients: int = 0,
) -> CampaignResult:
    """``credentials``: what the idempotent producers present (a TLS cluster's CA, a
    token); the workload's requests use tests.support.cluster.http's defaults, and so
    do the lock clients (``lock_clients`` processes; 0: no lock workload)."""
    rng = random.Random(seed)
    config = config or WorkloadConfig()
    history = History()
    locks = None
    if lock_clients:
        locks = LockWorkload(
            [n.url for n in cluster.nodes],
            cluster.base_dir / "locks",
            history.started,
            clients=lock_clients,
            seed=seed,
            headers=dict(TEST_AUTH),
            ca_file=str(cluster.ca_file) if cluster.tls is not None else None,
        )
    enabled: list[Nemesis] = build(nemeses, cluster, network, locks)
    workload = Workload(lambda: [n.url for n in cluster.nodes], config, seed, history)
    counters = _Counters([n.url for n in cluster.nodes], counter_producers, credentials)
    faults: list[FaultRecord] = []
    started = time.monotonic()
    workload.start()
    counters.start()
    try:
        if locks is not None:
            locks.start()
        while time.monotonic() - started < duration:
            time.sleep(rng.uniform(1.0, 3.0))
            if not enabled or time.monotonic() - started >= duration:
                continue
            nemesis = rng.choice(enabled)
            record = FaultRecord(nemesis.name, "", history.now())
            record.action = nemesis.inject(rng)
            progress(f"{history.now():7.1f}s {record.action}")
            faults.append(record)
            if nemesis.lasting:
                hold_until = time.monotonic() + rng.uniform(2.0, 6.0)
                record.writes_back_after_inject = probe_write(cluster, timeout=8.0)
                time.sleep(max(0.0, hold_until - time.monotonic()))
                nemesis.heal()
                record.healed_at = history.now()
                record.writes_back_after_heal = probe_write(cluster)
            else:
                record.writes_back_after_inject = probe_write(cluster)
    finally:
        workload.stop()
        counters.stop()
        if locks is not None:
            locks.stop()
    progress(f"{history.now():7.1f}s healing; final reads and checks")
    _heal_everything(cluster, network)
    writes_after_heal = probe_write(cluster)
    leader = cluster.leader(timeout=60)
    finals = final_reads(history, leader.url, config.keys)
    converged, detail = _converge(cluster)
    report: Report = check_history(history.ops, finals)
    anomalies = [asdict(a) for a in report.anomalies]
    lock_counts: dict[str, int] = {}
    if locks is not None:
        lock_report = locks.check(leader.url)
        anomalies += [asdict(a) for a in lock_report.anomalies]
        lock_counts = lock_report.counts
    counted_raw = http("GET", f"{leader.url}/v1/kv/{COUNTER_KEY}")
    counted = int(counted_raw.body) if counted_raw.status == 200 else 0
    counter = {
        "acknowledged": counters.acked,
        "counted": counted,
        "exact": counted == counters.acked and not counters.failures,
        "failures": counters.failures[:5],
    }
    return CampaignResult(
        seed=seed,
        duration=time.monotonic() - started,
        nemeses=nemeses,
        operations=_count(f"{op.kind}:{op.outcome}" for op in history.ops),
        faults=faults,
        anomalies=anomalies,
        checked_ops=report.checked_ops,
        converged=converged,
        convergence_detail=detail,
        writes_after_heal_s=writes_after_heal,
        counter=counter,
        history=history,
        locks=lock_counts,
        lock_workload=locks,
    )


def assert_passed(result: CampaignResult) -> None:
    """Fail with the summary, the anomalies' history excerpts or what did not converge."""
    summary = result.summary()
    assert result.faults, "the campaign injected no fault"
    assert result.history.ops and result.checked_ops > 100, summary
    excerpts = "\n".join(
        f"{a['kind']} {a['key']}: {a['message']}\n  " + "\n  ".join(a["excerpt"])
        for a in result.anomalies
    )
    assert result.anomalies == [], excerpts
    assert result.converged, result.convergence_detail
    assert result.writes_after_heal_s is not None
    assert result.counter["exact"], result.counter
