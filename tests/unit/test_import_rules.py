"""rkv's import rules (tools/import_rules.py), on the real tree and on small made-up ones.

The rules live in one place, tools/import_rules.py: the rooms and what each may
import, the engines' owners, the engines some rooms may not reach even through
other modules, and no import cycle. These tests check that the tree follows
them, that docs/ARCHITECTURE.md shows the same rules, and that the checker
really catches each kind of broken rule (a checker that never fails proves
nothing).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tools import import_rules
from tools.import_rules import (
    PACKAGES,
    ROOMS,
    cycles,
    import_graph,
    rooms_table,
    violations,
)

REPO = Path(__file__).resolve().parents[2]
TABLE_HEADER = "| folder | job | may import |"


# The real tree.


def test_the_tree_follows_the_import_rules() -> None:
    assert violations(REPO) == []


def test_the_tree_has_no_import_cycle() -> None:
    assert cycles(import_graph(REPO)) == []


def test_every_package_is_a_package() -> None:
    for package in PACKAGES:
        assert (REPO / package / "__init__.py").is_file(), package


def test_every_room_is_a_folder_or_module_of_the_tree() -> None:
    names = {room.name for room in ROOMS}
    for room in ROOMS:
        path = REPO / room.name.replace(".", "/")
        assert path.is_dir() or path.with_suffix(".py").is_file(), room.name
        assert set(room.may_import) <= names, room.name
        assert room.name not in room.may_import, room.name


def test_the_architecture_doc_shows_the_rules_table() -> None:
    doc = (REPO / "docs" / "ARCHITECTURE.md").read_text().splitlines()
    starts = [number for number, line in enumerate(doc) if line == TABLE_HEADER]
    assert len(starts) == 1, "docs/ARCHITECTURE.md should show the rooms table once"
    table: list[str] = []
    for line in doc[starts[0] :]:
        if not line.startswith("|"):
            break
        table.append(line)
    assert "\n".join(table) == rooms_table()


# Made-up trees: each kind of broken rule is caught, and allowed imports are not.


def write_tree(root: Path, files: dict[str, str]) -> Path:
    """Write ``files`` (path -> source) under ``root``, with every package's __init__.py."""
    for package in PACKAGES:
        files.setdefault(f"{package}/__init__.py", "")
    for rel, source in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    for path in list(root.rglob("*.py")):
        for folder in path.relative_to(root).parents:
            init = root / folder / "__init__.py"
            if folder != Path(".") and not init.exists():
                init.write_text("")
    return root


def test_an_engine_imported_outside_its_owner(tmp_path: Path) -> None:
    root = write_tree(
        tmp_path,
        {
            "node/storage/lmdb_store.py": "import lmdb\n",
            "node/storage/commit_log.py": "import lmdb\n",
            "raft/consensus.py": "from pysyncobj import SyncObj\n",
            "spark_tools/engine.py": "from pysyncobj import SyncObj\nimport pyspark.sql\n",
            "replication/redis/loader.py": "from pyspark.sql import SparkSession\n",
            "http_api/app.py": "import aiohttp.web\n",
            "http_api/client/x.py": "import aiohttp\nimport aiohttp.web\n",
        },
    )
    assert violations(root) == [
        "http_api.client.x imports aiohttp.web: only its owner may import aiohttp.web",
        "node.storage.commit_log imports lmdb: only its owner may import lmdb",
        "replication.redis.loader imports pyspark.sql: only its owner may import pyspark",
        "spark_tools.engine imports pysyncobj: only its owner may import pysyncobj",
        "spark_tools.engine reaches pysyncobj through spark_tools.engine",
    ]


def test_from_aiohttp_import_web_is_an_import_of_the_engine(tmp_path: Path) -> None:
    root = write_tree(tmp_path, {"node/state/x.py": "from aiohttp import web\n"})
    assert violations(root) == [
        "node.state.x imports aiohttp.web: only its owner may import aiohttp.web"
    ]


def test_a_lower_room_importing_a_higher_one(tmp_path: Path) -> None:
    root = write_tree(
        tmp_path,
        {
            "node/storage/x.py": "from node.state import y\n",
            "node/state/y.py": "import node.cli.main\n",
            "node/cli/main.py": "import raft.consensus\nfrom node.storage import segment\n",
            "node/storage/segment.py": "from node.errors import StorageError\n",
            "node/errors.py": "",
            "raft/consensus.py": "from node.storage.segment import Segment\n",
        },
    )
    assert violations(root) == [
        "node.state.y (node.state) imports node.cli.main (node.cli)",
        "node.storage.x (node.storage) imports node.state.y (node.state)",
    ]


def test_an_outer_package_importing_another_ones_internals(tmp_path: Path) -> None:
    root = write_tree(
        tmp_path,
        {
            "raft/x.py": "from replication.pull.catch_up import catch_up\n",
            "replication/pull/catch_up.py": "from http_api.client import control\n",
            "http_api/client/control.py": "",
            "http_api/x.py": "from node.storage.record import Record\n",
            "http_api/y.py": "from node.service.types import Record\n",
            "node/storage/record.py": "",
            "node/service/types.py": "from node.storage.record import Record\n",
        },
    )
    assert violations(root) == [
        "http_api.x (http_api) imports node.storage.record (node.storage)",
        "raft.x (raft) imports replication.pull.catch_up (replication.pull)",
    ]


def test_an_import_cycle_counts_imports_inside_functions(tmp_path: Path) -> None:
    root = write_tree(
        tmp_path,
        {
            "node/state/a.py": "from node.state import b\n",
            "node/state/b.py": "import node.state.a\n",
            "node/cli/main.py": "def run() -> None:\n    from node.cli import client\n",
            "node/cli/client.py": "from node.cli.main import run\n",
            "node/cli/serve.py": "from node.cli import main\n",
        },
    )
    assert violations(root) == [
        "import cycle: node.cli.client <-> node.cli.main",
        "import cycle: node.state.a <-> node.state.b",
    ]
    assert cycles(import_graph(root)) == [
        ["node.cli.client", "node.cli.main"],
        ["node.state.a", "node.state.b"],
    ]


def test_relative_imports_are_resolved(tmp_path: Path) -> None:
    root = write_tree(
        tmp_path,
        {
            "node/storage/__init__.py": "from ..cli import main\n",
            "node/storage/record.py": "",
            "node/storage/rel.py": (
                "from . import record\nfrom .record import Record\nfrom ..state import machine\n"
            ),
            "node/state/__init__.py": "from .machine import StateMachine\n",
            "node/state/machine.py": "from ..storage.record import Record\n",
            "node/cli/main.py": "",
        },
    )
    assert import_graph(root)["node.storage.rel"] == {"node.storage.record", "node.state.machine"}
    assert violations(root) == [
        "node.storage (node.storage) imports node.cli.main (node.cli)",
        "node.storage.rel (node.storage) imports node.state.machine (node.state)",
    ]


def test_spark_tools_may_not_reach_lmdb_through_storage(tmp_path: Path) -> None:
    root = write_tree(
        tmp_path,
        {
            "node/storage/lmdb_store.py": "import lmdb\nfrom node.storage import key_order\n",
            "node/storage/key_order.py": "import hashlib\n",
            "node/snapshot/format.py": "from node.storage.key_order import lmdb_key\n",
            "spark_tools/reading.py": "from node.snapshot.format import SnapshotReader\n",
            "spark_tools/scan.py": "from node.storage.lmdb_store import LmdbStore\n",
        },
    )
    assert violations(root) == [
        "spark_tools.scan reaches lmdb through spark_tools.scan -> node.storage.lmdb_store",
    ]


def test_a_module_in_no_room(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A package added to PACKAGES without a room of its own: nothing may import
    # it and it may import nothing of rkv until ROOMS says where it stands.
    monkeypatch.setattr(import_rules, "PACKAGES", (*PACKAGES, "metrics"))
    root = write_tree(
        tmp_path,
        {
            "metrics/export.py": "from node.errors import ConfigError\n",
            "node/errors.py": "",
            "node/service/kv.py": "import metrics.export\n",
        },
    )
    assert violations(root) == [
        "metrics.export imports node.errors: a module in no room",
        "node.service.kv imports metrics.export: a module in no room",
    ]


def test_a_loose_module_at_the_top_of_node_may_import_nothing(tmp_path: Path) -> None:
    # node/ itself is a room that may import nothing: a module that belongs in
    # one of node's rooms cannot sit beside them.
    root = write_tree(
        tmp_path,
        {
            "node/errors.py": "",
            "node/helpers.py": "from node.errors import ConfigError\n",
            "node/storage/segment.py": "from node import helpers\n",
        },
    )
    assert violations(root) == [
        "node.helpers (node) imports node.errors (node.errors)",
        "node.storage.segment (node.storage) imports node.helpers (node)",
    ]
