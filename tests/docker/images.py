"""The images the container tier runs, built without any container registry.

- ``BASE_IMAGE``: Debian 12 (bookworm) with python3 and python3-venv, made
  with ``debootstrap --variant=minbase`` and ``docker import`` (the Dockerfile's
  BASE_IMAGE, in place of python:3.11-slim-bookworm); built once per engine.
- a wheelhouse: every wheel rkv and its ``spark`` extra need, made on the host
  with ``pip wheel`` (which uses the host's own pip configuration), kept in
  the cache while pyproject.toml's requirements stay the same.
- ``NODE_IMAGE`` / ``AUDIT_IMAGE``: the Dockerfile's two targets, built from a
  context assembled in the cache (the packages, pyproject.toml, README.md, the
  Dockerfile, .dockerignore and the wheelhouse hard-linked as ``wheelhouse/``)
  with ``--build-arg WHEELHOUSE=wheelhouse``: nothing is written to the repository.
- ``REDIS_IMAGE``: redis-server from Debian's package on the base image
  (tests/docker/redis.Dockerfile), for compose's ``RKV_REDIS_IMAGE``.
- ``PROMETHEUS_IMAGE``: docs/prometheus/Dockerfile (Debian's prometheus package)
  on the base image, the image compose's ``monitoring`` profile names.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.docker.engine import Engine

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
BASE_IMAGE = "rkv-test-base:bookworm"
REDIS_IMAGE = "rkv-test-redis:bookworm"
IMAGE_NAME = "rkv-test"
IMAGE_TAG = "ci"
NODE_IMAGE = f"{IMAGE_NAME}:{IMAGE_TAG}"
AUDIT_IMAGE = f"{IMAGE_NAME}-audit:{IMAGE_TAG}"
PROMETHEUS_IMAGE = f"{IMAGE_NAME}-prometheus:{IMAGE_TAG}"
# Tagging the last build stage keeps its layers (the legacy builder's cache)
# from being pruned as dangling; earlier builds' layers are pruned.
BUILD_STAGE_IMAGE = f"{IMAGE_NAME}-build:{IMAGE_TAG}"
BUILD_TIMEOUT = 900.0


def ensure_base_image(engine: Engine, cache: Path) -> None:
    if engine.image_exists(BASE_IMAGE):
        return
    rootfs = cache / "rootfs.tmp"
    shutil.rmtree(rootfs, ignore_errors=True)
    debootstrap = shutil.which("debootstrap") or "/usr/sbin/debootstrap"
    subprocess.run(
        [debootstrap, "--variant=minbase", "--include=python3,python3-venv", "bookworm",
         str(rootfs)],
        check=True, capture_output=True, timeout=900,
    )  # fmt: skip
    for leftover in (rootfs / "var" / "cache" / "apt" / "archives").glob("*.deb"):
        leftover.unlink()
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
    assert tar.stdout is not None
    imported = subprocess.run(
        [engine.docker_binary, "import", "-", BASE_IMAGE],
        stdin=tar.stdout, env=engine.env, capture_output=True, timeout=600, check=False,
    )  # fmt: skip
    tar.stdout.close()
    tar.wait()
    shutil.rmtree(rootfs, ignore_errors=True)
    assert imported.returncode == 0, imported.stderr.decode(errors="replace")


def requirements() -> list[str]:
    """rkv's dependencies with the spark extra, and what building rkv from source needs."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    return [
        *project["project"]["dependencies"],
        *project["project"]["optional-dependencies"]["spark"],
        *project["build-system"]["requires"],
    ]


def ensure_wheelhouse(cache: Path) -> Path:
    wheelhouse = cache / "wheelhouse"
    wanted = "\n".join(requirements()) + "\n"
    stamp = wheelhouse / "requirements.txt"
    if stamp.is_file() and stamp.read_text() == wanted and any(wheelhouse.glob("*.whl")):
        return wheelhouse
    shutil.rmtree(wheelhouse, ignore_errors=True)
    wheelhouse.mkdir(parents=True)
    request = cache / "requirements.in"
    request.write_text(wanted)
    made = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(wheelhouse),
         "-r", str(request)],
        capture_output=True, text=True, timeout=1200, check=False,
    )  # fmt: skip
    assert made.returncode == 0, f"pip wheel failed:\n{made.stdout}\n{made.stderr}"
    stamp.write_text(wanted)
    return wheelhouse


def _context(cache: Path, wheelhouse: Path) -> Path:
    context = cache / "context"
    shutil.rmtree(context, ignore_errors=True)
    context.mkdir(parents=True)
    for name in ("Dockerfile", ".dockerignore", "pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, context / name)
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    for pattern in project["tool"]["setuptools"]["packages"]["find"]["include"]:
        package = pattern.rstrip("*")
        shutil.copytree(
            REPO / package,
            context / package,
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
        )
    (context / "wheelhouse").mkdir()
    for wheel in wheelhouse.glob("*.whl"):
        try:
            os.link(wheel, context / "wheelhouse" / wheel.name)
        except OSError:
            shutil.copy2(wheel, context / "wheelhouse" / wheel.name)
    return context


def build_images(engine: Engine, cache: Path, wheelhouse: Path) -> None:
    """The node and audit targets (layers cached by the engine between runs)."""
    context = _context(cache, wheelhouse)
    common = [
        "build", "--network", "host",
        "--build-arg", f"BASE_IMAGE={BASE_IMAGE}",
        "--build-arg", "WHEELHOUSE=wheelhouse",
    ]  # fmt: skip
    try:
        engine.docker(*common, "--target", "build-audit", "-t", BUILD_STAGE_IMAGE, str(context),
                      timeout=BUILD_TIMEOUT)  # fmt: skip
        engine.docker(*common, "--target", "node", "-t", NODE_IMAGE, str(context),
                      timeout=BUILD_TIMEOUT)  # fmt: skip
        engine.docker(*common, "--target", "audit", "-t", AUDIT_IMAGE, str(context),
                      timeout=BUILD_TIMEOUT)  # fmt: skip
    finally:
        shutil.rmtree(context, ignore_errors=True)


def build_redis_image(engine: Engine, cache: Path) -> None:
    context = cache / "redis-context"
    shutil.rmtree(context, ignore_errors=True)
    context.mkdir(parents=True)
    shutil.copy2(HERE / "redis.Dockerfile", context / "Dockerfile")
    engine.docker(
        "build", "--network", "host", "--build-arg", f"BASE_IMAGE={BASE_IMAGE}",
        "-t", REDIS_IMAGE, str(context), timeout=BUILD_TIMEOUT,
    )  # fmt: skip
    shutil.rmtree(context, ignore_errors=True)


def build_prometheus_image(engine: Engine) -> None:
    """docs/prometheus/ is the whole context (the Dockerfile and what it copies)."""
    engine.docker(
        "build", "--network", "host", "--build-arg", f"BASE_IMAGE={BASE_IMAGE}",
        "-t", PROMETHEUS_IMAGE, str(REPO / "docs" / "prometheus"), timeout=BUILD_TIMEOUT,
    )  # fmt: skip
