"""rkv's import rules, checked on a source tree: rooms, layers, engine owners, cycles.

Each module of rkv lives in one *room* (the longest prefix of its name in
:data:`ROOMS`); a room names the rooms it may import. Rules:

- an import between two rooms is allowed only if the importer's room lists
  the imported one (a room may always import itself);
- each engine has one owner (:data:`ENGINE_OWNERS`): lmdb only in
  node/storage/lmdb_store.py, pysyncobj only in raft/, aiohttp.web only in
  http_api/ (outside its client), pyspark only in spark_tools/;
- some rooms may not reach an engine even through other rkv modules
  (:data:`FORBIDDEN_REACH`: the audit reads exports without lmdb);
- no import cycle among rkv's modules.

Imports inside functions count like the ones at the top. ``from a.b import c``
is an import of ``a.b.c`` when that is a module (or an engine, such as
``from aiohttp import web``), else of ``a.b``.

Run ``python -m tools.import_rules [ROOT]`` for the numbers (modules per folder,
the largest module, cycles, imports against the rules) and the table that
docs/ARCHITECTURE.md shows.
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PACKAGES = ("node", "raft", "http_api", "replication", "spark_tools")


@dataclass(frozen=True)
class Room:
    name: str
    job: str
    may_import: tuple[str, ...]


FLOOR = ("node.errors", "node.keyspace", "node.metrics")
_STORAGE = (*FLOOR, "node.storage")

ROOMS: tuple[Room, ...] = (
    Room("node.errors", "rkv's exception tree", ()),
    Room("node.keyspace", "key limits and the reserved internal prefix", ("node.errors",)),
    Room("node.metrics", "the Prometheus counters and histograms, their registry", ()),
    Room("node.storage", "bytes on disk: commit log, LMDB, compaction, recovery", FLOOR),
    Room("node.state", "the deterministic state machine and its commands", _STORAGE),
    Room("node.snapshot", "whole-state files: format, export, restore, install", _STORAGE),
    Room(
        "node.audit",
        "the node side of the consistency audit: the cut's export",
        (*_STORAGE, "node.state", "node.snapshot"),
    ),
    Room(
        "node.service",
        "what the HTTP layer calls: validation, consistency levels",
        (*_STORAGE, "node.state", "node.snapshot", "node.audit"),
    ),
    Room(
        "node.cli",
        "the composition root: the `rkv` commands, settings, wiring",
        (
            *_STORAGE,
            *("node.state", "node.snapshot", "node.audit", "node.service", "raft"),
            *("http_api", "http_api.client", "replication.pull", "replication.redis"),
            "spark_tools",
        ),
    ),
    Room("node", "the node package", ()),
    Room(
        "raft", "consensus over pysyncobj: proposer, membership, markers", (*_STORAGE, "node.state")
    ),
    Room("http_api.client", "the Python client and the control-plane calls", ()),
    Room("http_api", "routes, one error table, OpenAPI", (*FLOOR, "node.state", "node.service")),
    Room(
        "replication.pull",
        "pull replication: catch-up and rebuild from a peer's log",
        (*_STORAGE, "node.snapshot", "http_api.client"),
    ),
    Room("replication.redis", "the Redis replicator", ("http_api.client",)),
    Room("replication", "the replication package", ()),
    Room("spark_tools", "the consistency audit's comparison", (*_STORAGE, "node.snapshot")),
)

ENGINE_OWNERS: dict[str, tuple[str, ...]] = {
    "lmdb": ("node.storage.lmdb_store",),
    "pysyncobj": ("raft",),
    "aiohttp.web": ("http_api",),
    "pyspark": ("spark_tools",),
}
"""engine -> the modules (or packages) that may import it."""

ENGINE_EXCLUDED: dict[str, tuple[str, ...]] = {"aiohttp.web": ("http_api.client",)}
"""engine -> parts of its owner that still may not import it."""

FORBIDDEN_REACH: dict[str, tuple[str, ...]] = {"spark_tools": ("lmdb", "pysyncobj", "aiohttp.web")}
"""room -> engines it may not reach, even through other modules of rkv."""


def is_under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def room_of(module: str) -> Room | None:
    best: Room | None = None
    for room in ROOMS:
        if is_under(module, room.name) and (best is None or len(room.name) > len(best.name)):
            best = room
    return best


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules_of(root: Path) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            found[module_name(root, path)] = path
    return found


def imports_of(module: str, path: Path, known: set[str]) -> set[str]:
    """Every module ``path`` imports (at any depth of the file), relative imports resolved."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
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
            for alias in node.names:
                child = f"{target}.{alias.name}"
                # `from aiohttp import web` imports the engine aiohttp.web itself.
                engine_child = _engine_of(child) is not None and _engine_of(target) is None
                found.add(child if child in known or engine_child else target)
    return found


def import_graph(root: Path) -> dict[str, set[str]]:
    """module -> every module it imports (rkv's and the engines')."""
    modules = modules_of(root)
    known = set(modules)
    return {name: imports_of(name, path, known) for name, path in modules.items()}


def _engine_of(target: str) -> str | None:
    for engine in ENGINE_OWNERS:
        if is_under(target, engine):
            return engine
    return None


def may_import_engine(module: str, engine: str) -> bool:
    owned = any(is_under(module, owner) for owner in ENGINE_OWNERS[engine])
    excluded = any(is_under(module, part) for part in ENGINE_EXCLUDED.get(engine, ()))
    return owned and not excluded


def rule_violations(graph: dict[str, set[str]]) -> list[str]:
    """Imports against the rooms' rules and the engines' owners, one line each."""
    problems: list[str] = []
    for module in sorted(graph):
        mine = room_of(module)
        for target in sorted(graph[module]):
            engine = _engine_of(target)
            if engine is not None:
                if not may_import_engine(module, engine):
                    problems.append(
                        f"{module} imports {target}: only its owner may import {engine}"
                    )
                continue
            if target.split(".")[0] not in PACKAGES:
                continue
            theirs = room_of(target)
            if mine is None or theirs is None:
                problems.append(f"{module} imports {target}: a module in no room")
            elif theirs != mine and theirs.name not in mine.may_import:
                problems.append(f"{module} ({mine.name}) imports {target} ({theirs.name})")
    return problems


def reach_violations(graph: dict[str, set[str]]) -> list[str]:
    """Engines a room reaches through other modules of rkv although it may not."""
    problems: list[str] = []
    for module in sorted(graph):
        room = room_of(module)
        forbidden = FORBIDDEN_REACH.get(room.name, ()) if room else ()
        if not forbidden:
            continue
        for engine, via in _reached_engines(graph, module).items():
            if engine in forbidden:
                problems.append(f"{module} reaches {engine} through {' -> '.join(via)}")
    return problems


def _reached_engines(graph: dict[str, set[str]], start: str) -> dict[str, list[str]]:
    reached: dict[str, list[str]] = {}
    paths: dict[str, list[str]] = {start: [start]}
    stack = [start]
    while stack:
        module = stack.pop()
        for target in sorted(graph.get(module, ())):
            engine = _engine_of(target)
            if engine is not None:
                reached.setdefault(engine, paths[module])
            elif target in graph and target not in paths:
                paths[target] = [*paths[module], target]
                stack.append(target)
    return reached


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles among rkv's modules (strongly connected components, Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(start: str) -> None:
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            module, targets = work[-1]
            for target in targets:
                if target not in graph:
                    continue
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[module] = min(low[module], index[target])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[module])
                if low[module] == index[module]:
                    component: list[str] = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == module:
                            break
                    if len(component) > 1 or module in graph[module]:
                        found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(found)


def violations(root: Path) -> list[str]:
    """Every broken rule of the tree at ``root``, one line each (empty when it follows them)."""
    graph = import_graph(root)
    problems = rule_violations(graph) + reach_violations(graph)
    problems += [f"import cycle: {' <-> '.join(cycle)}" for cycle in cycles(graph)]
    return problems


def rooms_table() -> str:
    """The table of docs/ARCHITECTURE.md: folder -> job -> what it may import."""
    lines = ["| folder | job | may import |", "|---|---|---|"]
    for room in ROOMS:
        folder = room.name.replace(".", "/") + "/"
        may = (
            ", ".join(f"`{name.replace('.', '/')}`" for name in room.may_import) or "nothing of rkv"
        )
        lines.append(f"| `{folder}` | {room.job} | {may} |")
    return "\n".join(lines)


def report(root: Path) -> str:
    modules = modules_of(root)
    graph = import_graph(root)
    sizes = {name: len(path.read_text().splitlines()) for name, path in modules.items()}
    folders = Counter(str(path.parent.relative_to(root)) + "/" for path in modules.values())
    largest = max(sizes, key=lambda name: sizes[name])
    lines = ["modules per folder:"]
    lines += [f"  {folder:28} {count}" for folder, count in sorted(folders.items())]
    lines.append(f"largest module: {largest} ({sizes[largest]} lines)")
    found = cycles(graph)
    lines.append(f"import cycles: {len(found)}")
    lines += [f"  {' <-> '.join(cycle)}" for cycle in found]
    against = rule_violations(graph) + reach_violations(graph)
    lines.append(f"imports against the rules: {len(against)}")
    lines += [f"  {line}" for line in against]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] == "--table":
        sys.stdout.write(rooms_table() + "\n")
        return 0
    root = Path(args[0]) if args else Path(__file__).resolve().parents[1]
    sys.stdout.write(report(root) + "\n")
    return 1 if violations(root) else 0


if __name__ == "__main__":
    sys.exit(main())
