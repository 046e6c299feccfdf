"""Issue 7 end to end: the real Tacker 16.0.0 instantiates the sample package on the
simulated OpenStack, whose VNFC ports carry the real sshd test hosts' addresses;
``lccn-subscriber`` (an in-process Service with its real Tacker client, noauth, its
OpenStack lookups against the simulator's Keystone and its SSH pool) hears Tacker's
notifications through its own subscription, builds the stand-in cluster on the hosts
over SSH and PATCHes ``vimConnectionInfo`` back; TERMINATE then forgets it all.

Nothing here is a fake except OpenStack (the simulator) and kubeadm/kubectl (the
stand-ins on the hosts). Tacker's synchronous helpers run in threads so the service's
loop keeps answering Tacker's callbacks.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from subscriber.config import (
    ClusterSettings,
    DatabaseSettings,
    DispatchSettings,
    HttpSettings,
    OpenStackSettings,
    Settings,
    SshSettings,
    TackerSettings,
)
from subscriber.service import Service
from subscriber.store import EventRow, StepStatus
from subscriber.tacker import TackerClient
from tests.cluster_fakes import host_params
from tests.conftest import free_port, wait_until
from tests.testbed import tacker_bed as tb
from tests.testbed.openstack_sim.process import SimProcess
from tests.testbed.tacker_api import (
    NETWORK_ID,
    CallbackRecorder,
    instantiate_request,
    unique_name,
)
from tests.testbed.tacker_api import TackerClient as SyncTacker

pytestmark = [
    pytest.mark.tacker,
    pytest.mark.ssh,
    pytest.mark.timeout(600),
    pytest.mark.usefixtures("fresh_cluster"),
]

K8S_VIM_TYPE = "ETSINFV.KUBERNETES.V_1"
# As the ssh tier: no package installs, no CNI on the stand-in hosts.
CLUSTER = ClusterSettings(
    handlers="on",
    script_env={"K8S_SKIP_PHASES": "packages,cni"},
    token_wait_timeout=10.0,
    install_timeout=120.0,
)
TOKEN_SECRET = "Secret/default/default-token-k8svim"


def service_settings(db_url: str, bed: tb.BedState, sim: SimProcess, hosts: Any) -> Settings:
    return Settings(
        http=HttpSettings(host="127.0.0.1", port=free_port()),
        database=DatabaseSettings(url=db_url),
        dispatch=DispatchSettings(rescan_interval=0.5, backoff_initial=0.5, max_attempts=3),
        tacker=TackerSettings(
            endpoint=bed.url,
            noauth_user_id=tb.USER_ID,
            noauth_project_id=tb.PROJECT_ID,
            retry_attempts=20,
            retry_initial=0.1,
            retry_max=1.0,
            op_poll_interval=0.2,
            subscribe_on_start=True,
        ),
        openstack=OpenStackSettings(**sim.openstack_settings()),
        ssh=SshSettings(
            known_hosts=hosts.known_hosts,
            client_keys=(hosts.client_key,),
            key_dir=hosts.client_key.parent,  # the parameters name the bed's key
            connect_timeout=5.0,
            command_timeout=60.0,
        ),
        cluster=CLUSTER,
    )


@pytest.fixture
async def service(
    bed: tb.BedState, host_sim: SimProcess, hosts: Any, tmp_path: Path
) -> AsyncIterator[Service]:
    """serve, subscribed to Tacker; at teardown stopped and its subscription deleted."""
    settings = service_settings(f"sqlite+aiosqlite:///{tmp_path / 'lccn.db'}", bed, host_sim, hosts)
    svc = Service(settings)
    await svc.start()
    try:
        assert svc.subscriptions is not None
        await asyncio.wait_for(svc.subscriptions.subscribed.wait(), 30)
        yield svc
    finally:
        sub = svc.subscriptions.subscription_id if svc.subscriptions else None
        await svc.stop()
        if sub:
            async with TackerClient(settings.tacker) as client:
                await client.delete_subscription(sub)


async def remove_instance(tacker: SyncTacker, inst: str, *, instantiated: bool) -> None:
    """Terminate (if ``instantiated``) and delete ``inst``: best effort, for a ``finally``,
    so that an earlier failure stays the one reported."""
    with contextlib.suppress(AssertionError):
        if instantiated:
            await asyncio.to_thread(
                tacker.run_op, inst, "terminate", {"terminationType": "FORCEFUL"}
            )
        await asyncio.to_thread(tacker.delete, inst)


async def handled(svc: Service, inst: str, occ: str, *, timeout: float = 240.0) -> EventRow:
    """The op-occ's COMPLETED event once its job is done (fails at once if it failed)."""

    async def done() -> EventRow | None:
        for e in await svc.store.events.list(vnf_instance_id=inst):
            if e.vnf_lcm_op_occ_id == occ and e.operation_state == "COMPLETED":
                if e.status == "failed":
                    [job] = await svc.store.jobs.for_event(e.id)
                    raise AssertionError(f"job failed: {job.error_class}: {job.last_error}")
                return e if e.status == "done" else None
        return None

    return await wait_until(done, timeout=timeout, what=f"the COMPLETED job of {occ}")  # type: ignore[no-any-return]


async def steps_of(svc: Service, event: EventRow) -> tuple[str, dict[str, str]]:
    """(handler, {step: status}) of the event's one job."""
    [job] = await svc.store.jobs.for_event(event.id)
    return job.handler, {s.name: s.status for s in await svc.store.jobs.steps(job.id)}


def octet(address: str) -> str:
    return address.rsplit(".", 1)[1]


@pytest.mark.parametrize("flavour", ["simple", "complex"])
async def test_instantiate_builds_the_cluster_and_terminate_forgets_it(
    flavour: str,
    bed: tb.BedState,
    tacker: SyncTacker,
    host_sim: SimProcess,
    hosts: Any,
    recorder: CallbackRecorder,
    service: Service,
    tmp_path: Path,
) -> None:
    ha = flavour == "complex"
    n_masters = 3 if ha else 1
    # The simulator hands the hosts' addresses out in order, masters first.
    masters = [h.address for h in hosts.hosts[:n_masters]]
    workers = [h.address for h in hosts.hosts[n_masters : n_masters + 2]]
    endpoint = f"https://{hosts.unused_address}:16443" if ha else f"https://{masters[0]}:6443"
    assert bed.vnfd_id
    svc = service
    t0 = time.monotonic()
    inst = await asyncio.to_thread(tacker.create, bed.vnfd_id, unique_name(f"e2e-{flavour}"))
    instantiated = False
    try:
        # Masters log in as root with a key, workers as a sudo user with a password.
        params = host_params(hosts, ha=ha)
        occ = await asyncio.to_thread(
            tacker.run_op,
            inst,
            "instantiate",
            instantiate_request(
                host_sim.vim_connection_info(), params, NETWORK_ID, flavour=flavour
            ),
        )
        instantiated = occ["operationState"] == "COMPLETED"
        assert instantiated, occ.get("error")

        # 1. serve's INSTANTIATE handler built the cluster on the hosts.
        handler, steps = await steps_of(svc, await handled(svc, inst, occ["id"]))
        t_cluster = time.monotonic() - t0
        assert handler == "cluster-instantiate"
        assert steps["write-back"] == StepStatus.DONE
        assert steps[f"init-master-master{octet(masters[0])}"] == StepStatus.DONE
        state = hosts.state()
        nodes = state["nodes"]
        expected = {f"master{octet(a)}": ["control-plane"] for a in masters}
        expected |= {f"worker{octet(a)}": [] for a in workers}
        assert {n: v["roles"] for n, v in nodes.items()} == expected
        assert all(v["ready"] for v in nodes.values()), nodes
        inventory = await svc.store.inventory.nodes(inst)
        assert sorted(n.nic_ip for n in inventory) == sorted(masters + workers)

        # ... and wrote our entry back into the instance (GET strips the token).
        shown = await asyncio.to_thread(tacker.show, inst)
        vci = shown["vimConnectionInfo"]
        assert "vim1" in vci  # the instance's own VIM is untouched
        entry = vci["k8s"]
        assert entry["vimType"] == K8S_VIM_TYPE
        assert entry["interfaceInfo"]["endpoint"] == endpoint
        assert entry["interfaceInfo"]["ssl_ca_cert"] == state["cluster"]["ca_crt"]
        assert "bearer_token" not in str(entry)
        # Tacker did take the token: its MODIFY_INFO result carries it (our store does not).
        token = base64.b64decode(state["objects"][TOKEN_SECRET]["data"]["token"]).decode()
        # Ours, in order: the write-back's MODIFY_INFO, then the lccn status entry's.
        modify_occ = (await svc.store.tacker.own_op_occs(inst))[0]
        sent = await asyncio.to_thread(
            recorder.wait, vnfLcmOpOccId=modify_occ, operationState="COMPLETED"
        )
        k8s = sent["changedInfo"]["vimConnectionInfo"]["k8s"]
        assert k8s["accessInfo"]["bearer_token"] == token
        assert k8s["interfaceInfo"]["endpoint"] == endpoint

        # Our PATCHes made MODIFY_INFOs (the write-back, then the job's status in the
        # instance's metadata); their notifications are all stored as our echo.
        async def echo() -> bool:
            own = await svc.store.tacker.own_op_occs(inst)
            events = [
                e
                for e in await svc.store.events.list(vnf_instance_id=inst)
                if e.vnf_lcm_op_occ_id in own
            ]
            seen = {(e.vnf_lcm_op_occ_id, e.operation_state, e.status) for e in events}
            return len(own) == 2 and seen == {
                (occ, state, "echo") for occ in own for state in ("PROCESSING", "COMPLETED")
            }

        await wait_until(echo, timeout=60, what="the MODIFY_INFO echo")

        # 2. TERMINATE: Tacker clears vimConnectionInfo, serve forgets the inventory.
        term = await asyncio.to_thread(
            tacker.run_op, inst, "terminate", {"terminationType": "FORCEFUL"}
        )
        instantiated = False
        assert term["operationState"] == "COMPLETED", term.get("error")
        handler, steps = await steps_of(svc, await handled(svc, inst, term["id"], timeout=60))
        assert handler == "cluster-terminate"
        assert steps["forget-inventory"] == StepStatus.DONE
        assert await svc.store.inventory.nodes(inst) == []
        shown = await asyncio.to_thread(tacker.show, inst)
        assert shown["instantiationState"] == "NOT_INSTANTIATED"
        assert shown.get("vimConnectionInfo") == {}
    finally:
        # Best effort, never hiding the failure: give the hosts' addresses back to the
        # simulator's pool (the next flavour needs them) and remove the instance.
        await remove_instance(tacker, inst, instantiated=instantiated)

    # Every event came through serve's own subscription; no secret is stored in clear.
    assert {e.source for e in await svc.store.events.list(vnf_instance_id=inst)} == {"http"}
    db = b"".join(p.read_bytes() for p in tmp_path.glob("lccn.db*"))
    assert token.encode() not in db and hosts.password.encode() not in db
    print(f"{flavour}: cluster in {t_cluster:.1f} s, whole flow {time.monotonic() - t0:.1f} s")
