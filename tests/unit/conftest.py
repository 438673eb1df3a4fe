from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from node.storage.config import FsyncPolicy, StorageConfig
from node.storage.recovery import NodeStorage, open_storage


@pytest.fixture
def small_config() -> StorageConfig:
    """Tiny segments and a dense index, so rolls and index searches happen in small tests."""
    return StorageConfig(
        segment_bytes=4096,
        index_interval_bytes=256,
        fsync=FsyncPolicy.ON_SYNC,
        lmdb_map_size=1024 * 1024,
    )


@pytest.fixture
def storage(tmp_path: Path, small_config: StorageConfig) -> Iterator[NodeStorage]:
    opened = open_storage(tmp_path / "node", small_config)
    yield opened
    opened.close()
