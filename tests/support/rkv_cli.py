"""Running the `rkv` command line as a child process, as a user would (tests only)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

from tests.support.cluster import REPO


@dataclass(frozen=True)
class CliResult:
    code: int
    out: str
    err: str

    @property
    def both(self) -> str:
        return self.out + self.err


def rkv(
    *args: str, stdin: str | None = None, env: dict[str, str] | None = None, timeout: float = 60
) -> CliResult:
    """``python -m node.cli ARGS`` with this checkout first on the path, no RKV_*
    variable inherited (only those in ``env``), stdin closed unless given."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("RKV_")}
    environment["PYTHONPATH"] = str(REPO)
    done = subprocess.run(
        [sys.executable, "-m", "node.cli", *args],
        input=(stdin or "").encode(),
        capture_output=True,
        check=False,
        timeout=timeout,
        env={**environment, **(env or {})},
    )
    return CliResult(
        done.returncode,
        done.stdout.decode(errors="replace"),
        done.stderr.decode(errors="replace"),
    )
