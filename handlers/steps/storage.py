"""The storage server's steps (``storage_server``, ``pv_registration_params``):
what each plan adds, and the toolkit calls each wraps (:mod:`handlers.toolkit.storage`).

* INSTANTIATE and HEAL: ``storage-server`` (volumes formatted once and mounted,
  exports written and applied), ``nfs-client`` (the nodes the operation builds),
  ``register-pvs`` (each PV applied with the storage server's address and waited
  for until ``Available``);
* SCALE: ``nfs-client`` on the new workers;
* the drain hook's job (HEAL / PROCESSING, before Tacker deletes the VMs):
  ``release-pvs`` refuses the heal of the storage server while one of its PVs is
  ``Bound`` and otherwise deletes them; the HEAL's ``register-pvs`` registers
  them again on the rebuilt server.

Every step is a no-op without ``storage_server``, and convergent: it reads the
server or the cluster first and changes only what differs.
"""

from __future__ import annotations

import asyncio
from typing import Any

from handlers.job import ClusterJob
from handlers.results import Confirmed, Discovered, DrainServers, Leaving
from handlers.steps.package import package_files
from handlers.toolkit import kubeadm, storage
from schemas.cluster_params import K8sClusterInstallationParams, StorageServerParams
from subscriber.errors import PermanentStepError, SkipStep, TransientStepError
from subscriber.kernel import JobContext, Step, StepResult

__all__ = ["nfs_client", "register_pvs", "release_pvs", "storage_server"]


def _storage(params: K8sClusterInstallationParams, empty: StepResult) -> StorageServerParams:
    if params.storage_server is None:
        raise SkipStep("no storage_server in the parameters", empty)
    return params.storage_server


async def _server(
    job: ClusterJob, ctx: JobContext, storage_params: StorageServerParams
) -> storage.StorageServer:
    instance = await job.instance(ctx)
    return await storage.find_server(
        instance, storage_params, ctx.services.need_openstack(), job.api
    )


class StorageReady(StepResult):
    server: dict[str, Any] | None = None
    volumes: dict[str, dict[str, Any]] = {}
    exports: tuple[str, ...] = ()
    exports_changed: bool = False


def storage_server(job: ClusterJob) -> Step:
    """Each Cinder volume formatted (blank only) and mounted, the NFS exports applied."""

    async def run(ctx: JobContext) -> StorageReady:
        params = await job.params(ctx)
        conf = _storage(params, StorageReady())
        shell, openstack = await job.shell(ctx), ctx.services.need_openstack()
        server = await _server(job, ctx, conf)
        volumes: dict[str, dict[str, Any]] = {}
        for volume in conf.cinder_volume_setup_params:
            device = await storage.volume_device(server, volume.volume_resource_id, openstack)
            done = await storage.set_up_volume(
                shell, conf, server, device, volume.mount_to, step="storage-server"
            )
            volumes[volume.mount_to] = {"device": device, "done": done}
        changed = False
        if conf.nfs_server_setup_params:
            changed = await storage.apply_exports(shell, conf, server, step="storage-server")
        return StorageReady(
            server=server.as_json(),
            volumes=volumes,
            exports=tuple(s.export_dir for s in conf.nfs_server_setup_params),
            exports_changed=changed,
        )

    return Step(
        "storage-server", run, idempotent=True, timeout=job.settings.install_timeout + 360.0
    )


class NfsClients(StepResult):
    nodes: dict[str, Any] = {}


def nfs_client(job: ClusterJob) -> Step:
    """``nfs-common`` on the nodes this operation builds (all of them on INSTANTIATE)."""

    async def run(ctx: JobContext) -> NfsClients:
        _storage(await job.params(ctx), NfsClients())
        targets, shell = job.discovered(ctx).touched(), await job.shell(ctx)
        if not targets:
            raise SkipStep("no new or rebuilt node", NfsClients())
        done = await asyncio.gather(
            *(storage.install_nfs_client(shell, n, step="nfs-client") for n in targets)
        )
        return NfsClients(nodes={n.name: d for n, d in zip(targets, done, strict=True)})

    timeout = job.settings.install_timeout + 60.0
    return Step("nfs-client", run, idempotent=True, timeout=timeout, needs=(Discovered,))


async def _volumes(
    job: ClusterJob, ctx: JobContext, server: storage.StorageServer, step: str
) -> list[storage.PersistentVolume]:
    """The PVs of ``pv_registration_params``, read from the VNF package in Tacker, each
    with its ``nfs_server_cp``'s address."""
    regs = (await job.params(ctx)).pv_registration_params
    openstack = ctx.services.need_openstack()
    wanted = {reg.pv_manifest_file_path: "pv_manifest_file_path" for reg in regs}
    files = await package_files(job, ctx, wanted, step=step)
    out = []
    for reg in regs:
        address = await storage.nfs_server_ip(server, reg.nfs_server_cp, openstack)
        text = files[reg.pv_manifest_file_path]
        out.append(storage.read_manifest(text, reg.pv_manifest_file_path, address, step=step))
    return out


class PvsRegistered(StepResult):
    pvs: dict[str, str] = {}
    server: str | None = None
    via: str | None = None


def register_pvs(job: ClusterJob) -> Step:
    """Each PV applied with ``spec.nfs.server`` = the storage server's address, and
    waited for until ``Available`` (``cluster.pv_available_timeout``); else deleted
    and the step fails."""

    async def run(ctx: JobContext) -> PvsRegistered:
        params = await job.params(ctx)
        conf = _storage(params, PvsRegistered())
        if not params.pv_registration_params:
            raise SkipStep("no pv_registration_params", PvsRegistered())
        topo, shell = job.topology(ctx), await job.shell(ctx)
        via = await kubeadm.anchor(shell, topo)
        if via is None:
            raise TransientStepError("no master of the cluster is ready", step="register-pvs")
        server = await _server(job, ctx, conf)
        done: dict[str, str] = {}
        for pv in await _volumes(job, ctx, server, "register-pvs"):
            done[pv.name] = await storage.register_pv(
                shell, via, pv, wait=job.settings.pv_available_timeout, step="register-pvs"
            )
        return PvsRegistered(pvs=done, server=server.nic_ip, via=via.name)

    return Step(
        "register-pvs",
        run,
        idempotent=True,
        # Each PV waits up to pv_available_timeout; the count is not known before the
        # parameters are read, so the bound is for a generous number of PVs.
        timeout=job.settings.pv_available_timeout * 8 + 300.0,
        needs=(Confirmed, Discovered),
    )


class PvsReleased(StepResult):
    deleted: tuple[str, ...] = ()
    server: str | None = None


def release_pvs(job: ClusterJob) -> Step:
    """Before Tacker rebuilds the storage server (its server is in the drain request):
    refused while one of its PVs is ``Bound``, else every PV of it is deleted."""

    async def run(ctx: JobContext) -> PvsReleased:
        params = await job.params(ctx)
        conf = _storage(params, PvsReleased())
        server = await _server(job, ctx, conf)
        servers = set(ctx.result(DrainServers).servers)
        if not servers & {server.server_id, server.vnfc_id}:
            raise SkipStep("the storage server is not leaving", PvsReleased())
        if not params.pv_registration_params:
            raise SkipStep("no pv_registration_params", PvsReleased())
        topo, shell = job.topology(ctx), await job.shell(ctx)
        via = await kubeadm.anchor(shell, topo, exclude=set(ctx.result(Leaving).nodes))
        if via is None:
            raise TransientStepError("no master of the cluster is ready", step="release-pvs")
        names = [pv.name for pv in await _volumes(job, ctx, server, "release-pvs")]
        phases = await storage.pv_phases(shell, via, step="release-pvs")
        busy = storage.bound(phases, names)
        if busy:
            raise PermanentStepError(
                "the storage server cannot be healed while its PersistentVolumes are in use: "
                f"{', '.join(busy)} Bound; delete the claims (and their pods) first",
                step="release-pvs",
            )
        deleted = await storage.delete_pvs(
            shell, via, names, wait=job.settings.pv_available_timeout, step="release-pvs"
        )
        return PvsReleased(deleted=tuple(deleted), server=server.nic_ip)

    return Step(
        "release-pvs",
        run,
        idempotent=True,
        timeout=job.settings.pv_available_timeout + 120.0,
        needs=(Confirmed, Discovered, DrainServers, Leaving),
    )
