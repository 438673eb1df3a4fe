"""`rkv lease`, `rkv lock` and `rkv elect`, run as a user runs them, against real
node processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from http_api.client import LeaseNotFoundError, RkvClient
from tests.support.cluster import LocalCluster, wait_until

RKV = Path(sys.executable).with_name("rkv")

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def kv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    running = LocalCluster(Path(tmp_path_factory.mktemp("cli-leases")) / "cluster")
    try:
        running.start()
        yield running
    finally:
        running.stop()


@pytest.fixture
def client(kv: LocalCluster) -> Iterator[RkvClient]:
    with RkvClient([n.url for n in kv.nodes]) as made:
        yield made


def _env(kv: LocalCluster) -> dict[str, str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("RKV_")}
    return {**environment, "RKV_URL": ",".join(n.url for n in kv.nodes)}


def rkv(kv: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(RKV), *args], capture_output=True, text=True, check=False, timeout=90, env=_env(kv)
    )
    assert "Traceback" not in result.stderr, result.stderr
    return result


def spawn(kv: LocalCluster, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(RKV), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(kv),
    )


def finish(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=60)
    assert "Traceback" not in err, err
    return proc.returncode, out, err


def test_lease_commands(kv: LocalCluster, client: RkvClient) -> None:
    granted = rkv(kv, "lease", "grant", "30")
    assert granted.returncode == 0, granted.stderr
    lease_id = int(granted.stdout)
    client.put("cli/lease/a", "v", lease=lease_id)

    shown = rkv(kv, "lease", "show", str(lease_id))
    assert shown.returncode == 0, shown.stderr
    assert f"lease {lease_id}" in shown.stdout and "key\tcli/lease/a" in shown.stdout
    listed = rkv(kv, "lease", "list")
    assert listed.returncode == 0 and str(lease_id) in listed.stdout.split()
    once = rkv(kv, "lease", "keepalive", str(lease_id), "--once")
    assert once.returncode == 0 and "TTL 30s" in once.stdout

    revoked = rkv(kv, "lease", "revoke", str(lease_id))
    assert revoked.returncode == 0, revoked.stderr
    assert "1 keys deleted" in revoked.stdout
    again = rkv(kv, "lease", "revoke", str(lease_id))
    assert again.returncode == 1 and "lease_" in again.stderr
    assert rkv(kv, "lease", "grant", "0").returncode == 2


def test_lease_keepalive_keeps_it_until_stopped(kv: LocalCluster, client: RkvClient) -> None:
    lease = client.grant_lease(2)
    keeper = spawn(kv, "lease", "keepalive", str(lease.id))
    try:
        # Well past its TTL, the lease is still there: the command renews it.
        for _ in range(8):
            assert keeper.poll() is None
            client.lease_info(lease.id)
            subprocess.run(["sleep", "1"], check=True)
    finally:
        keeper.send_signal(signal.SIGTERM)
    code, _, err = finish(keeper)
    assert code == 0, err
    # Not renewed any more, it expires.
    wait_until(lambda: _gone(client, lease.id), 30, "the lease to expire")

    revoked = client.grant_lease(2)
    keeper = spawn(kv, "lease", "keepalive", str(revoked.id))
    assert keeper.stderr is not None
    assert "kept alive" in keeper.stderr.readline()
    client.revoke(revoked.id)
    code, _, err = finish(keeper)
    assert code == 1 and "ended" in err


def _gone(client: RkvClient, lease_id: int) -> bool:
    try:
        client.lease_info(lease_id)
    except LeaseNotFoundError:
        return True
    return False


def test_lock_runs_the_command_with_its_token(kv: LocalCluster, client: RkvClient) -> None:
    name = "cli/jobs/a"
    ran = rkv(kv, "lock", name, "--", "sh", "-c", 'echo "$RKV_LOCK_TOKEN $RKV_FENCING"')
    assert ran.returncode == 0, ran.stderr
    token, fencing = ran.stdout.split()
    assert fencing == f"{name}={token}" and int(token) > 0
    assert client.lock_info(name).holder is None  # released on the way out

    # The fencing token works for writes from the command, and the status passes through.
    script = 'rkv put cli/lock/k v --fencing "$RKV_FENCING" >/dev/null; exit 7'
    status = rkv(kv, "lock", name, "--ttl", "5", "--", "sh", "-c", script)
    assert status.returncode == 7, status.stderr
    later = rkv(kv, "lock", name, "--", "sh", "-c", 'echo "$RKV_LOCK_TOKEN"')
    assert int(later.stdout) > int(token)


def test_lock_held_elsewhere_times_out_with_exit_2(kv: LocalCluster, client: RkvClient) -> None:
    name = "cli/jobs/busy"
    with client.lock(name, ttl=10) as held:
        refused = rkv(kv, "lock", name, "--timeout", "1", "--", "true")
    assert refused.returncode == 2
    assert f"not had within 1s (held with token {held.token})" in refused.stderr
    assert rkv(kv, "lock", "bad name", "--", "true").returncode == 2
    assert rkv(kv, "lock", name).returncode == 2  # no command


def test_lock_lost_stops_the_command_with_exit_3(
    kv: LocalCluster, client: RkvClient, tmp_path: Path
) -> None:
    name = "cli/jobs/lost"
    marker = tmp_path / "terminated"
    script = f"trap 'touch {marker}; exit 0' TERM; while true; do sleep 0.1; done"
    proc = spawn(kv, "lock", name, "--ttl", "2", "--", "sh", "-c", script)
    holder = wait_until(lambda: client.lock_info(name).holder, 30, "the lock to be held")
    client.revoke(holder.lease_id)
    code, _, err = finish(proc)
    assert code == 3
    assert "the lock was lost" in err
    assert marker.exists()  # the command got SIGTERM


def test_elect_leads_until_stopped_and_observe_prints_leaders(
    kv: LocalCluster, client: RkvClient
) -> None:
    name = "cli/leader"
    observer = spawn(kv, "elect", "--observe", name)
    assert observer.stdout is not None
    assert observer.stdout.readline().strip() == f"no leader of {name}"

    candidate = spawn(kv, "elect", name, "node-a", "--ttl", "5")
    assert candidate.stdout is not None
    line = candidate.stdout.readline().strip()
    assert line.startswith(f"leader {name}: node-a (token ")
    leader = client.leader(name)
    assert leader is not None and leader.value == "node-a"
    assert observer.stdout.readline().strip() == line

    candidate.send_signal(signal.SIGTERM)
    code, _, err = finish(candidate)
    assert code == 0, err
    assert observer.stdout.readline().strip() == f"no leader of {name}"
    assert client.leader(name) is None
    observer.send_signal(signal.SIGINT)
    code, _, err = finish(observer)
    assert code == 0, err


def test_elect_exits_3_when_the_leadership_is_lost(kv: LocalCluster, client: RkvClient) -> None:
    name = "cli/leader-lost"
    candidate = spawn(kv, "elect", name, "node-a", "--ttl", "2")
    assert candidate.stdout is not None
    assert candidate.stdout.readline().startswith(f"leader {name}: node-a")
    leader = client.leader(name)
    assert leader is not None
    client.revoke(leader.lease_id)
    code, _, err = finish(candidate)
    assert code == 3 and "lost" in err
