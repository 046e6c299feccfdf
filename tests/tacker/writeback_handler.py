"""A test handler module (``handlers.modules``): INSTANTIATE COMPLETED -> write back a fixed
Kubernetes access; SCALE COMPLETED blocks until released (to keep jobs busy); any
MODIFY_INFO is recorded (an echo must never get here)."""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import SecretStr

from schemas import Notification
from subscriber.kernel import JobContext, Plan, RoutingTable, Step
from subscriber.kernel.ports import KubernetesAccess

BEARER = "test-bearer-9f8e7d6c5b4a39281706"
ACCESS = KubernetesAccess(
    endpoint="https://192.0.2.10:6443",
    ssl_ca_cert="-----BEGIN CERTIFICATE-----\nMIIBtest\n-----END CERTIFICATE-----\n",
    bearer_token=SecretStr(BEARER),
)
MODIFY_INFO_SEEN: list[str] = []
BUSY: dict[str, asyncio.Event] = {}


class WriteBack:
    name = "test-write-back"

    def plan(self, notification: Notification) -> Plan:
        return Plan((Step("write_back", self._write_back, timeout=180.0),))

    @staticmethod
    async def _write_back(ctx: JobContext) -> dict[str, Any]:
        occ = await ctx.services.need_tacker().write_back(ctx.vnf_instance_id, ACCESS)
        return {"modify_info": occ}


class Busy:
    name = "test-busy"

    def plan(self, notification: Notification) -> Plan:
        return Plan((Step("block", self._block, timeout=120.0),))

    @staticmethod
    async def _block(ctx: JobContext) -> None:
        await BUSY.setdefault(ctx.vnf_instance_id, asyncio.Event()).wait()


class RecordModifyInfo:
    name = "test-modify-info"

    def plan(self, notification: Notification) -> Plan:
        MODIFY_INFO_SEEN.append(notification.vnfLcmOpOccId)  # type: ignore[union-attr]
        return Plan(())


def register(registry: RoutingTable) -> None:
    registry.register(WriteBack(), operation="INSTANTIATE", state="COMPLETED")
    registry.register(Busy(), operation="SCALE", state="COMPLETED")
    registry.register(RecordModifyInfo(), operation="MODIFY_INFO")
