from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cluster import LocalCluster


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    """A fresh 3-node cluster of real processes, stopped by PID afterwards."""
    running = LocalCluster(tmp_path / "cluster")
    try:
        running.start()
        yield running
    finally:
        running.stop()
