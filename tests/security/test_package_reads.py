"""A VNF package is untrusted input: it is streamed, never held whole in memory, and every
file read from it is capped, whatever its zip entry claims.

The package comes over real HTTP on loopback from a stand-in of Tacker's VNF package API
(``GET /vnfpkgm/v1/vnf_packages?filter=...`` and ``.../package_content``), read by our
real Tacker client, through the one reader the steps share (:mod:`handlers.steps.package`).
"""

from __future__ import annotations

import io
import os
import tracemalloc
import zipfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from handlers.job import ClusterJob
from handlers.results import Confirmed
from handlers.steps import package_files
from schemas import parse_notification_data
from subscriber.config import ClusterSettings, TackerSettings
from subscriber.errors import PermanentStepError
from subscriber.kernel import JobContext, Services, Step
from subscriber.tacker import TackerClient
from tests.cluster_fakes import job_context
from tests.factories import op_occ
from tests.loopback import serving

pytestmark = pytest.mark.asyncio

SCRIPT = "Scripts/install_helm.sh"


def _zip(path: Path, members: dict[str, bytes], *, stored: bool = False) -> Path:
    method = zipfile.ZIP_STORED if stored else zipfile.ZIP_DEFLATED
    with zipfile.ZipFile(path, "w", method) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


@pytest.fixture
async def package_api(tmp_path: Path) -> AsyncIterator[tuple[str, dict[str, Path]]]:
    """Tacker's package API on a free loopback port; ``served[vnfd]`` is the file it sends."""
    served: dict[str, Path] = {}

    async def index(request: web.Request) -> web.Response:
        vnfd = request.query.get("filter", "").removeprefix("(eq,vnfdId,").removesuffix(")")
        found = [{"id": f"pkg-{vnfd}", "onboardingState": "ONBOARDED"}] if vnfd in served else []
        return web.json_response(found)

    async def content(request: web.Request) -> web.StreamResponse:
        return web.FileResponse(served[request.match_info["pkg"].removeprefix("pkg-")])

    async with serving(
        ("GET", "/vnfpkgm/v1/vnf_packages", index),
        ("GET", "/vnfpkgm/v1/vnf_packages/{pkg}/package_content", content),
    ) as url:
        yield url, served


def _reader(client: TackerClient, settings: ClusterSettings) -> tuple[ClusterJob, JobContext]:
    """A job of a cluster handler whose ``confirm`` found vnfdId ``vnfd-1``."""
    notification = parse_notification_data(op_occ(state="COMPLETED"))
    job = ClusterJob(settings, notification)
    confirmed = {"operation": "INSTANTIATE", "operationState": "COMPLETED", "api": "v2"}
    ctx = job_context(
        notification,
        Services(tacker=client),
        results={"confirm": {**confirmed, "vnfdId": "vnfd-1"}},
    )

    async def noop(c: JobContext) -> None:
        return None

    return job, ctx.for_step(Step("reads-package", noop, needs=(Confirmed,)))


def _client(url: str, **kw: object) -> TackerClient:
    return TackerClient(
        TackerSettings(endpoint=url, retry_attempts=1, noauth_project_id="p" * 32, **kw)  # type: ignore[arg-type]
    )


async def test_a_zip_bomb_member_is_read_only_up_to_the_cap(
    package_api: tuple[str, dict[str, Path]], tmp_path: Path
) -> None:
    url, served = package_api
    # 64 MiB of zeros deflate to about 64 KiB: the entry is small, its content is not.
    served["vnfd-1"] = _zip(tmp_path / "bomb.zip", {SCRIPT: bytes(64 << 20), "ok.txt": b"hi"})
    async with _client(url) as client:
        job, ctx = _reader(client, ClusterSettings(max_package_file_bytes=1 << 20))
        tracemalloc.start()
        try:
            with pytest.raises(PermanentStepError, match=r"is larger than 1048576 bytes"):
                await package_files(job, ctx, {SCRIPT: "helm_installation_script_path"}, step="s")
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < 16 << 20, f"{peak} bytes held to refuse a 64 MiB member"
        files = await package_files(job, ctx, {"ok.txt": "p"}, step="s")
        assert files == {"ok.txt": b"hi"}


async def test_a_member_whose_entry_understates_its_size_is_still_capped(
    package_api: tuple[str, dict[str, Path]], tmp_path: Path
) -> None:
    url, served = package_api
    path = _zip(tmp_path / "liar.zip", {SCRIPT: b"x" * 4096}, stored=True)
    # Rewrite the sizes of both headers to claim 16 bytes; the data stays 4096.
    raw = bytearray(path.read_bytes())
    for sig, offset in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        at = raw.find(sig)
        raw[at + offset : at + offset + 4] = (16).to_bytes(4, "little")
    path.write_bytes(bytes(raw))
    served["vnfd-1"] = path
    async with _client(url) as client:
        job, ctx = _reader(client, ClusterSettings(max_package_file_bytes=1024))
        with pytest.raises(PermanentStepError):  # too large or corrupt: never 4096 bytes in
            files = await package_files(job, ctx, {SCRIPT: "p"}, step="s")
            assert len(files[SCRIPT]) <= 1024


async def test_a_package_over_the_cap_is_refused_while_it_streams(
    package_api: tuple[str, dict[str, Path]], tmp_path: Path
) -> None:
    url, served = package_api
    big = tmp_path / "big.zip"
    _zip(big, {SCRIPT: b"#!/bin/sh\n", "Files/image.qcow2": os.urandom(8 << 20)}, stored=True)
    served["vnfd-1"] = big
    async with _client(url, max_package_bytes=1 << 20) as client:
        job, ctx = _reader(client, ClusterSettings())
        with pytest.raises(PermanentStepError, match="larger than 1048576 bytes"):
            await package_files(job, ctx, {SCRIPT: "p"}, step="s")
        spool = io.BytesIO()
        with pytest.raises(PermanentStepError):
            await client.vnf_package("vnfd-1", spool)
        assert spool.tell() <= 1 << 20  # never more than the cap taken in


async def test_a_large_package_is_streamed_not_held_in_memory(
    package_api: tuple[str, dict[str, Path]], tmp_path: Path
) -> None:
    url, served = package_api
    big = tmp_path / "images.zip"
    _zip(
        big,
        {SCRIPT: b"#!/bin/sh\necho hi\n", "Files/image.qcow2": os.urandom(48 << 20)},
        stored=True,
    )
    served["vnfd-1"] = big
    async with _client(url) as client:
        job, ctx = _reader(client, ClusterSettings())
        tracemalloc.start()
        try:
            files = await package_files(job, ctx, {SCRIPT: "p"}, step="s")
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert files == {SCRIPT: b"#!/bin/sh\necho hi\n"}
    assert peak < 8 << 20, f"{peak} bytes held to read a 48 MiB package"
