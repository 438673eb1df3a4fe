"""Getting a SparkSession for the audit without ever hard-coding the master.

- An active session (a test's, a notebook's) is used as it is and not stopped.
- Under spark-submit the master and everything else come from spark-submit.
- Run directly with no master configured: ``local[*]``. For local masters the
  Python workers run this interpreter (PYSPARK_PYTHON, unless already set) and
  import this source tree (spark.executorEnv.PYTHONPATH), the driver binds to
  127.0.0.1, the UI is off and shuffles use few partitions.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path

from pyspark import SparkConf, SparkContext
from pyspark.sql import SparkSession

import spark_tools

DEFAULT_LOCAL_MASTER = "local[*]"
APP_NAME = "rkv-audit"
SOURCE_ROOT = Path(spark_tools.__file__).resolve().parent.parent


def java_problem() -> str | None:
    """Why Spark cannot start here (no Java), or None."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return None
    if shutil.which("java") is None:
        return "no Java runtime: java is not on PATH and JAVA_HOME is not set"
    return None


def is_local(master: str | None) -> bool:
    return master is None or master == "local" or master.startswith("local[")


def local_conf(shuffle_partitions: int = 8) -> dict[str, str]:
    """The settings a local audit runs with (each may be overridden)."""
    return {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.host": "127.0.0.1",
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.executorEnv.PYTHONPATH": os.pathsep.join(
            p for p in (str(SOURCE_ROOT), os.environ.get("PYTHONPATH", "")) if p
        ),
    }


def get_session(
    master: str | None, conf: Mapping[str, str] | None = None
) -> tuple[SparkSession, bool]:
    """(session, whether this call started it and so must stop it)."""
    active = SparkSession.getActiveSession()
    if active is not None:
        return active, False
    # Start (or, under spark-submit, join) the JVM first: its configuration holds
    # spark-submit's --master and spark-defaults.conf, which must win over local[*].
    SparkContext._ensure_initialized()
    configured = SparkConf().get("spark.master")
    chosen = master or configured or DEFAULT_LOCAL_MASTER
    builder = SparkSession.builder.appName(APP_NAME)
    if master is not None or configured is None:
        builder = builder.master(chosen)
    settings: dict[str, str] = {}
    if is_local(chosen):
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        settings.update(local_conf())
    settings.update(conf or {})
    for name, value in settings.items():
        builder = builder.config(name, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session, True
