"""The image, built once a session for every test of this tier (a build takes minutes)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest

from tests import REPO
from tests.container.podman import BASE, Podman, missing

# What the build context holds (the Dockerfile's .dockerignore lets these in).
_CONTEXT = ("Dockerfile", ".dockerignore", "pyproject.toml", "README.md", "LICENSE")
_PACKAGES = ("subscriber", "handlers", "schemas")


@pytest.fixture(scope="session")
def podman(tmp_path_factory: pytest.TempPathFactory) -> Podman:
    why = missing()
    if why is not None:
        pytest.fail(why)
    return Podman(tmp_path_factory.mktemp("podman"))


@pytest.fixture(scope="session")
def image(podman: Podman, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The image, built from this checkout: its wheel and its dependencies' wheels (the
    ``otel`` extra's too, as the Dockerfile installs it) built on this machine, installed
    in the image without an index."""
    context = tmp_path_factory.mktemp("context")
    for name in _CONTEXT:
        shutil.copy2(REPO / name, context / name)
    for package in _PACKAGES:
        shutil.copytree(
            REPO / package, context / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    wheels = subprocess.run(
        [
            *(sys.executable, "-m", "pip", "wheel", "-q"),
            *("--wheel-dir", str(context / "wheels"), f"{REPO}[otel]"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert wheels.returncode == 0, wheels.stderr[-3000:]
    tag = f"localhost/lccn-subscriber:test-{uuid.uuid4().hex[:8]}"
    # --layers=false: no intermediate images left behind; --format docker keeps the
    # HEALTHCHECK (OCI images have none).
    podman(
        "build",
        "--layers=false",
        "--format",
        "docker",
        "--build-arg",
        f"BASE={BASE}",
        "--build-arg",
        "WHEELS=context",
        "--tag",
        tag,
        str(context),
        timeout=900,
    )
    yield tag
    podman("rmi", "--force", tag, check=False)
