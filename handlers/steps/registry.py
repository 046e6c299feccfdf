"""The private container registries' step (``private_registry_connection_info``):
``configure-registry`` in the INSTANTIATE, SCALE and HEAL plans, after the joins
(the install script rewrites containerd's config), on the nodes the operation
builds: every node on INSTANTIATE, the added and rebuilt ones on SCALE and HEAL
(:mod:`handlers.toolkit.registry` says what goes where).

Each registry's CA (``certificate_path``) is read from the instance's VNF
package (:mod:`handlers.steps.package`). The step is convergent (files replaced
only when they differ) and ends with the login check from every node it
configured; a refused login fails it with the server and the user named, never
the password.
"""

from __future__ import annotations

import asyncio
from typing import Any

from handlers.job import ClusterJob
from handlers.results import Confirmed, Discovered
from handlers.steps.package import package_files
from handlers.toolkit import registry
from subscriber.errors import PermanentStepError, SkipStep
from subscriber.kernel import JobContext, Step, StepResult

__all__ = ["STEP", "configure_registry"]

STEP = "configure-registry"
_PARAM = "private_registry_connection_info.certificate_path"


async def _certificates(job: ClusterJob, ctx: JobContext) -> dict[str, bytes]:
    """Each HTTPS registry's CA certificate (by server) from the VNF package."""
    params = await job.params(ctx)
    wanted = {
        r.server: r.certificate_path
        for r in params.private_registry_connection_info
        if r.certificate_path and r.connection_type == "1"
    }
    files = await package_files(job, ctx, {p: _PARAM for p in wanted.values()}, step=STEP)
    for path, pem in files.items():
        if b"-----BEGIN CERTIFICATE-----" not in pem:
            raise PermanentStepError(f"{_PARAM} {path!r} is not a PEM certificate", step=STEP)
    return {server: files[path] for server, path in wanted.items()}


class RegistriesApplied(StepResult):
    nodes: dict[str, Any] = {}
    registries: tuple[str, ...] = ()


def configure_registry(job: ClusterJob) -> Step:
    """CA, ``hosts.toml``, ``/etc/hosts`` lines and credentials of every registry on the
    nodes this operation builds, then the login checked from each of them."""

    async def run(ctx: JobContext) -> RegistriesApplied:
        params = await job.params(ctx)
        if not params.private_registry_connection_info:
            raise SkipStep(
                "no private_registry_connection_info in the parameters", RegistriesApplied()
            )
        found, shell = job.discovered(ctx), await job.shell(ctx)
        targets = found.touched()
        if not targets:
            raise SkipStep("no new or rebuilt node", RegistriesApplied())
        cas = await _certificates(job, ctx)
        outcomes = await asyncio.gather(
            *(registry.apply_registries(shell, found.topology, n, cas, step=STEP) for n in targets),
            return_exceptions=True,
        )
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        done = [o for o in outcomes if isinstance(o, registry.NodeRegistryResult)]
        return RegistriesApplied(
            nodes={r.node: r.as_json() for r in done},
            registries=tuple(r.server for r in params.private_registry_connection_info),
        )

    return Step(STEP, run, idempotent=True, timeout=240.0, needs=(Confirmed, Discovered))
