"""Session fixtures of the container tier (docs/DOCKER.md, "The test tier").

``docker_engine`` holds the cache lock, starts our private dockerd (or skips
the tier, printing why no engine can be started), and stops it by PID at the
end. ``rkv_images`` builds the debootstrap base (once), the wheelhouse (once
per set of requirements), the node and audit images and the Redis image
and the Prometheus image of the ``monitoring`` profile
(layers cached by the engine). ``compose_cluster`` brings docker-compose.yml up
under a unique project name with free published ports, waits until the three
nodes are ready, and always ends with ``down --volumes``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import ssl
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.docker import images
from tests.docker.compose import NODE_SERVICES, ComposeProject, compose_command
from tests.docker.engine import Engine, EngineUnavailable, cache_dir, start_engine
from tests.docker.published import PublishedCluster, basic
from tests.support.cluster import free_ports

TEST_SUBNET = "172.29.217"
PROJECT_PREFIX = "rkvtest"


def _note(message: str) -> None:
    print(f"[docker tier] {message}", file=sys.stderr, flush=True)


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[Engine]:
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            engine = start_engine(cache / "engine")
        except EngineUnavailable as exc:
            _note(f"SKIPPED: {exc}")
            pytest.skip(f"container tier: {exc}")
        _note(f"dockerd pid {engine.process.pid if engine.process else '?'} flags {engine.flags}")
        try:
            _remove_leftover_projects(engine)
            yield engine
        finally:
            # Layers of earlier builds (this build's are tagged: tests/docker/images.py).
            with contextlib.suppress(AssertionError):
                engine.docker("image", "prune", "--force", timeout=120)
            engine.stop()


def _remove_leftover_projects(engine: Engine) -> None:
    """Containers, networks and volumes a crashed earlier run of this tier left behind."""
    label = "label=com.docker.compose.project"
    containers = engine.docker("ps", "-aq", "--filter", label).stdout.split()
    if containers:
        engine.docker("rm", "-f", *containers, check=False)
    for kind in ("network", "volume"):
        names = engine.docker(kind, "ls", "-q", "--filter", label).stdout.split()
        if names:
            engine.docker(kind, "rm", *names, check=False)


@dataclass
class Images:
    seconds: dict[str, float]


@pytest.fixture(scope="session")
def rkv_images(docker_engine: Engine) -> Images:
    cache = cache_dir()
    seconds: dict[str, float] = {}
    steps = (
        ("base image", lambda: images.ensure_base_image(docker_engine, cache)),
        ("redis image", lambda: images.build_redis_image(docker_engine, cache)),
        ("prometheus image", lambda: images.build_prometheus_image(docker_engine)),
    )
    for name, step in steps:
        started = time.monotonic()
        step()
        seconds[name] = time.monotonic() - started
    started = time.monotonic()
    wheelhouse = images.ensure_wheelhouse(cache)
    seconds["wheelhouse"] = time.monotonic() - started
    started = time.monotonic()
    images.build_images(docker_engine, cache, wheelhouse)
    seconds["rkv images"] = time.monotonic() - started
    _note("set-up seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in seconds.items()))
    return Images(seconds)


def read_secret(engine: Engine, project: ComposeProject, name: str) -> str:
    """A file of the compose project's ``secret`` volume (as README's commands read it)."""
    return engine.docker(
        "run", "--rm", "--network", "none", "--entrypoint", "cat",
        "--volume", f"{project.volume('secret')}:/secret:ro",
        images.NODE_IMAGE, f"/secret/{name}",
    ).stdout  # fmt: skip


@dataclass
class ComposeCluster:
    compose: ComposeProject
    engine: Engine
    kv: PublishedCluster
    prometheus_port: int


@pytest.fixture(scope="session")
def compose_cluster(docker_engine: Engine, rkv_images: Images) -> Iterator[ComposeCluster]:
    command = compose_command(docker_engine.env)
    assert command is not None, "neither `docker compose` nor docker-compose is installed"
    *ports, prometheus_port = free_ports(len(NODE_SERVICES) + 1)
    env = {
        **docker_engine.env,
        "RKV_IMAGE": images.IMAGE_NAME,
        "RKV_TAG": images.IMAGE_TAG,
        "RKV_REDIS_IMAGE": images.REDIS_IMAGE,
        "RKV_SUBNET": TEST_SUBNET,
        "RKV_BIND": "127.0.0.1",
        "RKV_AUDIT_ENGINE": os.environ.get("RKV_TEST_AUDIT_ENGINE", "spark"),
        **{f"RKV_HTTP_PORT_{i + 1}": str(port) for i, port in enumerate(ports)},
        "RKV_PROMETHEUS_PORT": str(prometheus_port),
    }
    project = ComposeProject(command, f"{PROJECT_PREFIX}{os.getpid()}", env)
    try:
        started = time.monotonic()
        project.run("up", "--detach", "--no-build")
        # What a user on the host does (README): the CA and root's password, generated
        # by the `secret` service, taken out of the `secret` volume.
        ca = read_secret(docker_engine, project, "ca.crt")
        password = read_secret(docker_engine, project, "root.password").splitlines()[0]
        kv = PublishedCluster(
            dict(zip(NODE_SERVICES, ports, strict=True)),
            ssl.create_default_context(cadata=ca),
            basic("root", password),
        )
        deadline = time.monotonic() + 120
        while not all(kv.ready(s) for s in NODE_SERVICES) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert all(kv.ready(s) for s in NODE_SERVICES), project.run("logs", check=False).stdout
        _note(f"compose up until three ready nodes: {time.monotonic() - started:.1f} s")
        yield ComposeCluster(project, docker_engine, kv, prometheus_port)
    finally:
        logs = project.run("logs", "--no-color", check=False)
        (cache_dir() / "last-compose.log").write_text(logs.stdout + logs.stderr)
        started = time.monotonic()
        project.down()
        _note(f"compose down: {time.monotonic() - started:.1f} s")
