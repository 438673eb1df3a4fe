"""Small replicas' exports for the audit tests, one builder per case.

The base history: puts of k00..k39 (offsets 1-40), then delete k03 (41),
k05, k10, k20 rewritten (42-44), k30 put again with the same value (45),
delete k35 (46). Its state has 38 keys in 4 buckets; the cut is raft index
60, offset 46.
"""

from __future__ import annotations

from pathlib import Path

from node.storage.record import Record
from tests.spark.exports import (
    State,
    even_splits,
    history,
    put,
    replay,
    write_export,
)

AUDIT = "a1"
RAFT_INDEX = 60
REPLICAS = ("n1", "n2", "n3")

BASE_WRITES: list[tuple[bytes, bytes | None]] = [
    *((f"k{i:02d}".encode(), f"v0-{i}".encode()) for i in range(40)),
    (b"k03", None),
    (b"k05", b"v1-5"),
    (b"k10", b"v1-10"),
    (b"k20", b"v1-20"),
    (b"k30", b"v0-30"),
    (b"k35", None),
]
BASE_LOG = history(BASE_WRITES)
BASE_STATE = replay(BASE_LOG)
APPLIED_OFFSET = len(BASE_LOG)
SPLITS = even_splits([f"k{i:02d}".encode() for i in range(40)], 4)


def export(
    root: Path,
    replica: str,
    state: State | None = None,
    log: list[Record] | None = None,
    **options: object,
) -> Path:
    settings: dict[str, object] = {
        "raft_index": RAFT_INDEX,
        "applied_offset": APPLIED_OFFSET,
        "split_points": SPLITS,
    }
    settings.update(options)
    return write_export(
        root / AUDIT / replica,
        AUDIT,
        replica,
        dict(BASE_STATE) if state is None else state,
        list(BASE_LOG) if log is None else log,
        **settings,  # type: ignore[arg-type]
    )


def without(log: list[Record], *offsets: int) -> list[Record]:
    return [r for r in log if r.offset not in offsets]


def clean(root: Path) -> Path:
    """Three equal replicas; n1's log is compacted (overwritten puts dropped)."""
    export(root, "n1", log=without(BASE_LOG, 6, 11, 21))
    export(root, "n2")
    export(root, "n3")
    return root / AUDIT


def classes(root: Path) -> Path:
    """Every class among three replicas (logs left out of it: --skip-log-check).

    n1 lacks k07 (missing) and holds k25 at another version (version_differs);
    n2 holds k07x, which no one else does (extra); n3 holds another value for
    k12 (value_differs); k33 is v0-33 on n1, another value on n2, absent on n3
    (no_majority).
    """
    n1, n2, n3 = dict(BASE_STATE), dict(BASE_STATE), dict(BASE_STATE)
    del n1[b"k07"]
    n1[b"k25"] = (27, BASE_STATE[b"k25"][1])
    n2[b"k07x"] = (30, b"ghost")
    n3[b"k12"] = (BASE_STATE[b"k12"][0], b"other")
    n2[b"k33"] = (BASE_STATE[b"k33"][0], b"other")
    del n3[b"k33"]
    export(root, "n1", n1)
    export(root, "n2", n2)
    export(root, "n3", n3)
    return root / AUDIT


def replay_mismatch(root: Path) -> Path:
    """Equal states; n2's and n3's logs do not produce them.

    n2's log lacks offset 9 (k08's only put: not_in_log) and 43 (k10's last
    put: value_differs); n3's lacks 45 (k30 put again with the same value:
    version_differs) and 46 (the delete of k35: not_in_state).
    """
    export(root, "n1")
    export(root, "n2", log=without(BASE_LOG, 9, 43))
    export(root, "n3", log=without(BASE_LOG, 45, 46))
    return root / AUDIT


def log_divergence(root: Path) -> Path:
    """Equal states, and states equal to their replays; the logs differ.

    n3's record at offset 6 (k05's first put, overwritten at 42) has another
    value, and at offset 11 (k10's first put) another raft index; n1's log is
    compacted and lacks offset 6.
    """
    n3_log = list(BASE_LOG)
    n3_log[5] = put(6, b"k05", b"tampered")
    n3_log[10] = put(11, b"k10", b"v0-10", raft_index=999)
    export(root, "n1", log=without(BASE_LOG, 6))
    export(root, "n2")
    export(root, "n3", log=n3_log)
    return root / AUDIT


def two_replicas(root: Path) -> Path:
    """Two replicas disagreeing on three keys: no majority for any. n2 exported no log."""
    n2 = dict(BASE_STATE)
    n2[b"k12"] = (BASE_STATE[b"k12"][0], b"other")
    del n2[b"k07"]
    n2[b"k07x"] = (30, b"ghost")
    export(root, "n1")
    write_export(
        root / AUDIT / "n2",
        AUDIT,
        "n2",
        n2,
        None,
        raft_index=RAFT_INDEX,
        applied_offset=APPLIED_OFFSET,
        split_points=SPLITS,
    )
    return root / AUDIT


def cut_index(root: Path) -> Path:
    """n2's export is at another raft index."""
    export(root, "n1")
    export(root, "n2", raft_index=RAFT_INDEX + 1)
    export(root, "n3")
    return root / AUDIT


def cut_splits(root: Path) -> Path:
    """n3 split its keys at other points."""
    export(root, "n1")
    export(root, "n2")
    export(root, "n3", split_points=even_splits(list(BASE_STATE), 3))
    return root / AUDIT


def incomplete(root: Path) -> Path:
    """n3's export has its files but no manifest (the exporter did not finish)."""
    export(root, "n1")
    export(root, "n2")
    export(root, "n3", manifest=False)
    return root / AUDIT


def damaged(root: Path) -> Path:
    """n2's bucket 1 file is cut short."""
    export(root, "n1")
    path = export(root, "n2") / "bucket-00001.rkvsnap"
    path.write_bytes(path.read_bytes()[:-100])
    export(root, "n3")
    return root / AUDIT


def single(root: Path) -> Path:
    export(root, "n1")
    return root / AUDIT
