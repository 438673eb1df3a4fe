"""The audit's entry points: `rkv audit run`'s options and runner (node/cli/audit_run.py),
spark_tools/audit_main.py (as spark-submit runs it: a plain script), usage errors."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from node.cli.audit_run import add_audit_run_arguments, run_audit_command
from spark_tools import audit_main
from tests.spark import scenarios
from tests.spark.audit_support import audit

AUDIT_MAIN = Path(audit_main.__file__)


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="rkv audit run")
    add_audit_run_arguments(parser)
    return parser.parse_args(list(argv))


def test_rkv_audit_run_options_and_runner(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = scenarios.classes(tmp_path / "exports")
    out = tmp_path / "out"
    args = parse("--exports", str(root), "--engine", "python", "--out", str(out), "--samples", "1")
    assert (args.engine, args.master, args.samples, args.max_divergence_rate) == (
        "python",
        None,
        1,
        0.0,
    )
    assert run_audit_command(args) == 1
    report = json.loads((out / "report.json").read_text())
    assert len(report["samples"]) == 1
    assert "audit: FAIL: report in" in capsys.readouterr().err
    quiet = parse(
        "--exports",
        f"{root / 'n1'},{root / 'n2'}",
        str(root / "n3"),
        "--engine=python",
        f"--out={out}",
        "--skip-log-check",
        "--max-divergence-rate",
        "0.5",
        "--quiet",
    )
    assert run_audit_command(quiet) == 0
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    "argv",
    [
        ["--engine", "python"],
        ["--exports", "x", "--engine", "dask"],
        ["--exports", "x", "--max-divergence-rate", "2"],
        ["--exports", "x", "--samples", "-1"],
    ],
)
def test_bad_options_are_usage_errors(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse(*argv)
    assert exit_info.value.code == 2


def test_audit_main_runs_as_a_script(tmp_path: Path) -> None:
    root = scenarios.clean(tmp_path / "exports")
    result = subprocess.run(
        [
            sys.executable,
            str(AUDIT_MAIN),
            "--exports",
            str(root),
            "--engine",
            "python",
            "--out",
            str(tmp_path / "out"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "audit: PASS" in result.stderr
    assert json.loads((tmp_path / "out" / "report.json").read_text())["status"] == "PASS"


def test_audit_main_function(tmp_path: Path) -> None:
    root = scenarios.cut_index(tmp_path / "exports")
    argv = ["--exports", str(root), "--engine", "python", "--out", str(tmp_path / "o"), "--quiet"]
    assert audit_main.main(argv) == 3


def test_usage_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert audit(tmp_path / "absent", tmp_path / "out").code == 2
    assert "is not a directory" in capsys.readouterr().err
    root = scenarios.clean(tmp_path / "exports")
    assert audit([root / "n1", root / "n1"], tmp_path / "out").code == 2
    assert "given twice" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert audit(tmp_path / "empty", tmp_path / "out").code == 2
    assert audit(root, tmp_path / "out", engine="dask").code == 2
    assert not (tmp_path / "out" / "report.json").exists()


def test_a_missing_replica_is_inconclusive_when_the_count_is_given(tmp_path: Path) -> None:
    root = scenarios.clean(tmp_path / "exports")
    assert audit(root, tmp_path / "a", expected_replicas=3).code == 0
    outcome = audit(root, tmp_path / "b", expected_replicas=4)
    assert outcome.code == 3
    assert outcome.report["reasons"] == ["4 replicas expected, 3 exports found"]


def test_a_failed_export_is_inconclusive_with_its_error(tmp_path: Path) -> None:
    root = scenarios.incomplete(tmp_path / "exports")
    (root / "n3" / "error.json").write_text(
        json.dumps({"code": "audit_export_failed", "message": "the node is stopping"})
    )
    outcome = audit(root, tmp_path / "out")
    assert outcome.code == 3
    [reason] = outcome.report["reasons"]
    assert reason.endswith(
        "no manifest.json: the export failed (audit_export_failed: the node is stopping)"
    )


def test_a_bad_manifest_is_inconclusive(tmp_path: Path) -> None:
    root = scenarios.clean(tmp_path / "exports")
    manifest = json.loads((root / "n2" / "manifest.json").read_text())
    manifest["bucket_digests"] = manifest["bucket_digests"][:-1]
    (root / "n2" / "manifest.json").write_text(json.dumps(manifest))
    outcome = audit(root, tmp_path / "out")
    assert outcome.code == 3
    [reason] = outcome.report["reasons"]
    assert reason.endswith("bad manifest.json: bucket_digests has 3 entries for 4 buckets")


def test_a_digest_that_is_not_the_files_is_inconclusive(tmp_path: Path) -> None:
    root = scenarios.clean(tmp_path / "exports")
    manifest = json.loads((root / "n2" / "manifest.json").read_text())
    manifest["bucket_digests"][2] = "0" * 64
    (root / "n2" / "manifest.json").write_text(json.dumps(manifest))
    outcome = audit(root, tmp_path / "out")
    assert outcome.code == 3
    [reason] = outcome.report["reasons"]
    assert reason.startswith("damaged export: replica n2: ")
    assert reason.endswith("bucket-00002.rkvsnap: its digest is not the manifest's")


def test_rkv_audit_run_is_wired_into_rkv(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from node.cli.main import main  # noqa: PLC0415

    with pytest.raises(SystemExit) as exit_info:
        main(["audit", "run", "--help"])
    assert exit_info.value.code == 0
    assert "--exports" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        main(["audit", "run", "--engine", "python"])  # no --exports
    assert exit_info.value.code == 2
    root = scenarios.clean(tmp_path / "exports")
    out = tmp_path / "out"
    assert main(["audit", "run", "--exports", str(root), "--engine=python", f"--out={out}"]) == 0
    assert json.loads((out / "report.json").read_text())["status"] == "PASS"
    with pytest.raises(SystemExit) as exit_info:
        main(["audit", "--engine", "dask"])
    assert exit_info.value.code == 2
    assert main(["audit", "--url", ",", "--engine", "python"]) == 2  # no URL
    unreachable = ["audit", "--url", "http://127.0.0.1:9", "--timeout", "2", "--out", str(out)]
    assert main([*unreachable, "--engine", "python"]) == 4


def test_spark_submit_runs_audit_main_with_its_master(spark: object, tmp_path: Path) -> None:
    """Through the real spark-submit (pyspark's): the master is spark-submit's
    (--master local[1]), never one the code picks."""
    submit = Path(sys.executable).parent / "spark-submit"
    root = scenarios.clean(tmp_path / "exports")
    out = tmp_path / "out"
    repo = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [
            str(submit),
            "--master",
            "local[1]",
            "--conf",
            "spark.ui.enabled=false",
            "--conf",
            "spark.driver.host=127.0.0.1",
            str(AUDIT_MAIN),
            "--exports",
            str(root),
            "--out",
            str(out),
        ],
        cwd=tmp_path,
        env={
            **os.environ,
            "PYTHONPATH": str(repo),
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "SPARK_LOCAL_IP": "127.0.0.1",
        },
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert report["status"] == "PASS"
    assert report["engine"]["name"] == "spark"
    assert report["engine"]["master"] == "local[1]"
