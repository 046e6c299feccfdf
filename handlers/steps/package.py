"""Files of the instance's VNF package: the one way a step reads one.

The install script (``script_path``), the Helm script
(``helm_installation_script_path``), the registries' CAs (``certificate_path``)
and the PV manifests (``pv_manifest_file_path``) are files of the VNF package
Tacker holds for the instance's ``vnfdId``. The
package is untrusted input: it is streamed to a temporary file (at most
``tacker.max_package_bytes``, never whole in memory), and each file is read
up to ``cluster.max_package_file_bytes``, whatever its zip entry claims.
"""

from __future__ import annotations

import posixpath
import tempfile
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass

from handlers.job import ClusterJob
from handlers.results import Confirmed
from subscriber.errors import PackageNotFound, PermanentStepError
from subscriber.kernel import JobContext

__all__ = ["PackageFile", "optional_package_file", "package_files"]


def _member_path(param: str, path: str, *, step: str) -> str:
    wanted = posixpath.normpath(path.strip().lstrip("/"))
    if wanted.startswith("..") or wanted in ("", "."):
        raise PermanentStepError(
            f"{param} {path!r} is not a path inside the VNF package", step=step
        )
    return wanted


def _read_member(
    archive: zipfile.ZipFile, name: str, param: str, path: str, cap: int, *, step: str
) -> bytes:
    info = archive.getinfo(name)
    too_big = PermanentStepError(
        f"{param} {path!r} is larger than {cap} bytes (cluster.max_package_file_bytes)", step=step
    )
    if info.file_size > cap:
        raise too_big
    with archive.open(info) as member:
        data = member.read(cap + 1)  # the entry's stated size may lie
    if len(data) > cap:
        raise too_big
    return data


@dataclass(frozen=True, slots=True)
class PackageFile:
    """A file the package may lack: its bytes, or ``None`` and why (``missing``)."""

    data: bytes | None
    missing: str = ""


async def optional_package_file(
    job: ClusterJob, ctx: JobContext, path: str, param: str, *, step: str
) -> PackageFile:
    """The file at ``path`` in the instance's VNF package, or why there is none: the
    instance names no ``vnfdId``, Tacker holds no package for it, or the package has
    no such file. The step ``needs`` :class:`~handlers.results.Confirmed`.

    Raises:
        PermanentStepError: ``path`` is not a path inside a package, the package is not a
            zip or too large, or the file is larger than the cap.
    """
    vnfd_id = ctx.result(Confirmed).vnfd_id
    if not vnfd_id:
        return PackageFile(None, f"VNF instance {ctx.vnf_instance_id} names no vnfdId")
    try:
        found = await _read(job, ctx, vnfd_id, {path: param}, step=step, optional=True)
    except PackageNotFound as exc:
        return PackageFile(None, str(exc))
    if path not in found:
        return PackageFile(None, f"{param} {path!r} is not in the VNF package {vnfd_id}")
    return PackageFile(found[path])


async def package_files(
    job: ClusterJob, ctx: JobContext, wanted: Mapping[str, str], *, step: str
) -> dict[str, bytes]:
    """The files at ``wanted``'s paths in the instance's VNF package, by path.

    Arguments:
        wanted: each path (relative to the package's root) and the parameter that
            named it, for the errors. The step ``needs`` :class:`~handlers.results.Confirmed`
            (the instance's ``vnfdId``).

    Raises:
        PermanentStepError: the instance names no ``vnfdId``, the package is not a zip,
            too large, holds no such file, or the file is larger than the cap.
    """
    if not wanted:
        return {}
    vnfd_id = ctx.result(Confirmed).vnfd_id
    if not vnfd_id:
        raise PermanentStepError(
            f"VNF instance {ctx.vnf_instance_id} names no vnfdId: no package to read "
            f"{', '.join(sorted(wanted))} from",
            step=step,
        )
    return await _read(job, ctx, vnfd_id, wanted, step=step, optional=False)


async def _read(
    job: ClusterJob,
    ctx: JobContext,
    vnfd_id: str,
    wanted: Mapping[str, str],
    *,
    step: str,
    optional: bool,
) -> dict[str, bytes]:
    """``wanted``'s files (``optional``: those the package holds) from the package of
    ``vnfd_id``, streamed to a temporary file."""
    paths = {path: _member_path(param, path, step=step) for path, param in wanted.items()}
    cap = job.settings.max_package_file_bytes
    with tempfile.TemporaryFile(prefix="lccn-package-") as spool:
        await ctx.services.need_tacker().vnf_package(vnfd_id, spool)
        spool.seek(0)
        try:
            with zipfile.ZipFile(spool) as archive:
                names = {
                    posixpath.normpath(n): n for n in archive.namelist() if not n.endswith("/")
                }
                found: dict[str, bytes] = {}
                for path, member in paths.items():
                    param = wanted[path]
                    if member not in names:
                        if optional:
                            continue
                        raise PermanentStepError(
                            f"{param} {path!r} is not in the VNF package", step=step
                        )
                    found[path] = _read_member(archive, names[member], param, path, cap, step=step)
                return found
        except zipfile.BadZipFile:
            raise PermanentStepError(
                "the VNF package content Tacker returned is not a zip file", step=step
            ) from None
