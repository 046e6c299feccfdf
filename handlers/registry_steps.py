"""The private registries' step (``private_registry_connection_info``):
``configure-registry`` in the INSTANTIATE, SCALE and HEAL plans, after the joins
(the install script rewrites containerd's config), on the nodes the operation
builds: every node on INSTANTIATE, the added and rebuilt ones on SCALE and HEAL
(:mod:`handlers.toolkit.registry` says what goes where).

Each registry's CA (``certificate_path``) is read from the VNF package Tacker
holds for the instance's ``vnfdId``, as the Helm script is. The step is
convergent (files replaced only when they differ) and ends with the login check
from every node it configured; a refused login fails it with the server and the
user named, never the password.
"""

from __future__ import annotations

import asyncio
from typing import Any

from handlers import steps
from handlers.job import ClusterJob
from handlers.toolkit import helm, registry
from subscriber.errors import PermanentStepError, SkipStep
from subscriber.kernel import JobContext, Step

__all__ = ["STEP", "configure_registry"]

STEP = "configure-registry"


async def _certificates(job: ClusterJob, ctx: JobContext) -> dict[str, bytes]:
    """Each HTTPS registry's CA certificate (by server) from the VNF package."""
    params = await job.params(ctx)
    wanted = [
        r
        for r in params.private_registry_connection_info
        if r.certificate_path and r.connection_type == "1"
    ]
    if not wanted:
        return {}
    tacker = ctx.services.need_tacker()
    vnfd_id = (await tacker.get_vnf_instance(ctx.vnf_instance_id)).get("vnfdId")
    if not vnfd_id:
        raise PermanentStepError(
            f"VNF instance {ctx.vnf_instance_id} names no vnfdId: no package to read the "
            "registries' certificate_path from",
            step=STEP,
        )
    package = await tacker.vnf_package_content(str(vnfd_id))
    cas: dict[str, bytes] = {}
    for item in wanted:
        assert item.certificate_path is not None
        pem = helm.read_package_file(
            package,
            item.certificate_path,
            step=STEP,
            param="private_registry_connection_info.certificate_path",
        )
        if b"-----BEGIN CERTIFICATE-----" not in pem:
            raise PermanentStepError(
                f"private_registry_connection_info.certificate_path {item.certificate_path!r} "
                "is not a PEM certificate",
                step=STEP,
            )
        cas[item.server] = pem
    return cas


def configure_registry(job: ClusterJob) -> Step:
    """CA, ``hosts.toml``, ``/etc/hosts`` lines and credentials of every registry on the
    nodes this operation builds, then the login checked from each of them."""

    async def run(ctx: JobContext) -> dict[str, Any]:
        params = await job.params(ctx)
        if not params.private_registry_connection_info:
            raise SkipStep("no private_registry_connection_info in the parameters", {"nodes": {}})
        topo, shell = job.topology(ctx), await job.shell(ctx)
        targets = steps._touched(ctx, topo)
        if not targets:
            raise SkipStep("no new or rebuilt node", {"nodes": {}})
        cas = await _certificates(job, ctx)
        outcomes = await asyncio.gather(
            *(registry.apply_registries(shell, topo, n, cas, step=STEP) for n in targets),
            return_exceptions=True,
        )
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        done = [o for o in outcomes if isinstance(o, registry.NodeRegistryResult)]
        return {
            "nodes": {r.node: r.as_json() for r in done},
            "registries": [r.server for r in params.private_registry_connection_info],
        }

    return Step(STEP, run, idempotent=True, timeout=240.0)
