"""Loaded into a ``serve`` subprocess by the kill/resume test (``handlers.modules``).

Routes INSTANTIATE / COMPLETED to the real :class:`InstantiateCluster`, with
Tacker and OpenStack replaced by the in-memory fakes built from the JSON file
named by ``LCCN_TEST_CLUSTER`` (write-backs are appended to ``<file>.writes``).
SSH, the store and the runner are the process's own, real ones.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from handlers import HandlerRegistry, JobContext, Plan
from handlers.instantiate import InstantiateCluster
from handlers.ports import KubernetesAccess, PortAddresses
from subscriber.config import ClusterSettings
from tests.cluster_fakes import FakeOpenStack, FakeTacker


class _RecordingTacker(FakeTacker):
    async def write_back(
        self, vnf_instance_id: str, access: KubernetesAccess, *, api: str = "v2"
    ) -> str:
        occ = await super().write_back(vnf_instance_id, access, api=api)
        path = Path(os.environ["LCCN_TEST_CLUSTER"] + ".writes")
        with path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps({"instance": vnf_instance_id, "endpoint": access.endpoint}) + "\n")
        return occ


def _fakes() -> tuple[FakeTacker, FakeOpenStack]:
    data: dict[str, Any] = json.loads(Path(os.environ["LCCN_TEST_CLUSTER"]).read_text())
    tacker = _RecordingTacker(instances=data["instances"], op_occs=data["op_occs"])
    openstack = FakeOpenStack(
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

    async def plan(self, ctx: JobContext) -> Plan:
        ctx.services = {**ctx.services, "tacker": self._tacker, "openstack": self._openstack}
        return await self._inner.plan(ctx)


def register(registry: HandlerRegistry) -> None:
    registry.register(_WithFakes(), operation="INSTANTIATE", state="COMPLETED")
