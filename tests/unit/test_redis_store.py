"""replication/redis/batch.py's RkvStore: how the replicator's commits meet rkv's
refusals (a client standing in for rkv)."""

from __future__ import annotations

import pytest

from http_api.client import NoSpaceError
from replication.redis import batch
from replication.redis.checkpoint import Checkpoint


def test_a_commit_refused_for_a_nospace_alarm_waits_and_goes_through_once_disarmed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """507 no_space wrote nothing: the replicator waits (it does not stop) and sends the
    same guarded transaction again."""
    answers: list[object] = [NoSpaceError("no space: member n2 raised a NOSPACE alarm")] * 2
    answers.append({"succeeded": True, "results": [{"version": 7}]})
    sent: list[dict[str, object]] = []

    class Client:
        def txn_raw(self, body: dict[str, object], fencing: object = None) -> object:
            sent.append(body)
            answer = answers.pop(0)
            if isinstance(answer, Exception):
                raise answer
            return answer

    monkeypatch.setattr(batch, "_NO_SPACE_PAUSE", 0.0)
    store = batch.RkvStore(Client(), "redis-test")  # type: ignore[arg-type]
    checkpoint = Checkpoint("replid", 10, 0, 1, "streaming")
    assert store.commit({b"k": b"v"}, checkpoint, 3) == 7
    assert len(sent) == 3 and sent[0] == sent[2]
