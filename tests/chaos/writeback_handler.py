"""A handler module for the Tacker write-back chaos scenario (``handlers.modules``).

INSTANTIATE COMPLETED runs one step, ``write-back``, built like the cluster
handlers' own (handlers/steps/vim.py): idempotent, skipped when Tacker's
``vimConnectionInfo`` already holds our entry (the product's own check), else
``TackerClient.write_back`` (PATCH, then wait for the MODIFY_INFO op-occ).
Each run leaves ``start``/``end`` lines in the side-effect log of
tests/fence_handler.py; the PATCHes Tacker applied are counted by Tacker.
"""

from __future__ import annotations

from typing import Any

from pydantic import SecretStr

from handlers.steps.vim import has_entry
from schemas import Notification
from subscriber.errors import SkipStep
from subscriber.kernel import JobContext, Plan, RoutingTable, Step
from subscriber.kernel.ports import KubernetesAccess
from tests.fence_handler import mark

ENDPOINT = "https://192.0.2.20:6443"
CA = "-----BEGIN CERTIFICATE-----\nMIIBchaos\n-----END CERTIFICATE-----\n"


async def _write_back(ctx: JobContext) -> dict[str, Any]:
    mark(ctx, "write-back", "start")
    tacker = ctx.services.need_tacker()
    instance = await tacker.get_vnf_instance(ctx.vnf_instance_id)
    if has_entry(instance, ENDPOINT, CA):
        mark(ctx, "write-back", "end")
        raise SkipStep(f"vimConnectionInfo already has {ENDPOINT}", {"endpoint": ENDPOINT})
    access = KubernetesAccess(
        endpoint=ENDPOINT, ssl_ca_cert=CA, bearer_token=SecretStr("chaos-bearer-0a1b2c3d")
    )
    occ = await tacker.write_back(ctx.vnf_instance_id, access)
    mark(ctx, "write-back", "end")
    return {"endpoint": ENDPOINT, "modifyOpOccId": occ}


class ChaosWriteBack:
    name = "chaos-write-back"

    def plan(self, notification: Notification) -> Plan:
        return Plan((Step("write-back", _write_back, idempotent=True, timeout=120.0),))


def register(registry: RoutingTable) -> None:
    registry.register(ChaosWriteBack(), operation="INSTANTIATE", state="COMPLETED")
