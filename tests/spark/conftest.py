"""One SparkSession for the whole Spark tier (local[1], no UI, loopback, 2 shuffle partitions)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    try:
        from spark_tools.spark_session import get_session, java_problem  # noqa: PLC0415
    except ImportError as exc:
        pytest.skip(f"Spark tests need pyspark: {exc}")
    problem = java_problem()
    if problem is not None:
        pytest.skip(f"Spark tests need Java: {problem}")
    session, owned = get_session(
        "local[1]",
        {"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2"},
    )
    yield session
    if owned:
        session.stop()


@pytest.fixture(params=["python", "spark"])
def engine(request: pytest.FixtureRequest) -> str:
    """Each engine in turn; "spark" brings up the shared session (or skips)."""
    if request.param == "spark":
        request.getfixturevalue("spark")
    return str(request.param)
