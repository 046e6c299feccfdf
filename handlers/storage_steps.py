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

from handlers import steps
from handlers.job import ClusterJob
from handlers.toolkit import kubeadm, storage
from schemas.cluster_params import K8sClusterInstallationParams, StorageServerParams
from subscriber.errors import PermanentStepError, SkipStep, TransientStepError
from subscriber.kernel import JobContext, Step

__all__ = ["nfs_client", "register_pvs", "release_pvs", "storage_server"]


def _storage(params: K8sClusterInstallationParams, what: str) -> StorageServerParams:
    if params.storage_server is None:
        raise SkipStep("no storage_server in the parameters", {what: {}})
    return params.storage_server


async def _server(ctx: JobContext, storage_params: StorageServerParams) -> storage.StorageServer:
    tacker = ctx.services.need_tacker()
    instance = await tacker.get_vnf_instance(ctx.vnf_instance_id)
    return await storage.find_server(instance, storage_params, ctx.services.need_openstack())


def storage_server(job: ClusterJob) -> Step:
    """Each Cinder volume formatted (blank only) and mounted, the NFS exports applied."""

    async def run(ctx: JobContext) -> dict[str, Any]:
        params = await job.params(ctx)
        conf = _storage(params, "volumes")
        shell, openstack = await job.shell(ctx), ctx.services.need_openstack()
        server = await _server(ctx, conf)
        volumes: dict[str, dict[str, str]] = {}
        for volume in conf.cinder_volume_setup_params:
            device = await storage.volume_device(server, volume.volume_resource_id, openstack)
            done = await storage.set_up_volume(
                shell, conf, server, device, volume.mount_to, step="storage-server"
            )
            volumes[volume.mount_to] = {"device": device, "done": done}
        changed = False
        if conf.nfs_server_setup_params:
            changed = await storage.apply_exports(shell, conf, server, step="storage-server")
        return {
            "server": server.as_json(),
            "volumes": volumes,
            "exports": [s.export_dir for s in conf.nfs_server_setup_params],
            "exportsChanged": changed,
        }

    return Step(
        "storage-server", run, idempotent=True, timeout=job.settings.install_timeout + 360.0
    )


def nfs_client(job: ClusterJob) -> Step:
    """``nfs-common`` on the nodes this operation builds (all of them on INSTANTIATE)."""

    async def run(ctx: JobContext) -> dict[str, Any]:
        params = await job.params(ctx)
        _storage(params, "nodes")
        topo, shell = job.topology(ctx), await job.shell(ctx)
        targets = steps._touched(ctx, topo)
        if not targets:
            raise SkipStep("no new or rebuilt node", {"nodes": {}})
        done = await asyncio.gather(
            *(storage.install_nfs_client(shell, n, step="nfs-client") for n in targets)
        )
        return {"nodes": {n.name: d for n, d in zip(targets, done, strict=True)}}

    return Step("nfs-client", run, idempotent=True, timeout=job.settings.install_timeout + 60.0)


async def _volumes(
    job: ClusterJob, ctx: JobContext, server: storage.StorageServer, step: str
) -> list[storage.PersistentVolume]:
    """The PVs of ``pv_registration_params``, read from the VNF package in Tacker, each
    with its ``nfs_server_cp``'s address."""
    params = await job.params(ctx)
    tacker, openstack = ctx.services.need_tacker(), ctx.services.need_openstack()
    vnfd_id = (await tacker.get_vnf_instance(ctx.vnf_instance_id)).get("vnfdId")
    if not vnfd_id:
        raise PermanentStepError(
            f"VNF instance {ctx.vnf_instance_id} names no vnfdId: no package to read the "
            "PV manifests from",
            step=step,
        )
    package = await tacker.vnf_package_content(str(vnfd_id))
    out = []
    for reg in params.pv_registration_params:
        text = storage.read_package_file(
            package, reg.pv_manifest_file_path, what="pv_manifest_file_path", step=step
        )
        address = await storage.nfs_server_ip(server, reg.nfs_server_cp, openstack)
        out.append(storage.read_manifest(text, reg.pv_manifest_file_path, address, step=step))
    return out


def register_pvs(job: ClusterJob) -> Step:
    """Each PV applied with ``spec.nfs.server`` = the storage server's address, and
    waited for until ``Available`` (``cluster.pv_available_timeout``); else deleted
    and the step fails."""

    async def run(ctx: JobContext) -> dict[str, Any]:
        params = await job.params(ctx)
        conf = _storage(params, "pvs")
        if not params.pv_registration_params:
            raise SkipStep("no pv_registration_params", {"pvs": {}})
        topo, shell = job.topology(ctx), await job.shell(ctx)
        via = await kubeadm.anchor(shell, topo)
        if via is None:
            raise TransientStepError("no master of the cluster is ready", step="register-pvs")
        server = await _server(ctx, conf)
        done: dict[str, str] = {}
        for pv in await _volumes(job, ctx, server, "register-pvs"):
            done[pv.name] = await storage.register_pv(
                shell, via, pv, wait=job.settings.pv_available_timeout, step="register-pvs"
            )
        return {"pvs": done, "server": server.nic_ip, "via": via.name}

    return Step(
        "register-pvs",
        run,
        idempotent=True,
        # Each PV waits up to pv_available_timeout; the count is not known before the
        # parameters are read, so the bound is for a generous number of PVs.
        timeout=job.settings.pv_available_timeout * 8 + 300.0,
    )


def release_pvs(job: ClusterJob, request_step: str, select_step: str) -> Step:
    """Before Tacker rebuilds the storage server (its server is in the drain request):
    refused while one of its PVs is ``Bound``, else every PV of it is deleted."""

    async def run(ctx: JobContext) -> dict[str, Any]:
        params = await job.params(ctx)
        conf = _storage(params, "deleted")
        server = await _server(ctx, conf)
        servers = set(ctx.results[request_step]["servers"])
        if not servers & {server.server_id, server.vnfc_id}:
            raise SkipStep("the storage server is not leaving", {"deleted": []})
        if not params.pv_registration_params:
            raise SkipStep("no pv_registration_params", {"deleted": []})
        topo, shell = job.topology(ctx), await job.shell(ctx)
        via = await kubeadm.anchor(shell, topo, exclude=set(ctx.results[select_step]["nodes"]))
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
        return {"deleted": deleted, "server": server.nic_ip}

    return Step(
        "release-pvs", run, idempotent=True, timeout=job.settings.pv_available_timeout + 120.0
    )
