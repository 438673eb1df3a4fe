"""Running an audit in a test and reading back what it wrote."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from spark_tools.audit_run import run_audit

VOLATILE = ("engine", "timings")


class Outcome:
    def __init__(self, code: int, out: Path, stderr: str) -> None:
        self.code = code
        self.out = out
        self.stderr = stderr

    @property
    def report(self) -> dict[str, Any]:
        result: dict[str, Any] = json.loads((self.out / "report.json").read_text())
        return result

    def stable_report_bytes(self) -> bytes:
        """report.json without its engine and timings fields, re-encoded as written."""
        report = self.report
        for name in VOLATILE:
            report.pop(name)
        return json.dumps(report, indent=2, ensure_ascii=False).encode()

    @property
    def parquet(self) -> Path:
        return self.out / "divergences.parquet"

    def parquet_rows(self) -> list[dict[str, Any]]:
        import pyarrow.parquet as pq  # noqa: PLC0415

        rows: list[dict[str, Any]] = pq.read_table(self.parquet).to_pylist()
        return rows


def audit(exports: Path | list[Path], out: Path, engine: str = "python", **options: Any) -> Outcome:
    progress = io.StringIO()
    code = run_audit(exports, out, engine=engine, progress=progress, **options)
    return Outcome(code, out, progress.getvalue())


def audit_checked(exports: Path, tmp_path: Path, engine: str, **options: Any) -> Outcome:
    """Audit with ``engine``; a Spark run is also checked against a Python run:
    the same exit status, report.json equal byte for byte apart from ``engine``
    and ``timings``, divergences.parquet equal byte for byte."""
    outcome = audit(exports, tmp_path / f"out-{engine}", engine, **options)
    if engine == "spark":
        reference = audit(exports, tmp_path / "out-python", "python", **options)
        assert outcome.code == reference.code
        assert outcome.report["engine"]["name"] == "spark"
        assert outcome.stable_report_bytes() == reference.stable_report_bytes()
        if reference.parquet.exists():
            assert outcome.parquet.read_bytes() == reference.parquet.read_bytes()
        else:
            assert not outcome.parquet.exists()
    return outcome
