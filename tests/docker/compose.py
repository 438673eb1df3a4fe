"""docker-compose.yml driven from tests: whichever compose exists, one project per run.

``compose_command`` is the compose plugin (``docker compose``) when the client
has it, else the standalone ``docker-compose`` (1.29 on Debian 12), else None.
``ComposeProject`` runs it with ``-p PROJECT -f docker-compose.yml`` and the
``RKV_*`` variables the file reads (images, published ports, subnet), against
the engine in ``DOCKER_HOST``.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yml"
NODE_SERVICES = ("node1", "node2", "node3")
PROFILES = ("audit", "monitoring")


def compose_command(env: Mapping[str, str] | None = None) -> list[str] | None:
    docker = shutil.which("docker")
    if docker is not None:
        probe = subprocess.run(
            [docker, "compose", "version"], capture_output=True, env=env, check=False, timeout=60
        )
        if probe.returncode == 0:
            return [docker, "compose"]
    standalone = shutil.which("docker-compose")
    return [standalone] if standalone else None


@dataclass
class ComposeProject:
    command: list[str]
    project: str
    env: dict[str, str]

    def run(
        self,
        *args: str,
        check: bool = True,
        timeout: float = 600.0,
        profile: str | tuple[str, ...] = (),
    ) -> subprocess.CompletedProcess[str]:
        """``compose ARGS``; ``profile`` enables profiles (``up`` would start their services)."""
        argv = [*self.command, "-p", self.project, "-f", str(COMPOSE_FILE)]
        for name in (profile,) if isinstance(profile, str) else profile:
            argv += ["--profile", name]
        result = subprocess.run(
            [*argv, *args],
            env=self.env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"compose {' '.join(args)} exited {result.returncode}:\n"
                f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
            )
        return result

    def container_id(self, service: str) -> str:
        ids = self.run("ps", "-q", service).stdout.split()
        assert ids, f"no container for service {service}"
        return ids[0]

    @property
    def network(self) -> str:
        return f"{self.project}_rkv"

    def volume(self, name: str) -> str:
        return f"{self.project}_{name}"

    def down(self) -> None:
        self.run(
            "down",
            "--volumes",
            "--remove-orphans",
            "--timeout",
            "10",
            check=False,
            profile=PROFILES,
        )
