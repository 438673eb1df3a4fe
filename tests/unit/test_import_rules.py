"""The dependency direction of docs/ARCHITECTURE.md, checked on the real tree.

- each engine is imported in exactly one place: lmdb by node/lmdb_store.py,
  pysyncobj by raft/, aiohttp's server by http_api/, pyspark by spark_tools/;
- node's core imports none of raft/, http_api/, replication/, spark_tools/;
- those four import node's core, never each other (except the public modules
  listed in ALLOWED_CROSS, and what is under them), never node's composition root;
- nothing imports the composition root.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGES = ("node", "raft", "http_api", "replication", "spark_tools")
OUTER = ("raft", "http_api", "replication", "spark_tools")
COMPOSITION_ROOT = {
    "node.cli_snapshot",
    "node.cli",
    "node.cli_client",
    "node.cli_audit",
    "node.cli_audit_all",
    "node.cli_audit_snapshot",
    "node.cli_redis",
    "node.cli_server",
    "node.server",
    "node.settings",
    "node.cluster_runner",
}
ENGINE_OWNERS = {
    "lmdb": lambda m: m == "node.lmdb_store",
    "pysyncobj": lambda m: m.split(".")[0] == "raft",
    "aiohttp.web": lambda m: m.split(".")[0] == "http_api",
    "pyspark": lambda m: m.split(".")[0] == "spark_tools",
}
# (importer package, imported public module): the Redis replicator writes through the client.
ALLOWED_CROSS: set[tuple[str, str]] = {("replication", "http_api.client")}

REPO = Path(__file__).resolve().parents[2]


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(root: Path, path: Path) -> set[str]:
    """Every module ``path`` imports, relative imports resolved."""
    tree = ast.parse(path.read_text(), filename=str(path))
    me = module_name(root, path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                prefix = ".".join(parts[: len(parts) - (node.level - 1)])
                target = ".".join(p for p in (prefix, node.module) if p)
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
    return found


def is_under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def violations(root: Path) -> list[str]:
    problems: list[str] = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            me = module_name(root, path)
            top = me.split(".")[0]
            for target in sorted(imports_of(root, path)):
                for engine, may_import in ENGINE_OWNERS.items():
                    if is_under(target, engine) and not may_import(me):
                        problems.append(
                            f"{me} imports {target}: only its owner may import {engine}"
                        )
                if target in COMPOSITION_ROOT and me not in COMPOSITION_ROOT:
                    problems.append(f"{me} imports the composition root {target}")
                target_top = target.split(".")[0]
                if target_top in OUTER and target_top != top:
                    if top == "node" and me not in COMPOSITION_ROOT:
                        problems.append(f"node core module {me} imports {target}")
                    elif top in OUTER and not any(
                        pkg == top and is_under(target, public) for pkg, public in ALLOWED_CROSS
                    ):
                        problems.append(f"{me} imports another outer package: {target}")
    return problems


def test_the_tree_follows_the_import_rules() -> None:
    assert violations(REPO) == []


def test_every_package_is_checked() -> None:
    for package in PACKAGES:
        assert (REPO / package / "__init__.py").exists()
    assert any(True for _ in (REPO / "node").rglob("*.py"))


def write(root: Path, rel: str, source: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)


def test_the_checker_catches_each_kind_of_violation(tmp_path: Path) -> None:
    for package in PACKAGES:
        write(tmp_path, f"{package}/__init__.py", "")
    write(tmp_path, "node/commit_log.py", "import lmdb\nfrom raft import log\n")
    write(tmp_path, "node/lmdb_store.py", "import lmdb\n")
    write(tmp_path, "node/cli.py", "import raft.node\nimport http_api.app\n")
    write(tmp_path, "http_api/app.py", "from aiohttp import web\nfrom ..raft import node\n")
    write(tmp_path, "replication/pull.py", "import pyspark.sql\nfrom node import cli\n")
    write(tmp_path, "spark_tools/audit.py", "from pysyncobj import SyncObj\nimport pyspark\n")
    assert violations(tmp_path) == [
        "node.commit_log imports lmdb: only its owner may import lmdb",
        "node core module node.commit_log imports raft",
        "node core module node.commit_log imports raft.log",
        "http_api.app imports another outer package: raft",
        "http_api.app imports another outer package: raft.node",
        "replication.pull imports the composition root node.cli",
        "replication.pull imports pyspark.sql: only its owner may import pyspark",
        "spark_tools.audit imports pysyncobj: only its owner may import pysyncobj",
        "spark_tools.audit imports pysyncobj.SyncObj: only its owner may import pysyncobj",
    ]
