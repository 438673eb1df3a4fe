"""docker-compose.yml and the Dockerfile, checked without an engine (always run)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.docker.compose import COMPOSE_FILE, NODE_SERVICES, REPO, compose_command
from tests.support.prometheus import promtool


def _document() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(COMPOSE_FILE.read_text())
    return document


def _named_volumes(service: dict[str, Any]) -> set[str]:
    names = set()
    for entry in service.get("volumes", []):
        if isinstance(entry, dict):
            if entry.get("type", "volume") == "volume" and entry.get("source"):
                names.add(entry["source"])
            continue
        source = str(entry).split(":", 1)[0]
        if ":" in str(entry) and not source.startswith(("/", ".", "~", "$")):
            names.add(source)
    return names


def _names(value: Any) -> set[str]:
    """Keys of a map, or the entries of a list (``networks``, ``secrets``, ``depends_on``)."""
    if isinstance(value, dict):
        return set(value)
    return {entry["source"] if isinstance(entry, dict) else str(entry) for entry in value or []}


def test_compose_validates_with_the_installed_compose(tmp_path: Path) -> None:
    command = compose_command()
    assert command is not None, (
        "neither `docker compose` nor docker-compose is installed (make system-deps installs it)"
    )
    profiled = {"audit": {"audit"}, "monitoring": {"prometheus-ca", "prometheus"}}
    everything = set().union(*profiled.values())
    for profile in ([], ["--profile", "audit"], ["--profile", "monitoring"]):
        result = subprocess.run(
            [*command, "-f", str(COMPOSE_FILE), *profile, "config"],
            cwd=tmp_path,  # no .env from the working tree
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr
        services = set(yaml.safe_load(result.stdout)["services"])
        expected = {"secret", "redis", "replicator", *NODE_SERVICES}
        # docker-compose 1.29 lists profiled services without --profile too.
        assert expected <= services <= expected | everything
        if profile:
            assert profiled[profile[1]] <= services


def test_every_referenced_network_volume_secret_and_service_is_declared() -> None:
    document = _document()
    services = document["services"]
    declared = {kind: set(document.get(kind) or {}) for kind in ("networks", "volumes", "secrets")}
    for name, service in services.items():
        assert _names(service.get("networks")) <= declared["networks"] | {"default"}, name
        assert _named_volumes(service) <= declared["volumes"], name
        assert _names(service.get("secrets")) <= declared["secrets"], name
        assert _names(service.get("depends_on")) <= set(services), name
    used = set().union(*(_named_volumes(s) for s in services.values()))
    assert used == declared["volumes"], "declared volumes nothing mounts"


def test_nodes_are_healthchecked_published_on_overridable_ports_and_keep_no_secret() -> None:
    services = _document()["services"]
    for i, name in enumerate(NODE_SERVICES, start=1):
        node = services[name]
        assert node["init"] is True
        assert any(f"${{RKV_HTTP_PORT_{i}:-800{i}}}:8001" in str(p) for p in node["ports"])
        assert node["depends_on"]["secret"]["condition"] == "service_completed_successfully"
        assert "secret:/secret:ro" in node["volumes"]
        assert "exports:/exports" in node["volumes"]
        assert node["environment"]["RKV_AUDIT_DIR"] == "/exports"
    for dependent in ("replicator", "audit"):
        conditions = {s: c["condition"] for s, c in services[dependent]["depends_on"].items()}
        assert all(conditions[node] == "service_healthy" for node in NODE_SERVICES)
    assert services["audit"]["profiles"] == ["audit"]
    assert "exports:/exports:ro" in services["audit"]["volumes"]
    command = services["audit"]["command"]
    assert command[command.index("--exports-dir") + 1] == "/exports"
    assert services["redis"]["image"].startswith("${RKV_REDIS_IMAGE:-")


def test_dockerfile_targets_base_image_user_and_healthcheck() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    stages = re.findall(r"^FROM \S+ AS (\S+)$", dockerfile, re.MULTILINE)
    targets = {
        s["build"]["target"]
        for s in _document()["services"].values()
        if "build" in s and s["build"]["context"] == "."
    }
    assert targets <= set(stages) and {"node", "audit"} <= set(stages)
    assert stages[-1] == "node", "a plain `docker build` should give the node image"
    assert re.search(r"^ARG BASE_IMAGE=python:3\.11-slim", dockerfile, re.MULTILINE)
    assert re.search(r"^USER rkv$", dockerfile, re.MULTILINE)
    assert "HEALTHCHECK" in dockerfile and "/readyz" in dockerfile
    baked = [
        line
        for line in dockerfile.splitlines()
        if line.split(" ", 1)[0] in ("COPY", "ADD", "ENV", "ARG") and "secret" in line.lower()
    ]
    assert not baked, f"the cluster secret must not be in the image: {baked}"
    ignored = (REPO / ".dockerignore").read_text().split()
    assert ".venv" in ignored and ".git" in ignored


def test_the_monitoring_profile_scrapes_every_node_and_the_replicator() -> None:
    services = _document()["services"]
    prometheus, copier = services["prometheus"], services["prometheus-ca"]
    assert prometheus["profiles"] == copier["profiles"] == ["monitoring"]
    assert prometheus["build"]["context"] == "docs/prometheus"
    assert prometheus["build"]["args"]["BASE_IMAGE"].startswith("${RKV_BASE_IMAGE:-")
    assert any("${RKV_PROMETHEUS_PORT:-9090}:9090" in str(p) for p in prometheus["ports"])
    # Only the CA certificate reaches Prometheus, never the secret volume.
    assert _named_volumes(prometheus) == {"monitoring-ca", "prometheus-data"}
    assert "secret:/secret:ro" in copier["volumes"]
    assert copier["entrypoint"][-2:] == ["/secret/ca.crt", "/monitoring-ca/ca.crt"]
    replicator = services["replicator"]["command"]
    listen = replicator[replicator.index("--metrics-listen") + 1]
    config = yaml.safe_load((REPO / "docs" / "prometheus" / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert jobs["rkv"]["scheme"] == "https"
    assert jobs["rkv"]["tls_config"]["ca_file"] == "ca/ca.crt"
    (nodes,) = jobs["rkv"]["static_configs"]
    assert nodes["targets"] == [f"{service}:8001" for service in NODE_SERVICES]
    (replicators,) = jobs["rkv-redis-replicator"]["static_configs"]
    assert replicators["targets"] == [f"replicator:{listen.rsplit(':', 1)[1]}"]
    assert config["rule_files"] == ["rkv-alerts.yml"]
    dockerfile = (REPO / "docs" / "prometheus" / "Dockerfile").read_text()
    assert re.search(
        r"^COPY prometheus\.yml rkv-alerts\.yml /etc/prometheus/rkv/$", dockerfile, re.M
    )
    assert re.search(r"^USER prometheus$", dockerfile, re.MULTILINE)


def test_promtool_accepts_the_compose_prometheus_configuration(tmp_path: Path) -> None:
    for name in ("prometheus.yml", "rkv-alerts.yml"):
        shutil.copy2(REPO / "docs" / "prometheus" / name, tmp_path / name)
    result = promtool("check", "config", str(tmp_path / "prometheus.yml"))
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()
