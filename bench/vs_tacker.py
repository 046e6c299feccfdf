"""Tacker's own v2 Kubernetes management-driver script against ``serve``, on the same hosts.

One after the other, never at once (2 cores), on the same fresh real-mode hosts
(``tests/testbed/testhosts.py``: real kubeadm 1.20.2, API server, etcd; the kubelet is
the stand-in) and the same real Tacker 16.0.0 and simulated OpenStack:

* **Tacker**: a copy of our cluster package whose management driver is Tacker's sample
  script ``kubernetes_mgmt_v2.py``, unchanged, with our install script as its
  ``script_path`` script (``tests/testbed/tacker_driver.py`` says what the hosts are
  given for it). That script collects the cluster's access data and then discards it, so
  its end is the op-occ COMPLETED with every node Ready.
* **ours**: our cluster package as it is; ``serve`` (a subprocess subscribed to Tacker)
  builds the cluster from the notifications and writes ``vimConnectionInfo`` back. Its
  end is every node Ready *and* that entry stored in Tacker.

Each is timed from the request's 202 to its end. Cases (``--cases``, default both):
INSTANTIATE simple (1 master + 2 workers) and INSTANTIATE complex (3 masters behind the
VIP + 2 workers). Still to come (issue 28): SCALE_OUT by 3 workers, the fidelity diff.
The last line is ``ratio=<Tacker's total / ours>`` over the cases run.

Needs root, the real-mode tools and the Tacker bed (``scripts/setup.d/10-sshd.sh``,
``20-tacker.sh``, ``21-tacker-sdist.sh``, ``40-k8s.sh``). Takes a few minutes:
``.venv/bin/python bench/vs_tacker.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python bench/vs_tacker.py` from a checkout
    sys.path.insert(0, str(ROOT))

from benchlib import machine  # noqa: E402

from tests.cluster_fakes import k8s_params  # noqa: E402
from tests.k8s.full_loop import VIM_KEY, serve_config, terminate_and_delete  # noqa: E402
from tests.k8s.helpers import nodes_ready  # noqa: E402
from tests.tacker.conftest import NETWORK_ID  # noqa: E402
from tests.tacker.helpers import ServeProcess  # noqa: E402
from tests.testbed import tacker_bed, tacker_driver, testhosts  # noqa: E402
from tests.testbed.openstack_sim.process import SimProcess  # noqa: E402
from tests.testbed.tacker_api import (  # noqa: E402
    TackerClient,
    ext_virtual_links,
    unique_name,
    wait_for,
)
from tests.testbed.testhosts import TestBed, TestHost  # noqa: E402

TIMEOUT = 900.0
NODES = ("get", "nodes", "-o", "json")


def ready_nodes(bed: TestBed, master: TestHost) -> dict[str, bool]:
    """Node name -> Ready, from the real API server (the master's admin kubeconfig)."""
    config = bed.private_dir(master, "/etc/kubernetes") / "admin.conf"
    if not config.exists():
        return {}
    out = subprocess.run(
        [str(testhosts.k8s_bin_dir() / "kubectl"), "--kubeconfig", str(config), *NODES],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")},
    )
    if out.returncode != 0:
        return {}
    return nodes_ready(json.loads(out.stdout))


def all_ready(bed: TestBed, master: TestHost, count: int) -> bool:
    nodes = ready_nodes(bed, master)
    return len(nodes) == count and all(nodes.values())


CASES = {"simple": (1, 2), "complex": (3, 2)}  # flavour -> (masters, workers)


def instantiate_body(flavour: str, sim: SimProcess, params: dict[str, Any]) -> dict[str, Any]:
    return {
        "flavourId": flavour,
        "vimConnectionInfo": sim.vim_connection_info(),
        "extVirtualLinks": ext_virtual_links(NETWORK_ID),
        "additionalParams": params,
    }


def timed(
    tacker: TackerClient, vnfd: str, name: str, body: dict[str, Any], end: Callable[[str], bool]
) -> tuple[str, float]:
    """Create an instance, INSTANTIATE it; seconds from the 202 until ``end(inst)``."""
    inst = tacker.create(vnfd, unique_name(name))
    occ = tacker.start_op(inst, "instantiate", body)
    t0 = time.monotonic()
    try:
        wait_for(lambda: end(inst) or None, timeout=TIMEOUT, interval=0.5, what=f"{name} done")
    except BaseException:
        print(f"{name}: op-occ {tacker.op_occ(occ).get('operationState')}", file=sys.stderr)
        terminate_and_delete(tacker, inst)
        raise
    return inst, time.monotonic() - t0


def split(flavour: str, hosts: TestBed) -> tuple[list[TestHost], list[TestHost]]:
    n_masters, n_workers = CASES[flavour]
    return hosts.hosts[:n_masters], hosts.hosts[n_masters : n_masters + n_workers]


def run_tacker(
    flavour: str, tacker: TackerClient, vnfd: str, sim: SimProcess, hosts: TestBed
) -> tuple[float, str]:
    masters, workers = split(flavour, hosts)
    master, count = masters[0], len(masters) + len(workers)
    with tacker_driver.prepared_hosts(hosts, masters, workers):
        state: dict[str, str] = {}

        def end(inst: str) -> bool:
            occ = [o for o in tacker.op_occs() if o["vnfInstanceId"] == inst]
            if not occ:
                return False
            state["op"] = occ[-1]["operationState"]
            if state["op"] in ("FAILED_TEMP", "FAILED", "ROLLED_BACK"):
                raise AssertionError(f"Tacker's script: {occ[-1].get('error')}")
            return state["op"] == "COMPLETED" and all_ready(hosts, master, count)

        params = tacker_driver.driver_params(hosts, ha=len(masters) > 1)
        body = instantiate_body(flavour, sim, params)
        inst, seconds = timed(tacker, vnfd, f"vs-tacker-driver-{flavour}", body, end)
        terminate_and_delete(tacker, inst)
    return seconds, "op-occ COMPLETED with every node Ready (the script keeps no access data)"


def run_ours(
    flavour: str,
    bed: tacker_bed.BedState,
    tacker: TackerClient,
    sim: SimProcess,
    hosts: TestBed,
    tmp: Path,
) -> tuple[float, str]:
    masters, workers = split(flavour, hosts)
    master, count = masters[0], len(masters) + len(workers)
    assert bed.vnfd_id is not None
    serve = ServeProcess(tmp, serve_config(bed, sim, hosts))
    serve.start(timeout=120.0)  # a loaded machine: other runs share the 2 cores
    try:
        tacker.wait_subscribed(serve.callback_url, timeout=60)

        def end(inst: str) -> bool:
            stored = tacker_bed.stored_vim_connection_info(bed, inst) or {}
            return VIM_KEY in stored and all_ready(hosts, master, count)

        params = k8s_params(
            master_user="root",
            worker_user=hosts.user or "root",
            key=str(hosts.client_key),
            password=hosts.password,
            ha=len(masters) > 1,
        )
        body = instantiate_body(flavour, sim, params)
        inst, seconds = timed(tacker, bed.vnfd_id, f"vs-tacker-serve-{flavour}", body, end)
        terminate_and_delete(tacker, inst)
    finally:
        serve.stop()
        tacker.unsubscribe_all(serve.callback_url)
    return seconds, "every node Ready and vimConnectionInfo stored in Tacker"


def fresh(hosts: TestBed) -> None:
    """The hosts as new VMs: no cluster, no files, their own names."""
    testhosts.reset_cluster(hosts)
    for host in hosts.hosts:
        subprocess.run(["nsenter", "-t", str(host.pid), "-u", "hostname", host.name], check=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default=",".join(CASES), help="flavours, comma-separated")
    cases = parser.parse_args().cases.split(",")
    unknown = set(cases) - set(CASES)
    if unknown:
        parser.error(f"unknown cases {sorted(unknown)}; known: {', '.join(CASES)}")
    print(machine())
    count = max(sum(CASES[c]) for c in cases)
    hosts = testhosts.create(count, password=True, kubernetes="real")
    sim = SimProcess(
        server_pool=",".join(h.address for h in hosts.hosts), vip_pool=hosts.unused_address
    )
    sim.start()
    bed = tacker_bed.start(owner_pid=os.getpid())
    try:
        tacker_bed.build_and_onboard(bed)
        driver_vnfd = tacker_driver.build_and_onboard_driver_package(bed)
        tacker = TackerClient(bed.url)
        t_tacker = t_ours = 0.0
        for case in cases:
            with tempfile.TemporaryDirectory(prefix="vs-tacker-") as tmp:
                fresh(hosts)
                seconds, what = run_tacker(case, tacker, driver_vnfd, sim, hosts)
                t_tacker += seconds
                print(f"INSTANTIATE {case}, Tacker's v2 script: {seconds:.1f} s ({what})")
                fresh(hosts)
                seconds, what = run_ours(case, bed, tacker, sim, hosts, Path(tmp))
                t_ours += seconds
                print(f"INSTANTIATE {case}, serve: {seconds:.1f} s ({what})", flush=True)
        fresh(hosts)
        print(f"total ({', '.join(cases)}): Tacker {t_tacker:.1f} s, ours {t_ours:.1f} s")
        print(f"ratio={t_tacker / t_ours:.2f}")
    finally:
        tacker_bed.stop(bed)
        sim.stop()
        testhosts.destroy(hosts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
