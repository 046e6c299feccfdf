"""Proxy and Helm end to end: the real Tacker 16.0.0 instantiates the sample package
(simple flavour) with ``proxy`` and ``helm_installation_script_path`` set; serve reads
``Scripts/install_helm.sh`` from the package Tacker holds (v1 package management by
vnfdId) and runs it on the master, and writes the proxy files on every node.

The same set-up as ``test_cluster_e2e`` (its ``service`` fixture and helpers): only
OpenStack (the simulator) and kubeadm/kubectl (the stand-ins) are not real.
"""

from __future__ import annotations

import asyncio
import hashlib
import stat
import time
from pathlib import Path
from typing import Any

import pytest

from handlers.toolkit import helm, proxy
from subscriber.service import Service
from subscriber.store import StepStatus
from tests import REPO
from tests.cluster_fakes import host_params
from tests.e2e.test_cluster_e2e import handled, octet, remove_instance, service, steps_of
from tests.testbed import tacker_bed as tb
from tests.testbed.openstack_sim.process import SimProcess
from tests.testbed.tacker_api import NETWORK_ID, instantiate_request, unique_name
from tests.testbed.tacker_api import TackerClient as SyncTacker

__all__ = ["service"]  # the fixture, shared with test_cluster_e2e

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.tacker,
    pytest.mark.ssh,
    pytest.mark.timeout(600),
    pytest.mark.usefixtures("fresh_cluster"),
]

PASSWORD = "e2e-Pr0xy-pw"
HTTP = f"http://lccn:{PASSWORD}@proxy.invalid:3128"
HELM_PATH = "Scripts/install_helm.sh"
SAMPLE_HELM = (REPO / "scripts/vnf_package/kubernetes_cluster" / HELM_PATH).read_bytes()


def fs(hosts: Any, address: str, target: str) -> Path:
    host = next(h for h in hosts.hosts if h.address == address)
    return Path(hosts.root) / "hosts" / host.name / "fs" / target.strip("/").replace("/", "-")


async def test_proxy_and_helm_through_the_real_tacker(
    bed: tb.BedState,
    tacker: SyncTacker,
    host_sim: SimProcess,
    hosts: Any,
    service: Service,
    tmp_path: Path,
) -> None:
    master = hosts.hosts[0].address
    workers = [h.address for h in hosts.hosts[1:3]]
    assert bed.vnfd_id
    svc = service
    t0 = time.monotonic()
    inst = await asyncio.to_thread(tacker.create, bed.vnfd_id, unique_name("e2e-proxy-helm"))
    instantiated = False
    try:
        params = host_params(hosts)
        params["k8s_cluster_installation_param"].update(
            proxy={"http_proxy": HTTP, "https_proxy": HTTP, "k8s_node_cidr": "10.77.0.0/24"},
            helm_installation_script_path=HELM_PATH,
        )
        occ = await asyncio.to_thread(
            tacker.run_op,
            inst,
            "instantiate",
            instantiate_request(host_sim.vim_connection_info(), params, NETWORK_ID),
        )
        instantiated = occ["operationState"] == "COMPLETED"
        assert instantiated, occ.get("error")
        event = await handled(svc, inst, occ["id"])
        elapsed = time.monotonic() - t0
        _, steps = await steps_of(svc, event)
        assert steps["configure-proxy"] == StepStatus.DONE
        assert steps["install-helm"] == StepStatus.DONE
        assert steps["write-back"] == StepStatus.DONE

        # The package's own script ran on the master (read from Tacker, byte for byte).
        digest = hashlib.sha256(SAMPLE_HELM).hexdigest()
        marker = fs(hosts, master, "/var/lib/lccn-subscriber") / Path(helm.MARKER).name
        assert marker.read_text().strip() == digest
        for worker in workers:
            assert not (fs(hosts, worker, "/var/lib/lccn-subscriber") / "helm-installed").exists()

        # Every node: apt and containerd proxy files, root only, the /24 in no_proxy.
        for address in [master, *workers]:
            apt = fs(hosts, address, "/etc/apt/apt.conf.d") / Path(proxy.APT_CONF).name
            dropin = (
                fs(hosts, address, "/etc/systemd/system")
                / "containerd.service.d"
                / "http-proxy.conf"
            )
            assert f'Acquire::https::Proxy "{HTTP}";' in apt.read_text()
            text = dropin.read_text()
            assert f'Environment="HTTPS_PROXY={HTTP}"' in text
            no_proxy = next(x for x in text.splitlines() if "NO_PROXY=" in x)
            assert "10.77.0.0/24" in no_proxy and f",{master}," in no_proxy
            assert stat.S_IMODE(dropin.stat().st_mode) == 0o600
            assert stat.S_IMODE(apt.stat().st_mode) == 0o600
        # kubeadm (init and the joins) ran with the proxy in its environment.
        kubeadm = [
            c
            for c in hosts.calls()
            if c["tool"] == "kubeadm" and c["argv"][:1] in (["init"], ["join"]) and c["rc"] == 0
        ]
        assert {c["host"] for c in kubeadm} >= {f"master{octet(master)}"}
        assert all(c.get("proxy") for c in kubeadm)
    finally:
        await remove_instance(tacker, inst, instantiated=instantiated)
    db = b"".join(p.read_bytes() for p in tmp_path.glob("lccn.db*"))
    assert PASSWORD.encode() not in db and hosts.password.encode() not in db
    print(f"proxy + helm through the real Tacker: cluster in {elapsed:.1f} s")
