"""Loaded into a ``serve`` subprocess by the kill/resume test (``handlers.modules``).

Routes INSTANTIATE / COMPLETED to the real :class:`InstantiateCluster`, with
Tacker and OpenStack replaced by the in-memory fakes built from the JSON file
named by ``LCCN_TEST_CLUSTER`` (write-backs are appended to ``<file>.writes``).
SSH, the store and the runner are the process's own, real ones.

For the kill-during-discovery test: with ``LCCN_TEST_DISCOVERY_GATE`` set,
OpenStack's first port lookup writes ``<gate>.waiting`` and waits until the
gate file exists; and every plan built is appended to ``<file>.plans`` as its
step outline (JSON), so the test can compare the plans of both runs.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from handlers.instantiate import InstantiateCluster
from schemas import Notification
from subscriber.config import ClusterSettings
from subscriber.kernel import Plan, RoutingTable, Services
from subscriber.kernel.ports import KubernetesAccess, PortAddresses
from tests.cluster_fakes import FakeOpenStack, FakeTacker, with_services


class _RecordingTacker(FakeTacker):
    async def write_back(
        self, vnf_instance_id: str, access: KubernetesAccess, *, api: str = "v2"
    ) -> str:
        occ = await super().write_back(vnf_instance_id, access, api=api)
        path = Path(os.environ["LCCN_TEST_CLUSTER"] + ".writes")
        with path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps({"instance": vnf_instance_id, "endpoint": access.endpoint}) + "\n")
        return occ


class _GatedOpenStack(FakeOpenStack):
    async def port_addresses(self, stack_id: str, cp_name: str) -> PortAddresses:
        gate = os.environ.get("LCCN_TEST_DISCOVERY_GATE")
        if gate:
            Path(gate + ".waiting").touch()
            while not Path(gate).exists():
                await asyncio.sleep(0.05)
        return await super().port_addresses(stack_id, cp_name)


def _fakes() -> tuple[FakeTacker, FakeOpenStack]:
    data: dict[str, Any] = json.loads(Path(os.environ["LCCN_TEST_CLUSTER"]).read_text())
    tacker = _RecordingTacker(instances=data["instances"], op_occs=data["op_occs"])
    openstack = _GatedOpenStack(
        ports={
            (p["stack"], p["cp"]): PortAddresses(tuple(p["fixed"]), p.get("floating"))
            for p in data["ports"]
        },
        hosts=data["hosts"],
    )
    return tacker, openstack


class _WithFakes:
    name = "cluster-instantiate"

    def __init__(self) -> None:
        env = json.loads(os.environ.get("LCCN_TEST_SCRIPT_ENV", "{}"))
        self._inner = InstantiateCluster(ClusterSettings(script_env=env, install_timeout=120.0))
        self._tacker, self._openstack = _fakes()

    def plan(self, notification: Notification) -> Plan:
        fakes = Services(tacker=self._tacker, openstack=self._openstack)
        plan = self._inner.plan(notification)
        with Path(os.environ["LCCN_TEST_CLUSTER"] + ".plans").open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(plan.outline()) + "\n")
        return with_services(plan, fakes)


def register(registry: RoutingTable) -> None:
    registry.register(_WithFakes(), operation="INSTANTIATE", state="COMPLETED")
