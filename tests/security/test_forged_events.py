"""A notification is a claim, Tacker is the truth: forged or mismatched ids never act.

Whoever can post to the callback (or write to the Kafka topic) could pair one tenant's
op-occ with another tenant's instance, or claim an operation or state Tacker never
reached. The real Tacker 16.0.0 holds a real instantiated VNF; the forged notifications
below name it (or nothing real), and each is stored as ``rejected`` with its reason, no
SSH command runs, no OpenStack read is made, and no replay can take it back to running.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from handlers import default_routing
from subscriber.config import (
    ClusterSettings,
    DatabaseSettings,
    DispatchSettings,
    HttpSettings,
    Settings,
)
from subscriber.kernel import Services
from subscriber.service import Service
from subscriber.store import EventRow, EventStatus
from tests.cluster_fakes import FakeOpenStack, FakeSsh
from tests.conftest import free_port
from tests.factories import op_occ
from tests.tacker.test_talk_back import instantiate, tacker_settings, terminate
from tests.testbed import tacker_bed as tb
from tests.testbed.openstack_sim.process import SimProcess
from tests.testbed.tacker_api import TackerClient as SyncTacker

pytestmark = [pytest.mark.tacker, pytest.mark.asyncio]


@pytest.fixture
async def guarded(
    tmp_path: Path, bed: tb.BedState
) -> AsyncIterator[tuple[Service, FakeSsh, FakeOpenStack]]:
    """A Service with the cluster handlers on, reading the real Tacker; SSH and OpenStack
    are recorders (nothing forged may reach them)."""
    ssh, openstack = FakeSsh(), FakeOpenStack()
    settings = Settings(
        http=HttpSettings(host="127.0.0.1", port=free_port()),
        database=DatabaseSettings(url=f"sqlite+aiosqlite:///{tmp_path / 'lccn.db'}"),
        dispatch=DispatchSettings(rescan_interval=0.5, backoff_initial=0.2, max_attempts=3),
        # No reconciler: it would store the real instance's own op-occs beside the forged
        # notification (it is on by default, and reaches back past the store's start).
        tacker=tacker_settings(bed, reconcile_interval=0),
    )
    svc = Service(
        settings,
        routing=default_routing(cluster=ClusterSettings(), cluster_handlers=True),
        services=Services(ssh=ssh, openstack=openstack),
    )
    await svc.start()
    try:
        yield svc, ssh, openstack
    finally:
        await svc.stop()


@pytest.fixture(scope="module")
def real_vnf(bed: tb.BedState, sim: SimProcess, tacker: SyncTacker) -> Any:
    """A real instantiated VNF (its instance and INSTANTIATE op-occ) and a second instance."""
    inst, occ = asyncio.run(instantiate(tacker, bed, sim))
    other = tacker.create(bed.vnfd_id or "", f"forged-other-{uuid.uuid4().hex[:6]}")
    yield inst, occ, other
    tacker.delete(other)
    asyncio.run(terminate(tacker, inst))


async def _post(svc: Service, body: dict[str, Any]) -> EventRow:
    url = f"http://127.0.0.1:{svc.port}{svc.settings.http.path}"
    async with aiohttp.ClientSession() as http, http.post(url, json=body) as resp:
        assert resp.status == 204, await resp.text()
    async with asyncio.timeout(60):
        while True:
            (event,) = await svc.store.events.list(vnf_instance_id=body["vnfInstanceId"])
            if event.status not in EventStatus.OPEN:
                return event
            await asyncio.sleep(0.05)


def _forged(instance: str, occ: str, operation: str, state: str = "COMPLETED") -> dict[str, Any]:
    return op_occ(instance=instance, op_occ_id=occ, operation=operation, state=state)


async def _assert_rejected(
    guarded: tuple[Service, FakeSsh, FakeOpenStack], forged: dict[str, Any], why: str
) -> None:
    """Post ``forged``: its event is rejected for ``why``, and nothing was acted on."""
    svc, ssh, openstack = guarded
    event = await _post(svc, forged)
    assert event.status == EventStatus.REJECTED, (event.status, event.status_detail)
    assert why in (event.status_detail or "")
    assert ssh.calls == [] and openstack.calls == []
    assert await svc.store.replays.request([event.id], "anew") == []
    job = await svc.store.jobs.current(event.id)
    assert job is not None and job.error_class == "rejected"
    assert [s.name for s in await svc.store.jobs.steps(job.id)] == ["confirm"]


async def test_forged_instance_is_not_acted_on(
    guarded: tuple[Service, FakeSsh, FakeOpenStack], real_vnf: Any
) -> None:
    inst, occ, other = real_vnf
    # the real op-occ of one instance, paired with another (a tenant's VMs as the target)
    forged = _forged(other, occ, "INSTANTIATE")
    await _assert_rejected(guarded, forged, f"belongs to VNF instance {inst}")


async def test_forged_operation_is_not_acted_on(
    guarded: tuple[Service, FakeSsh, FakeOpenStack], real_vnf: Any
) -> None:
    inst, occ, _ = real_vnf
    await _assert_rejected(guarded, _forged(inst, occ, "HEAL"), "its operation is INSTANTIATE")


async def test_unknown_op_occ_is_not_acted_on(
    guarded: tuple[Service, FakeSsh, FakeOpenStack], real_vnf: Any
) -> None:
    inst, _, _ = real_vnf
    made_up = str(uuid.uuid4())
    forged = _forged(inst, made_up, "INSTANTIATE")
    await _assert_rejected(guarded, forged, f"Tacker has no op-occ {made_up}")
