"""The Python client's leases, locks and elections against real node processes.

One cluster serves the module; every test uses its own names.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from http_api.client import (
    AsyncRkvClient,
    Fenced,
    KeyNotFoundError,
    LeaseLost,
    LeaseNotFoundError,
    LockHeldError,
    LockHolder,
    LockLost,
    NotLockHolderError,
    Op,
    RkvClient,
)
from tests.support.cluster import LocalCluster, wait_until

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def kv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    running = LocalCluster(Path(tmp_path_factory.mktemp("leases")) / "cluster")
    try:
        running.start()
        yield running
    finally:
        running.stop()


@pytest.fixture
def client(kv: LocalCluster) -> Iterator[RkvClient]:
    with RkvClient([n.url for n in kv.nodes]) as made:
        yield made


def _other(kv: LocalCluster) -> RkvClient:
    return RkvClient([n.url for n in kv.nodes])


def test_a_kept_lease_outlives_its_ttl_and_ends_with_its_block(
    kv: LocalCluster, client: RkvClient
) -> None:
    with client.lease(2) as lease:
        assert lease.ttl == 2
        client.put("lease/kept/a", "v", lease=lease)
        client.txn(success=[Op.put("lease/kept/b", "w", lease=lease.id)])
        time.sleep(8)  # four TTLs: only the keepalives keep it
        assert not lease.lost.is_set()
        assert client.get("lease/kept/a").value == b"v"
        info = client.lease_info(lease)
        assert set(info.keys) == {b"lease/kept/a", b"lease/kept/b"}
        assert lease.id in [found.id for found in client.leases()]
    # Leaving the block revoked it: its keys are gone, and it cannot be renewed.
    assert lease.ended and lease.reason is None
    with pytest.raises(KeyNotFoundError):
        client.get("lease/kept/a")
    with pytest.raises(LeaseNotFoundError):
        client.keepalive(lease)


def test_a_batch_keepalive_answers_each_lease(client: RkvClient) -> None:
    alive, ended = client.grant_lease(30), client.grant_lease(30)
    client.revoke(ended)
    renewals = client.keepalive_many([alive, ended.id])
    assert [(r.lease_id, r.renewed) for r in renewals] == [(alive.id, True), (ended.id, False)]
    assert renewals[0].ttl == 30 and renewals[1].code == "lease_expired"
    client.revoke(alive)


def test_a_lease_revoked_elsewhere_is_reported_lost(kv: LocalCluster, client: RkvClient) -> None:
    with pytest.raises(LeaseLost) as caught, client.lease(2) as lease:
        with _other(kv) as other:
            assert other.revoke(lease.id) == 0
        assert lease.lost.wait(30)
    assert caught.value.lease_id == lease.id
    assert caught.value.code in ("lease_expired", "lease_not_found")


def test_a_key_put_with_a_ttl_goes_away(client: RkvClient) -> None:
    client.put("lease/ttl/a", "v", ttl=1)
    assert client.get("lease/ttl/a").value == b"v"

    def gone() -> bool:
        try:
            client.get("lease/ttl/a")
        except KeyNotFoundError:
            return True
        return False

    wait_until(gone, 30, "the key of an expired ttl lease to go")


def test_contending_clients_get_increasing_tokens_and_never_hold_at_once(
    kv: LocalCluster,
) -> None:
    name = "jobs/contended"
    guard = threading.Lock()
    holding: list[str] = []
    tokens: list[int] = []
    overlaps: list[str] = []
    errors: list[BaseException] = []

    def worker(me: str) -> None:
        try:
            with _other(kv) as mine:
                for i in range(5):
                    with mine.lock(name, ttl=5) as held:
                        with guard:
                            if holding:
                                overlaps.append(f"{me} entered while {holding} held it")
                            holding.append(me)
                            tokens.append(held.token)
                        # A write under the lock, fenced with its token.
                        mine.put(f"lease/contended/{me}", str(i), fencing=held)
                        time.sleep(0.05)
                        with guard:
                            holding.remove(me)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=worker, args=(f"w{i}",)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(150)
    assert not errors, errors
    assert not overlaps, overlaps
    assert len(tokens) == 10
    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens)


def test_a_write_fenced_with_an_old_token_is_refused(kv: LocalCluster, client: RkvClient) -> None:
    name = "jobs/fenced"
    with client.lock(name, ttl=10) as first:
        client.put("lease/fenced/k", "first", fencing=first)
        holder = client.lock_info(name).holder
        assert holder is not None and (holder.lease_id, holder.token) == (
            first.lease_id,
            first.token,
        )
    # Nobody holds it now: the old token fences nothing.
    with pytest.raises(Fenced) as nobody:
        client.put("lease/fenced/k", "late", fencing=first)
    assert nobody.value.token is None
    with _other(kv) as other, other.lock(name, ttl=10) as second:
        assert second.token > first.token
        for write in (
            lambda: client.put("lease/fenced/k", "stale", fencing=first),
            lambda: client.delete("lease/fenced/k", fencing=first),
            lambda: client.txn(success=[Op.put("lease/fenced/k", "t")], fencing=first),
        ):
            with pytest.raises(Fenced) as refused:
                write()
            assert refused.value.token == second.token
        other.put("lease/fenced/k", "second", fencing=second)
    assert client.get("lease/fenced/k").value == b"second"


def test_a_lock_held_elsewhere_times_out(kv: LocalCluster, client: RkvClient) -> None:
    name = "jobs/busy"
    with _other(kv) as other, other.lock(name, ttl=10) as held:
        before = {lease.id for lease in client.leases()}
        with pytest.raises(LockHeldError) as timed_out, client.lock(name, timeout=1):
            pass
        assert timed_out.value.token == held.token
        info = client.lock_info(name)
        assert info.waiters == 0 and info.holder is not None
        assert info.holder.token == held.token
        # The lease granted for the attempt was revoked on the way out.
        assert {lease.id for lease in client.leases()} == before


def test_a_lock_lost_while_held_is_raised(kv: LocalCluster, client: RkvClient) -> None:
    with pytest.raises(LockLost) as caught, client.lock("jobs/lost", ttl=2) as held:
        with _other(kv) as other:
            other.revoke(held.lease_id)
        assert held.lost.wait(30)
        with pytest.raises(Fenced):
            client.put("lease/lost/k", "v", fencing=held)
    assert (caught.value.name, caught.value.token) == ("jobs/lost", held.token)


def test_an_election_campaign_and_its_observers(kv: LocalCluster, client: RkvClient) -> None:
    name = "jobs/leader"
    seen: queue.Queue[LockHolder | None] = queue.Queue()
    stop = threading.Event()

    def observe() -> None:
        with _other(kv) as watcher:
            for leader in watcher.observe(name):
                seen.put(leader)
                if stop.is_set():
                    return

    threading.Thread(target=observe, daemon=True).start()
    assert seen.get(timeout=30) is None  # nobody leads yet
    assert client.leader(name) is None

    first = client.election(name, ttl=5)
    with first:
        won = first.campaign("node-a")
        assert won.value == "node-a" and first.leadership == won
        observed = seen.get(timeout=30)
        assert observed is not None
        assert (observed.lease_id, observed.token, observed.value) == (
            won.lease_id,
            won.token,
            "node-a",
        )
        first.proclaim("node-a2")
        assert seen.get(timeout=30).value == "node-a2"  # type: ignore[union-attr]

        with _other(kv) as other_client:
            second = other_client.election(name, ttl=5)
            with pytest.raises(LockHeldError):
                second.campaign("node-b", timeout=0)
            result: list[LockHolder] = []
            campaigning = threading.Thread(target=lambda: result.append(second.campaign("node-b")))
            campaigning.start()
            first.resign()
            campaigning.join(60)
            assert result and result[0].value == "node-b" and result[0].token > won.token
            stop.set()
            leader = client.leader(name)
            assert leader is not None and leader.value == "node-b"
            observed = seen.get(timeout=30)
            while observed is None or observed.value != "node-b":  # a gap may show first
                observed = seen.get(timeout=30)
            second.resign()
    with pytest.raises(NotLockHolderError):
        first.proclaim("late")


def test_the_async_client_keeps_leases_and_holds_locks(kv: LocalCluster) -> None:
    async def scenario() -> None:
        async with AsyncRkvClient([n.url for n in kv.nodes]) as client:
            async with client.lease(2) as lease:
                await client.put("lease/async/a", "v", lease=lease)
                await asyncio.sleep(6)
                assert not lease.lost.is_set()
                assert (await client.get("lease/async/a")).value == b"v"
            with pytest.raises(KeyNotFoundError):
                await client.get("lease/async/a")
            async with client.lock("jobs/async", ttl=5) as held:
                await client.put("lease/async/b", "w", fencing=held)
                info = await client.lock_info("jobs/async")
                assert info.holder is not None and info.holder.token == held.token
            with pytest.raises(LockLost):
                async with client.lock("jobs/async", ttl=2) as held:
                    await client.revoke(held.lease_id)
                    await asyncio.wait_for(held.lost.wait(), 30)
            election = client.election("jobs/async-leader", ttl=5)
            async with election:
                won = await election.campaign("a")
                observed = client.observe("jobs/async-leader")
                first = await asyncio.wait_for(anext(observed), 30)
                assert first is not None and first.token == won.token
                await observed.aclose()  # type: ignore[attr-defined]
            assert await client.leader("jobs/async-leader") is None

    asyncio.run(scenario())


def test_lock_waits_fit_a_servers_lower_max_lock_wait(tmp_path: Path) -> None:
    """A node with --max-lock-wait 2 refuses the client's default wait (300 s): the
    client learns the limit from the refusal and waits in 2 s chunks."""
    small = LocalCluster(tmp_path / "cluster", size=1, extra_args=["--max-lock-wait", "2"])
    try:
        small.start()
        with RkvClient(small.nodes[0].url) as first, RkvClient(small.nodes[0].url) as second:
            name = "jobs/short-waits"
            with first.lock(name, ttl=10) as held:
                with pytest.raises(LockHeldError) as timed_out, second.lock(name, timeout=5):
                    pass
                assert timed_out.value.token == held.token
                got: list[int] = []
                waiter = threading.Thread(
                    target=lambda: got.append(_hold_once(second, name)), daemon=True
                )
                waiter.start()
                time.sleep(5)  # the waiter asks again at least twice meanwhile
                assert not got
            waiter.join(60)
            assert got and got[0] > held.token
    finally:
        small.stop()


def _hold_once(client: RkvClient, name: str) -> int:
    with client.lock(name, ttl=10) as held:
        return held.token
