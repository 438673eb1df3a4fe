"""The project files a new user relies on."""

from __future__ import annotations

from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def test_compose_file_is_valid_yaml_with_a_services_map() -> None:
    document = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    assert isinstance(document, dict)
    assert isinstance(document["services"], dict)


def test_ci_runs_the_readme_test_command() -> None:
    readme = (REPO / "README.md").read_text()
    ci = (REPO / ".ci" / "run").read_text()
    assert "make test" in readme and "make run" in readme
    commands = [
        line.strip() for line in ci.splitlines() if line.strip() and not line.startswith("#")
    ]
    assert commands[-1] == "make test"
