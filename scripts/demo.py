#!/usr/bin/env python3
"""Demo: the real Tacker 16.0.0 instantiates our Kubernetes-cluster VNF on a simulated
OpenStack, and ``lccn-subscriber serve`` receives and stores every notification.

    bash scripts/setup.d/20-tacker.sh        # once: installs Tacker (cached)
    .venv/bin/python scripts/demo.py [--flavour simple|complex] [--keep]

It starts the simulated OpenStack, Tacker (conductor + API, fresh database, sample
package onboarded) and ``lccn-subscriber serve`` (SQLite store in a temp dir), all on
free loopback ports; subscribes serve's callback
(``POST /vnflcm/v2/subscriptions``, callbackUri ``http://127.0.0.1:PORT/lccn/notifications``);
creates a VNF instance and runs INSTANTIATE, printing each notification as serve stores
it and then each VNFC's address as Heat reports it. ``--keep`` leaves everything running
until Ctrl-C (URLs printed), otherwise it stops everything and drops the database.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from openstack import connection  # noqa: E402

from tests.openstack_sim.process import SimProcess  # noqa: E402
from tests.tacker.helpers import (  # noqa: E402
    ServeProcess,
    TackerClient,
    ext_virtual_links,
    k8s_params,
    unique_name,
)
from tests.testbed import tacker_bed  # noqa: E402

NETWORK_ID = "8a5c7f0e-3b2d-4c1e-9f6a-0d1e2f3a4b5c"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--flavour", choices=("simple", "complex"), default="simple")
    p.add_argument("--keep", action="store_true", help="keep everything running until Ctrl-C")
    args = p.parse_args()

    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="lccn-demo-")))
        sim = SimProcess()
        sim.start()
        stack.callback(sim.stop)
        print(f"simulated OpenStack  {sim.auth_url}  (servers get {sim.config.server_pool})")

        t0 = time.monotonic()
        bed = tacker_bed.start(owner_pid=os.getpid())
        stack.callback(tacker_bed.stop, bed)
        vnfd_id = tacker_bed.build_and_onboard(bed)
        print(
            f"Tacker 16.0.0        {bed.url}  (ready in {bed.started_in} s, "
            f"package onboarded in {time.monotonic() - t0 - bed.started_in:.1f} s, "
            f"vnfdId {vnfd_id})"
        )

        serve = ServeProcess(tmp)
        serve.start()
        stack.callback(serve.stop)
        print(f"lccn-subscriber      {serve.callback_url}  (store {serve.db_url})")

        tacker = TackerClient(bed.url)
        sub_id = tacker.subscribe(serve.callback_url)
        print(f"subscribed           {sub_id} -> {serve.callback_url}\n")

        inst_id = tacker.create(vnfd_id, unique_name(f"demo-{args.flavour}"))
        print(f"VNF instance         {inst_id}")
        occ_id = tacker.start_op(
            inst_id,
            "instantiate",
            {
                "flavourId": args.flavour,
                "vimConnectionInfo": sim.vim_connection_info(),
                "extVirtualLinks": ext_virtual_links(NETWORK_ID),
                "additionalParams": k8s_params(args.flavour),
            },
        )
        print(f"INSTANTIATE          op-occ {occ_id}\n\nnotifications stored by serve:")

        seen: set[int] = set()
        deadline = time.monotonic() + 120
        final = None
        while time.monotonic() < deadline:
            for e in serve.events():
                if e["id"] not in seen:
                    seen.add(e["id"])
                    print(
                        f"  #{e['id']:<3} {e['notificationType']:<44} "
                        f"{e['operation'] or '-':<12} {e['operationState'] or '-':<11} "
                        f"{e['notificationStatus'] or '-':<7} -> {e['status']}"
                    )
                    if e["vnfLcmOpOccId"] == occ_id and e["operationState"] in (
                        "COMPLETED",
                        "FAILED_TEMP",
                        "ROLLED_BACK",
                    ):
                        final = e["operationState"]
            if final:
                break
            time.sleep(0.3)
        print(f"\nINSTANTIATE {final or 'did not finish in 120 s'}\n")

        if final == "COMPLETED":
            c = sim.config
            conn = connection.Connection(
                auth_url=sim.auth_url,
                username=c.username,
                password=c.password,
                project_name=c.project_name,
                user_domain_name=c.domain,
                project_domain_name=c.domain,
                region_name=c.region,
            )
            stack.callback(conn.close)
            cps = {"masterNode": "masterNode_CP1", "workerNode": "workerNode_CP2"}
            print("VNFCs (address from Heat via openstacksdk, host from Nova):")
            for v in tacker.show(inst_id)["instantiatedVnfInfo"]["vnfcResourceInfo"]:
                res = conn.orchestration.get(
                    f"/stacks/{v['metadata']['stack_id']}/resources/{cps[v['vduId']]}"
                ).json()["resource"]
                server = conn.compute.get_server(v["computeResource"]["resourceId"])
                print(
                    f"  {v['vduId']:<11} {v['id']}  "
                    f"{res['attributes']['fixed_ips'][0]['ip_address']:<12} "
                    f"{server.compute_host}"
                )

        if args.keep:
            print("\nrunning; Ctrl-C stops everything")
            with contextlib.suppress(KeyboardInterrupt):
                while True:
                    time.sleep(3600)
        print("\nstopping ...")
    return 0 if final == "COMPLETED" else 1


if __name__ == "__main__":
    sys.exit(main())
