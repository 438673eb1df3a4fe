"""Where the replicator asks a master to resume (replication/redis/resume.py): Redis's
own +CONTINUE test on INFO replication, and the latest equivalent point it holds."""

from __future__ import annotations

from replication.redis.link.types import ReplicatedCommand
from replication.redis.resume import MasterHistory, ResumePoints

OLD, NEW = "a" * 40, "b" * 40


def command(*args: bytes, end: int) -> ReplicatedCommand:
    return ReplicatedCommand(list(args), end)


def test_continues_follows_redis_psync_rules() -> None:
    # bytes 1001..5000 in the backlog; OLD's history ends at 4000
    promoted = MasterHistory(NEW, OLD, 5000, 4001, 1001, 4000)
    assert promoted.continues(OLD, 4000) and promoted.continues(OLD, 1000)
    assert not promoted.continues(OLD, 4001)  # past the old history
    assert not promoted.continues(OLD, 999)  # before the backlog
    assert promoted.continues(NEW, 4999) and promoted.continues(NEW, 5000)
    assert not promoted.continues("c" * 40, 2000)


def test_after_a_data_change_only_neutral_points_are_offered() -> None:
    points = ResumePoints()
    points.start(100, 0)
    points.note(command(b"SET", b"k", b"v", end=200), False, 0)
    for end in (214, 300, 314):  # PING, PUBLISH (hello), PING
        points.note(command(b"PUBLISH", b"c", b"m", end=end), False, 0)
    points.committed(OLD, 314)

    def history_ending_at(end: int, first: int = 1) -> MasterHistory:
        return MasterHistory(NEW, OLD, end + 500, end + 1, first, end + 501 - first)

    # the new master holds the old stream up to 300: resume after 300, same state as 314
    assert points.choose(OLD, 314, lambda: history_ending_at(300)) == (300, 0)
    # ... up to 250: after the first PING (214); up to 210: after the SET (200)
    assert points.choose(OLD, 314, lambda: history_ending_at(250)) == (214, 0)
    assert points.choose(OLD, 314, lambda: history_ending_at(210)) == (200, 0)
    # ... only up to 150: nothing of the same state; the checkpoint (a full resync)
    assert points.choose(OLD, 314, lambda: history_ending_at(150)) is None
    # a backlog that starts late (a master resynced in full at 290)
    assert points.choose(OLD, 314, lambda: history_ending_at(305, first=291)) == (300, 0)
    # the checkpoint itself continues: no change; unknown history or checkpoint: none
    assert points.choose(OLD, 314, lambda: history_ending_at(400)) is None
    assert points.choose(OLD, 314, lambda: None) is None
    assert points.choose(OLD, 999, lambda: history_ending_at(300)) is None


def test_a_select_or_an_open_multi_block_is_not_a_point_of_the_same_state() -> None:
    points = ResumePoints()
    points.start(100, 0)
    points.note(command(b"SELECT", b"3", end=150), False, 3)
    points.note(command(b"MULTI", end=160), True, 3)
    points.note(command(b"PING", end=170), True, 3)  # inside the block: not a point
    points.note(command(b"SET", b"k", b"v", end=200), True, 3)
    points.note(command(b"EXEC", end=210), False, 3)
    points.note(command(b"PING", end=224), False, 3)
    points.committed(OLD, 224)

    def history(end: int) -> MasterHistory:
        return MasterHistory(NEW, OLD, 9999, end + 1, 1, 9999)  # a backlog of it all

    assert points.choose(OLD, 224, lambda: history(215)) == (210, 3)
    assert points.choose(OLD, 224, lambda: history(205)) is None  # inside the block
