"""The real Tacker 16.0.0 against the simulated OpenStack, with ``lccn-subscriber serve`` listening.

Each test makes its own VNF instance of the sample package and drives one lifecycle
through Tacker's v2 API; it checks what Tacker reports, what the simulated cloud holds
(read through openstacksdk, as the product will), and the notifications Tacker sent.
The last test holds ``serve``'s store against everything Tacker sent in the session.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import pytest

from tests.tacker.helpers import k8s_params
from tests.testbed import tacker_bed as tb
from tests.testbed.openstack_sim.process import SimProcess
from tests.testbed.tacker_api import (
    NETWORK_ID,
    CallbackRecorder,
    TackerClient,
    instantiate_request,
    unique_name,
    wait_for,
)
from tests.testbed.tacker_serve import ServeProcess

pytestmark = pytest.mark.tacker


@pytest.fixture
def lcm(
    tacker: TackerClient,
    bed: tb.BedState,
    sim: SimProcess,
    recorder: CallbackRecorder,
    serve: ServeProcess,
) -> LcmDriver:
    return LcmDriver(tacker, bed, sim, recorder)


class LcmDriver:
    """Create + instantiate + the other operations, for one test's instances."""

    def __init__(
        self, tacker: TackerClient, bed: tb.BedState, sim: SimProcess, rec: CallbackRecorder
    ) -> None:
        self.tacker, self.bed, self.sim, self.rec = tacker, bed, sim, rec

    def instantiate(self, flavour: str) -> tuple[str, dict[str, Any]]:
        assert self.bed.vnfd_id
        inst_id = self.tacker.create(self.bed.vnfd_id, unique_name(f"k8s-{flavour}"))
        occ = self.tacker.run_op(
            inst_id,
            "instantiate",
            instantiate_request(
                self.sim.vim_connection_info(), k8s_params(flavour), NETWORK_ID, flavour=flavour
            ),
        )
        assert occ["operationState"] == "COMPLETED", occ.get("error")
        return inst_id, occ

    def op(self, inst_id: str, task: str, body: dict[str, Any]) -> dict[str, Any]:
        occ = self.tacker.run_op(inst_id, task, body)
        assert occ["operationState"] == "COMPLETED", occ.get("error")
        return occ

    def completed_notification(self, occ_id: str) -> dict[str, Any]:
        return self.rec.wait(vnfLcmOpOccId=occ_id, operationState="COMPLETED")

    def vnfcs(self, inst_id: str, vdu: str | None = None) -> list[dict[str, Any]]:
        info = self.tacker.show(inst_id)["instantiatedVnfInfo"]
        return [v for v in info["vnfcResourceInfo"] if vdu is None or v["vduId"] == vdu]

    def terminate_and_delete(self, inst_id: str) -> None:
        self.op(inst_id, "terminate", {"terminationType": "FORCEFUL"})
        self.tacker.delete(inst_id)


CP_OF = {"masterNode": "masterNode_CP1", "workerNode": "workerNode_CP2"}


def vnfc_addresses(conn: Any, vnfcs: list[dict[str, Any]]) -> dict[str, str]:
    """VNFC id -> NIC address, read the way the product does: Heat through openstacksdk.

    ``vnfcResourceInfo[].metadata.stack_id`` names the VNFC's nested stack; the CP's
    ``fixed_ips`` come from ``GET stacks/{stack_id}/resources/{cp}``.
    """
    out = {}
    for vnfc in vnfcs:
        stack_id, cp = vnfc["metadata"]["stack_id"], CP_OF[vnfc["vduId"]]
        res = conn.orchestration.get(f"/stacks/{stack_id}/resources/{cp}").json()["resource"]
        out[vnfc["id"]] = res["attributes"]["fixed_ips"][0]["ip_address"]
    return out


def _sim_port_ips(sim: SimProcess) -> dict[str, str]:
    """server id -> address, from the simulator's own state."""
    return {
        p["device_id"]: p["fixed_ips"][0]["ip_address"]
        for p in sim.control.state()["ports"]
        if p["device_id"]
    }


def test_instantiate_simple_maps_each_vnfc_to_a_pool_address(
    lcm: LcmDriver, sim: SimProcess, openstack_conn: Any
) -> None:
    inst_id, occ = lcm.instantiate("simple")

    # What Tacker sent: STARTING(START), PROCESSING(RESULT), COMPLETED(RESULT) + VNFCs.
    done = lcm.completed_notification(occ["id"])
    assert done["notificationStatus"] == "RESULT" and done["operation"] == "INSTANTIATE"
    assert (
        lcm.rec.wait(vnfLcmOpOccId=occ["id"], operationState="STARTING")["notificationStatus"]
        == "START"
    )
    assert (
        lcm.rec.wait(vnfLcmOpOccId=occ["id"], operationState="PROCESSING")["notificationStatus"]
        == "RESULT"
    )
    assert sorted(a["vduId"] for a in done["affectedVnfcs"]) == [
        "masterNode",
        "workerNode",
        "workerNode",
    ]
    assert {a["changeType"] for a in done["affectedVnfcs"]} == {"ADDED"}

    vnfcs = lcm.vnfcs(inst_id)
    assert sorted(v["vduId"] for v in vnfcs) == ["masterNode", "workerNode", "workerNode"]
    ips = vnfc_addresses(openstack_conn, vnfcs)
    pool = set(sim.control.state()["server_pool"])
    assert set(ips.values()) <= pool and len(set(ips.values())) == len(vnfcs)
    # The same mapping from Nova (server addresses, compute host) and the sim's ports.
    sim_ports = _sim_port_ips(sim)
    for vnfc in vnfcs:
        server = openstack_conn.compute.get_server(vnfc["computeResource"]["resourceId"])
        addrs = [a["addr"] for net in server.addresses.values() for a in net]
        assert addrs == [ips[vnfc["id"]]] == [sim_ports[server.id]]
        assert server.compute_host in sim.config.compute_hosts
    lcm.terminate_and_delete(inst_id)


def test_instantiate_complex_three_masters_behind_a_vip(
    lcm: LcmDriver, sim: SimProcess, openstack_conn: Any
) -> None:
    inst_id, _ = lcm.instantiate("complex")
    masters = lcm.vnfcs(inst_id, "masterNode")
    assert len(masters) == 3 and len(lcm.vnfcs(inst_id, "workerNode")) == 2

    # The cluster endpoint: vip_CP of the top stack, from the VIP pool (no server on it).
    top = tb_top_stack(lcm, inst_id)
    vip = openstack_conn.orchestration.get(f"/stacks/{top}/resources/vip_CP").json()
    vip_ip = vip["resource"]["attributes"]["fixed_ips"][0]["ip_address"]
    assert vip_ip in sim.control.state()["vip_pool"]
    # Masters: one anti-affinity server group, each on its own compute host.
    servers = [
        openstack_conn.compute.get_server(m["computeResource"]["resourceId"]) for m in masters
    ]
    assert len({s.compute_host for s in servers}) == 3
    groups = {tuple(s.server_groups) for s in servers}
    assert len(groups) == 1 and len(next(iter(groups))) == 1

    lcm.terminate_and_delete(inst_id)
    assert not [s for s in sim.control.state()["stacks"] if inst_id in s["name"]]
    assert vip_ip not in {p["fixed_ips"][0]["ip_address"] for p in sim.control.state()["ports"]}


def tb_top_stack(lcm: LcmDriver, inst_id: str) -> str:
    stack_id = lcm.tacker.show(inst_id)["instantiatedVnfInfo"]["metadata"]["stack_id"]
    return f"vnf-{inst_id}/{stack_id}"


def test_scale_out_then_in(lcm: LcmDriver, sim: SimProcess, openstack_conn: Any) -> None:
    inst_id, _ = lcm.instantiate("simple")
    before = {v["id"] for v in lcm.vnfcs(inst_id, "workerNode")}

    out = lcm.op(inst_id, "scale", {"type": "SCALE_OUT", "aspectId": "workerNode_scale"})
    workers = lcm.vnfcs(inst_id, "workerNode")
    added = [
        a
        for a in lcm.completed_notification(out["id"])["affectedVnfcs"]
        if a["changeType"] == "ADDED"
    ]
    assert len(workers) == 3 and len(added) == 1
    new_id = added[0]["id"]
    assert {v["id"] for v in workers} == before | {new_id}
    # Tacker lists VNFCs newest first (the v2 Kubernetes script relies on that).
    assert workers[0]["id"] == new_id
    new_ip = vnfc_addresses(openstack_conn, workers)[new_id]
    assert new_ip in sim.control.state()["server_pool"]

    scale_in = lcm.op(inst_id, "scale", {"type": "SCALE_IN", "aspectId": "workerNode_scale"})
    removed = [
        a
        for a in lcm.completed_notification(scale_in["id"])["affectedVnfcs"]
        if a["changeType"] == "REMOVED"
    ]
    assert len(removed) == 1 and len(lcm.vnfcs(inst_id, "workerNode")) == 2
    gone = removed[0]["computeResource"]["resourceId"]
    assert gone == new_id  # Tacker removes the newest VNFC first (list order)
    assert openstack_conn.compute.find_server(gone, ignore_missing=True) is None
    assert gone not in _sim_port_ips(sim)
    lcm.terminate_and_delete(inst_id)


def test_heal_one_vnfc_replaces_its_server_and_keeps_its_address(
    lcm: LcmDriver, openstack_conn: Any
) -> None:
    inst_id, _ = lcm.instantiate("simple")
    info = lcm.tacker.show(inst_id)["instantiatedVnfInfo"]
    worker = next(v for v in info["vnfcResourceInfo"] if v["vduId"] == "workerNode")
    vnfc_info_id = next(
        i["id"] for i in info["vnfcInfo"] if i["vnfcResourceInfoId"] == worker["id"]
    )
    old_ip = vnfc_addresses(openstack_conn, [worker])[worker["id"]]
    others = {v["id"] for v in info["vnfcResourceInfo"]} - {worker["id"]}

    occ = lcm.op(inst_id, "heal", {"vnfcInstanceId": [vnfc_info_id]})
    changes = {
        (a["changeType"], a["id"]) for a in lcm.completed_notification(occ["id"])["affectedVnfcs"]
    }
    assert ("REMOVED", worker["id"]) in changes

    now = lcm.vnfcs(inst_id)
    healed = next(v for v in now if v["metadata"]["stack_id"] == worker["metadata"]["stack_id"])
    assert healed["id"] != worker["id"] and ("ADDED", healed["id"]) in changes
    assert vnfc_addresses(openstack_conn, [healed])[healed["id"]] == old_ip  # same port
    assert others <= {v["id"] for v in now}
    assert openstack_conn.compute.find_server(worker["id"], ignore_missing=True) is None
    lcm.terminate_and_delete(inst_id)


def test_heal_all_recreates_the_stack(lcm: LcmDriver, sim: SimProcess) -> None:
    inst_id, _ = lcm.instantiate("simple")
    before = lcm.tacker.show(inst_id)["instantiatedVnfInfo"]
    old_ids = {v["id"] for v in before["vnfcResourceInfo"]}

    lcm.op(inst_id, "heal", {"additionalParams": {"all": True}})

    after = lcm.tacker.show(inst_id)["instantiatedVnfInfo"]
    assert after["metadata"]["stack_id"] != before["metadata"]["stack_id"]
    new_ids = {v["id"] for v in after["vnfcResourceInfo"]}
    assert len(new_ids) == 3 and not new_ids & old_ids
    calls = [(c["method"], c["path"]) for c in sim.control.calls() if inst_id in c["path"]]
    assert (
        "DELETE",
        f"/heat-api/v1/{sim.config.project_id}/stacks/"
        f"vnf-{inst_id}/{before['metadata']['stack_id']}",
    ) in calls
    lcm.terminate_and_delete(inst_id)


def test_modify_info_adds_a_second_vim_entry_and_terminate_clears_it(lcm: LcmDriver) -> None:
    inst_id, _ = lcm.instantiate("simple")
    k8s = {
        "k8s": {
            "vimId": unique_name("k8s"),
            "vimType": "ETSINFV.KUBERNETES.V_1",
            "interfaceInfo": {"endpoint": "https://10.77.0.11:6443", "ssl_ca_cert": "PEM"},
            "accessInfo": {"bearer_token": "secret-token-for-test"},
        }
    }

    def patch() -> str | None:
        status, headers, _ = lcm.tacker.call(
            "PATCH",
            f"/vnflcm/v2/vnf_instances/{inst_id}",
            {"vimConnectionInfo": k8s},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert status in (202, 409), status  # 409: the lock of the last operation
        return headers["Location"].rsplit("/", 1)[1] if status == 202 else None

    occ_id = wait_for(patch, timeout=30, interval=0.5, what="PATCH accepted")
    assert lcm.tacker.wait_op(occ_id)["operationState"] == "COMPLETED"
    start = lcm.rec.wait(vnfLcmOpOccId=occ_id, operationState="PROCESSING")
    assert start["notificationStatus"] == "START" and start["operation"] == "MODIFY_INFO"
    done = lcm.completed_notification(occ_id)
    # FULL verbosity sends the new entry, secrets included (only GET strips them).
    assert done["changedInfo"]["vimConnectionInfo"]["k8s"]["accessInfo"] == k8s["k8s"]["accessInfo"]
    vims = lcm.tacker.show(inst_id)["vimConnectionInfo"]
    assert list(vims) == ["vim1", "k8s"]

    lcm.op(inst_id, "terminate", {"terminationType": "FORCEFUL"})
    assert lcm.tacker.show(inst_id).get("vimConnectionInfo") in ({}, None)
    lcm.tacker.delete(inst_id)


def test_injected_heat_failure_gives_failed_temp_and_the_store_records_it(
    lcm: LcmDriver, sim: SimProcess, serve: ServeProcess
) -> None:
    assert lcm.bed.vnfd_id
    inst_id = lcm.tacker.create(lcm.bed.vnfd_id, unique_name("k8s-fail"))
    reason = "Resource CREATE failed: ResourceInError: resources.masterNode: No valid host"
    with sim.control.fault(
        service="orchestration", method="POST", path=r"/stacks$", stack_failure=reason
    ):
        occ = lcm.tacker.run_op(
            inst_id,
            "instantiate",
            instantiate_request(sim.vim_connection_info(), k8s_params("simple"), NETWORK_ID),
        )
    assert occ["operationState"] == "FAILED_TEMP"
    assert "No valid host" in occ["error"]["detail"]
    failed = lcm.rec.wait(vnfLcmOpOccId=occ["id"], operationState="FAILED_TEMP")
    assert failed["notificationStatus"] == "RESULT" and "No valid host" in failed["error"]["detail"]

    def stored() -> list[dict[str, Any]]:
        return [
            e
            for e in serve.events()
            if e["vnfLcmOpOccId"] == occ["id"] and e["operationState"] == "FAILED_TEMP"
        ]

    assert (
        wait_for(stored, timeout=30, what="serve to store FAILED_TEMP")[0]["vnfInstanceId"]
        == inst_id
    )

    # Rollback deletes the failed stack; the instance is usable again.
    status, _, body = lcm.tacker.call("POST", f"/vnflcm/v2/vnf_lcm_op_occs/{occ['id']}/rollback")
    assert status == 202, body
    assert lcm.rec.wait(vnfLcmOpOccId=occ["id"], operationState="ROLLING_BACK")
    assert lcm.rec.wait(vnfLcmOpOccId=occ["id"], operationState="ROLLED_BACK")
    assert lcm.tacker.op_occ(occ["id"])["operationState"] == "ROLLED_BACK"
    assert not [s for s in sim.control.state()["stacks"] if inst_id in s["name"]]
    lcm.tacker.delete(inst_id)


def test_retry_after_failed_temp_is_a_new_attempt_that_runs(
    lcm: LcmDriver, sim: SimProcess, serve: ServeProcess
) -> None:
    """A retry re-enters PROCESSING under the same op-occ id: stored and run, not deduped."""
    assert lcm.bed.vnfd_id
    inst_id = lcm.tacker.create(lcm.bed.vnfd_id, unique_name("k8s-retry"))
    with sim.control.fault(
        service="orchestration",
        method="POST",
        path=r"/stacks$",
        stack_failure="Resource CREATE failed: ResourceInError: No valid host",
    ):
        occ = lcm.tacker.run_op(
            inst_id,
            "instantiate",
            instantiate_request(sim.vim_connection_info(), k8s_params("simple"), NETWORK_ID),
        )
    assert occ["operationState"] == "FAILED_TEMP"
    failed = lcm.rec.wait(vnfLcmOpOccId=occ["id"], operationState="FAILED_TEMP")
    # v2 stamps notifications in whole seconds; a retry within the second of
    # its FAILED_TEMP could not be told from a resent copy.
    wait_for(
        lambda: failed["timeStamp"] < _utc_now_text(), timeout=3, interval=0.05, what="a new second"
    )
    status, _, body = lcm.tacker.call("POST", f"/vnflcm/v2/vnf_lcm_op_occs/{occ['id']}/retry")
    assert status == 202, body
    # (The op-occ reads FAILED_TEMP until the conductor picks the retry up.)
    lcm.rec.wait(timeout=90, vnfLcmOpOccId=occ["id"], operationState="COMPLETED")
    assert lcm.tacker.op_occ(occ["id"])["operationState"] == "COMPLETED"
    sent = [b["operationState"] for b in lcm.rec.bodies(vnfLcmOpOccId=occ["id"])]
    assert sorted(sent) == ["COMPLETED", "FAILED_TEMP", "PROCESSING", "PROCESSING", "STARTING"]

    def settled() -> list[tuple[str, int, str]] | None:
        rows = sorted(
            (e["operationState"], e["attempt"], e["status"])
            for e in serve.events()
            if e["vnfLcmOpOccId"] == occ["id"]
        )
        return rows if len(rows) == 5 and all(r[2] == "done" for r in rows) else None

    assert wait_for(settled, timeout=30, what="serve to run all five transitions") == [
        ("COMPLETED", 1, "done"),
        ("FAILED_TEMP", 0, "done"),
        ("PROCESSING", 0, "done"),
        ("PROCESSING", 1, "done"),
        ("STARTING", 0, "done"),
    ]
    lcm.terminate_and_delete(inst_id)


def _utc_now_text() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_heat_503_during_scale_out_gives_failed_temp_then_rollback(
    lcm: LcmDriver, sim: SimProcess
) -> None:
    inst_id, _ = lcm.instantiate("simple")
    before = {v["id"] for v in lcm.vnfcs(inst_id, "workerNode")}
    # Heat answers the stack update (PATCH stacks/{name}/{id}) with 503, once.
    with sim.control.fault(
        service="orchestration",
        method="PATCH",
        path=r"/stacks/vnf-[^/]+/[^/]+$",
        status=503,
        times=1,
    ):
        occ = lcm.tacker.run_op(
            inst_id, "scale", {"type": "SCALE_OUT", "aspectId": "workerNode_scale"}
        )
    assert occ["operationState"] == "FAILED_TEMP", occ
    lcm.rec.wait(vnfLcmOpOccId=occ["id"], operationState="FAILED_TEMP")

    status, _, body = lcm.tacker.call("POST", f"/vnflcm/v2/vnf_lcm_op_occs/{occ['id']}/rollback")
    assert status == 202, body
    lcm.rec.wait(vnfLcmOpOccId=occ["id"], operationState="ROLLED_BACK")
    assert {v["id"] for v in lcm.vnfcs(inst_id, "workerNode")} == before
    lcm.terminate_and_delete(inst_id)


def _key(n: dict[str, Any]) -> tuple[str | None, ...]:
    if n.get("vnfLcmOpOccId"):
        return (n["vnfLcmOpOccId"], n["operationState"], n["notificationStatus"])
    return (n["notificationType"], n["vnfInstanceId"])


def test_zz_simulator_answered_every_call_tacker_made(sim: SimProcess) -> None:
    """Runs late: over the session, no call to the simulator failed unless a test injected
    the fault or the 404 is the expected one (stack existence checks before a create and
    while waiting for a delete; a deleted server looked up by a test)."""
    calls = sim.control.calls()
    expected_404 = (r"/stacks/vnf-[0-9a-f-]{36}$", r"/compute/v2\.1/servers/[0-9a-f-]{36}$")

    def unexpected(c: dict[str, Any]) -> bool:
        if c["injected"] or c["status"] < 400:
            return False
        return not (
            c["status"] == 404
            and c["method"] == "GET"
            and any(re.search(p, c["path"]) for p in expected_404)
        )

    assert [c for c in calls if unexpected(c)] == []
    assert {c["service"] for c in calls} >= {"identity", "orchestration", "image"}


def test_zz_serve_stored_every_notification_tacker_sent(
    lcm: LcmDriver, tacker: TackerClient, recorder: CallbackRecorder, serve: ServeProcess
) -> None:
    """Runs last (file order): everything the session's operations made Tacker send,
    including one lifecycle of its own (so it means something when run alone)."""
    inst_id, _ = lcm.instantiate("simple")
    lcm.terminate_and_delete(inst_id)
    recorder.wait(notificationType="VnfIdentifierDeletionNotification", vnfInstanceId=inst_id)
    # The bed is the run's: only what began after serve subscribed was sent to it too.
    later = [r["body"] for r in recorder.received[serve.recorded_before :]]
    began = {b["vnfLcmOpOccId"] for b in later if b.get("operationState") == "STARTING"}
    created = {
        b["vnfInstanceId"]
        for b in later
        if b["notificationType"] == "VnfIdentifierCreationNotification"
    }
    occs = [o for o in tacker.op_occs() if o["id"] in began]
    assert {o["vnfInstanceId"] for o in occs} >= {inst_id}
    # Tacker sends from a thread per notification: wait until the final one of every
    # op-occ has reached the recorder before taking the reference set.
    for occ in occs:
        assert occ["operationState"] in ("COMPLETED", "FAILED", "ROLLED_BACK"), occ
        recorder.wait(vnfLcmOpOccId=occ["id"], operationState=occ["operationState"])
    sent = {
        _key(b)
        for r in recorder.received[serve.recorded_before :]
        if (b := r["body"]).get("vnfLcmOpOccId") in began
        or (not b.get("vnfLcmOpOccId") and b["vnfInstanceId"] in created)
    }

    def stored_all() -> set[tuple[str | None, ...]] | None:
        keys = {_key(e) for e in serve.events()}
        return keys if sent <= keys else None

    stored = wait_for(stored_all, timeout=60, interval=0.5, what="serve to store all")
    # ... and nothing Tacker did not send (the recorder subscribed before serve did).
    assert stored <= {_key(r["body"]) for r in recorder.received}
    # And every op-occ Tacker lists ended in the store in the state Tacker reports.
    for occ in occs:
        assert (occ["id"], occ["operationState"], "RESULT") in stored, occ["id"]
