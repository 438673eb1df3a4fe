"""divergences.parquet: every divergence row, written on the driver with pyarrow.

Both engines feed the same ordered rows to this writer, so the files are
equal byte for byte. Columns: ``key`` (binary), ``bucket`` (int32),
``class``, ``replica`` (the odd replica; null for no_majority), then for each
replica R ``version_R`` (int64) and ``value_sha256_R`` (hex), both null where
R lacks the key.
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from spark_tools.divergence import DivergenceRow

ROW_GROUP_ROWS = 65_536


def divergence_schema(replicas: list[str]) -> Any:
    fields = [
        pa.field("key", pa.binary(), nullable=False),
        pa.field("bucket", pa.int32(), nullable=False),
        pa.field("class", pa.string(), nullable=False),
        pa.field("replica", pa.string()),
    ]
    for name in replicas:
        fields.append(pa.field(f"version_{name}", pa.int64()))
        fields.append(pa.field(f"value_sha256_{name}", pa.string()))
    return pa.schema(fields)


class DivergenceParquetWriter:
    """Buffers rows and writes them in row groups of ROW_GROUP_ROWS."""

    def __init__(self, path: Path, replicas: list[str]) -> None:
        self._replicas = replicas
        self._schema = divergence_schema(replicas)
        self._writer = pq.ParquetWriter(str(path), self._schema, compression="zstd")
        self._columns: list[list[Any]] = [[] for _ in self._schema.names]
        self.rows = 0

    def add(self, row: DivergenceRow) -> None:
        columns = self._columns
        columns[0].append(row.key)
        columns[1].append(row.bucket)
        columns[2].append(row.klass)
        columns[3].append(None if row.replica is None else self._replicas[row.replica])
        for i, observation in enumerate(row.observations):
            columns[4 + 2 * i].append(None if observation is None else observation[0])
            columns[5 + 2 * i].append(None if observation is None else observation[1])
        self.rows += 1
        if len(columns[0]) >= ROW_GROUP_ROWS:
            self._flush()

    def _flush(self) -> None:
        if not self._columns[0]:
            return
        table = pa.Table.from_arrays(
            [pa.array(c, type=f.type) for c, f in zip(self._columns, self._schema, strict=True)],
            schema=self._schema,
        )
        self._writer.write_table(table, row_group_size=ROW_GROUP_ROWS)
        self._columns = [[] for _ in self._schema.names]

    def close(self) -> None:
        self._flush()
        self._writer.close()

    def __enter__(self) -> DivergenceParquetWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
