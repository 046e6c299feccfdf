"""The guide's complete example (``docs/examples/change_ext_conn.py``, "Adding an
operation") loads as a handler module of one's own and runs: after a CHANGE_EXT_CONN
gave the cluster CP a floating IP, the VIM entry is written back with the new endpoint."""

from __future__ import annotations

import base64

import aiohttp
import pytest

from handlers import routing_for
from subscriber.config import HandlerSettings
from subscriber.kernel import Services
from subscriber.kernel.ports import PortAddresses
from subscriber.store import EventStatus
from tests import REPO
from tests.cluster_fakes import (
    ACCESS,
    FakeSsh,
    access_reply,
    cluster_vnf,
    k8s_params,
    lcm_op_occ,
)
from tests.conftest import ServiceFactory, callback_url, make_settings, wait_settled
from tests.factories import op_occ

pytestmark = pytest.mark.asyncio

CA = "-----BEGIN CERTIFICATE-----\nMIIBexample\n-----END CERTIFICATE-----\n"


async def test_the_change_ext_conn_example_loads_and_writes_the_new_endpoint_back(
    start_service: ServiceFactory,
    http: aiohttp.ClientSession,
    monkeypatch: pytest.MonkeyPatch,
    db_url: str,
) -> None:
    monkeypatch.syspath_prepend(str(REPO / "docs" / "examples"))
    settings = make_settings(db_url).model_copy(
        update={"handlers": HandlerSettings(modules=("change_ext_conn",))}
    )
    routing = routing_for(settings, configured={"tacker", "openstack"})
    (row,) = [r for r in routing.table() if r.operation == "CHANGE_EXT_CONN"]
    assert (row.state, row.handler) == ("COMPLETED", "cluster-change-ext-conn")
    assert row.steps == ("confirm", "load-params", "discover", "cluster-access", "write-back")

    # A cluster INSTANTIATE built (its parameters name a floating-IP CP), then a
    # CHANGE_EXT_CONN whose request repeats no cluster parameter gave that CP an address.
    tacker, openstack, inst, _ = cluster_vnf(
        ["10.9.0.15"], ["10.9.0.16"], params=k8s_params(cluster_fip_name="fip_CP")
    )
    (master,) = [
        v
        for v in tacker.instances[inst]["instantiatedVnfInfo"]["vnfcResourceInfo"]
        if v["vduId"] == "masterNode"
    ]
    openstack.ports[(master["metadata"]["stack_id"], "fip_CP")] = PortAddresses((), "192.0.2.44")
    change = lcm_op_occ(tacker, inst, "CHANGE_EXT_CONN")
    ssh = FakeSsh()
    ssh.on(r"cat /etc/kubernetes/pki/ca\.crt", CA)
    ssh.on(r"get secret .* -o jsonpath", base64.b64encode(b"bearer-t0ken").decode())
    ssh.on(ACCESS, access_reply(CA, "bearer-t0ken"))

    svc = await start_service(
        routing=routing, services=Services(tacker=tacker, openstack=openstack, ssh=ssh)
    )
    body = op_occ(instance=inst, op_occ_id=change, operation="CHANGE_EXT_CONN", state="COMPLETED")
    async with http.post(callback_url(svc), json=body) as resp:
        assert resp.status == 204
    (event,) = await wait_settled(svc, 1)
    assert event.status == EventStatus.DONE, event.status_detail
    ((written, access, api),) = tacker.write_backs
    assert (written, api) == (inst, "v2")
    assert access.endpoint == "https://192.0.2.44:6443" and access.ssl_ca_cert == CA
    assert access.bearer_token.get_secret_value() == "bearer-t0ken"
    job = await svc.store.jobs.current(event.id)
    assert job is not None
    stored = {s.name: s.result_json() for s in await svc.store.jobs.steps(job.id)}
    assert stored["cluster-access"] == {"endpoint": "https://192.0.2.44:6443", "sslCaCert": CA}
    assert "bearer-t0ken" not in repr(stored)
