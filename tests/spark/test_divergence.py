"""Classifying one key's observations across replicas (spark_tools/divergence.py)."""

from __future__ import annotations

from spark_tools.divergence import Observation, classify, replay_class

A: Observation = (5, "aa")
A_LATER: Observation = (6, "aa")
B: Observation = (5, "bb")


def test_agreement_is_no_finding() -> None:
    assert classify([A, A, A]) == []
    assert classify([None, None]) == []


def test_the_odd_replica_is_named_against_the_majority() -> None:
    assert classify([A, None, A]) == [("missing", 1)]
    assert classify([None, A, None]) == [("extra", 1)]
    assert classify([A, A, B]) == [("value_differs", 2)]
    assert classify([A_LATER, A, A]) == [("version_differs", 0)]
    # A value differing counts as value_differs whatever the version.
    assert classify([A, A, (9, "bb")]) == [("value_differs", 2)]


def test_several_odd_replicas_under_one_majority() -> None:
    assert classify([A, A, A, None, B]) == [("missing", 3), ("value_differs", 4)]


def test_no_strict_majority() -> None:
    assert classify([A, B]) == [("no_majority", None)]
    assert classify([A, None]) == [("no_majority", None)]
    assert classify([A, B, None]) == [("no_majority", None)]
    assert classify([A, A, B, B]) == [("no_majority", None)]


def test_replay_classes() -> None:
    assert replay_class(A, A) is None
    assert replay_class(None, None) is None
    assert replay_class(A, None) == "not_in_log"
    assert replay_class(None, A) == "not_in_state"
    assert replay_class(A, B) == "value_differs"
    assert replay_class(A_LATER, A) == "version_differs"
