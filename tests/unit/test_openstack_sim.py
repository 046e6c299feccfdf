"""The simulated OpenStack on its own (fast): Keystone, the Heat engine, faults, openstacksdk.

The ``tacker`` tier proves that the real Tacker completes every operation against it;
these pin the behaviour that tier relies on, without Tacker.
"""

from __future__ import annotations

import asyncio
import time

from openstack import connection

from tests.unit.sim_cloud import GROUP_HOT, WORKER_HOT, Cloud


async def test_keystone_refuses_a_wrong_password_and_calls_without_a_token(cloud: Cloud) -> None:
    good = cloud.token
    resp = await cloud.login(password="not-it")
    assert resp.status == 401 and not cloud.token
    await cloud.req("GET", f"{cloud.heat}/stacks", status=401)
    cloud.token = good
    resp = await cloud.login()
    catalog = (await resp.json())["token"]["catalog"]
    assert {s["type"] for s in catalog} == {
        "identity",
        "orchestration",
        "image",
        "compute",
        "key-manager",
    }
    assert all(e["url"].startswith(cloud.sim.url) for s in catalog for e in s["endpoints"])


async def test_group_grows_shrinks_unhealthy_first_and_heals_in_place(cloud: Cloud) -> None:
    ident = await cloud.create("vnf-grow", workers=2)
    reses = await cloud.resources(ident)
    assert [r["resource_name"] for r in reses[:2]] == ["vip", "workers"]  # top stack first
    first = await cloud.servers(ident)
    assert sorted(s["ip"] for s in first.values()) == ["10.77.0.11", "10.77.0.12"]
    vip = await cloud.req("GET", f"{cloud.heat}/stacks/{ident}/resources/vip")
    assert vip["resource"]["attributes"]["fixed_ips"][0]["ip_address"] == "10.77.0.200"

    # Grow to 3: the new member gets the next free address.
    patch = {
        "parameters": {
            "nfv": {
                "VDU": {"worker": {"desired_capacity": 3}},
                "CP": {"worker_CP": {"network": "net0"}},
            }
        }
    }
    await cloud.req("PATCH", f"{cloud.heat}/stacks/{ident}", patch, 202)
    grown = await cloud.servers(ident)
    assert set(first) < set(grown) and len(grown) == 3

    # Shrink to 2 after marking one member (in the group stack) unhealthy: that one goes.
    victim = sorted(first)[1]
    group = next(r for r in reses if r["resource_name"] == "workers")
    group_ident = "/".join(
        next(li["href"] for li in group["links"] if li["rel"] == "nested").split("/")[-2:]
    )
    await cloud.req(
        "PATCH",
        f"{cloud.heat}/stacks/{group_ident}/resources/{victim}",
        {"mark_unhealthy": True, "resource_status_reason": "test"},
    )
    patch["parameters"]["nfv"]["VDU"]["worker"]["desired_capacity"] = 2
    await cloud.req("PATCH", f"{cloud.heat}/stacks/{ident}", patch, 202)
    shrunk = await cloud.servers(ident)
    assert victim not in shrunk and len(shrunk) == 2
    assert first[victim]["ip"] not in {
        p["fixed_ips"][0]["ip_address"] for p in cloud.sim.engine.ports.values()
    }

    # Heal one: mark the server (in its member stack) unhealthy and update the top stack:
    # a new server on the same port.
    keep = next(iter(shrunk))
    await cloud.req(
        "PATCH",
        f"{cloud.heat}/stacks/{shrunk[keep]['stack']}/resources/worker",
        {"mark_unhealthy": True},
    )
    await cloud.req("PATCH", f"{cloud.heat}/stacks/{ident}", {}, 202)
    healed = await cloud.servers(ident)
    assert healed[keep]["id"] != shrunk[keep]["id"] and healed[keep]["ip"] == shrunk[keep]["ip"]
    assert shrunk[keep]["id"] not in cloud.sim.engine.servers


async def test_exhausted_pool_fails_the_stack_and_delete_frees_it(cloud: Cloud) -> None:
    ident = await cloud.create("vnf-big", workers=4)  # pool has 4 server addresses
    ok = await cloud.req("GET", f"{cloud.heat}/stacks/{ident}")
    assert ok["stack"]["stack_status"] == "CREATE_COMPLETE"
    ident2 = await cloud.create("vnf-more", workers=1)
    failed = await cloud.req("GET", f"{cloud.heat}/stacks/{ident2}")
    assert failed["stack"]["stack_status"] == "CREATE_FAILED"
    assert "exhausted" in failed["stack"]["stack_status_reason"]
    await cloud.req("DELETE", f"{cloud.heat}/stacks/{ident}", status=204)
    await cloud.req("GET", f"{cloud.heat}/stacks/{ident.split('/')[0]}", status=404)
    gone = await cloud.req("GET", f"{cloud.heat}/stacks/{ident}")  # by id: DELETE_COMPLETE
    assert gone["stack"]["stack_status"] == "DELETE_COMPLETE"
    assert not cloud.sim.engine.ports or all(
        p["pool"] != "servers" for p in cloud.sim.engine.ports.values()
    )


async def test_faults_answer_status_delay_and_stack_failure_then_clear(cloud: Cloud) -> None:
    ctl = f"{cloud.sim.url}/_sim/faults"
    await cloud.req(
        "POST",
        ctl,
        {
            "service": "orchestration",
            "method": "GET",
            "path": "/stacks$",
            "status": 503,
            "times": 1,
        },
        201,
    )
    await cloud.req("GET", f"{cloud.heat}/stacks", status=503)
    await cloud.req("GET", f"{cloud.heat}/stacks")  # times=1: used up
    await cloud.req("POST", ctl, {"service": "compute", "status": None, "delay": 0.3}, 201)
    t0 = time.monotonic()
    await cloud.req("GET", f"{cloud.sim.url}/compute/v2.1/os-availability-zone/detail")
    assert time.monotonic() - t0 >= 0.3
    await cloud.req(
        "POST",
        ctl,
        {"method": "POST", "path": "/stacks$", "stack_failure": "No valid host was found"},
        201,
    )
    ident = await cloud.create("vnf-doomed", workers=1)
    body = await cloud.req("GET", f"{cloud.heat}/stacks/{ident}")
    assert body["stack"]["stack_status"] == "CREATE_FAILED"
    assert body["stack"]["stack_status_reason"] == "No valid host was found"
    assert not cloud.sim.engine.servers
    await cloud.req("DELETE", ctl, status=204)
    assert await cloud.req("GET", ctl) == []


async def test_openstacksdk_reads_ports_and_servers_unchanged(cloud: Cloud) -> None:
    ident = await cloud.create("vnf-sdk", workers=2)
    expected = await cloud.servers(ident)

    def read() -> dict[str, tuple[str, str]]:
        conn = connection.Connection(**cloud.sim.openstack_settings())
        try:
            stack = conn.orchestration.find_stack("vnf-sdk", ignore_missing=False)
            assert stack.status == "CREATE_COMPLETE"
            out = {}
            for s in expected.values():
                cp = conn.orchestration.get(f"/stacks/{s['stack']}/resources/worker_CP").json()
                server = conn.compute.get_server(s["id"])
                out[s["id"]] = (
                    cp["resource"]["attributes"]["fixed_ips"][0]["ip_address"],
                    server.compute_host,
                )
            return out
        finally:
            conn.close()

    got = await asyncio.to_thread(read)
    assert {k: v[0] for k, v in got.items()} == {s["id"]: s["ip"] for s in expected.values()}
    assert {v[1] for v in got.values()} <= set(cloud.sim.config.compute_hosts)


POLICY_HOT = (
    GROUP_HOT
    + """
  workers_scale_out:
    type: OS::Heat::ScalingPolicy
    properties:
      scaling_adjustment: 1
      auto_scaling_group_id: { get_resource: workers }
      adjustment_type: change_in_capacity
"""
)


async def test_what_tackers_v1_asks_of_heat(cloud: Cloud) -> None:
    """v1 (heatclient): a stack by name or id is a 302 to name/id; the list filters by name
    and owner; a ScalingPolicy signal resizes its group, for good, and leaves an event
    newer than those before; a deleted stack stays visible by id as DELETE_COMPLETE."""
    nfv = {"VDU": {"worker": {"desired_capacity": 2}}, "CP": {"worker_CP": {"network": "n"}}}
    body = await cloud.req(
        "POST",
        f"{cloud.heat}/stacks",
        {
            "stack_name": "vnflcm_sim",
            "template": POLICY_HOT,
            "files": {"worker.yaml": WORKER_HOT},
            "parameters": {"nfv": nfv},
        },
        201,
    )
    sid = body["stack"]["id"]
    headers = {"X-Auth-Token": cloud.token}
    for ident in (sid, "vnflcm_sim"):
        async with cloud.http.get(
            f"{cloud.heat}/stacks/{ident}/resources?nested_depth=2",
            headers=headers,
            allow_redirects=False,
        ) as resp:
            assert resp.status == 302
            assert resp.headers["Location"] == (
                f"{cloud.heat}/stacks/vnflcm_sim/{sid}/resources?nested_depth=2"
            )
    listed = await cloud.req("GET", f"{cloud.heat}/stacks?name=vnflcm_sim")
    assert [s["id"] for s in listed["stacks"]] == [sid]
    assert (await cloud.req("GET", f"{cloud.heat}/stacks?name=other"))["stacks"] == []
    nested = await cloud.req("GET", f"{cloud.heat}/stacks?owner_id={sid}&show_nested=True")
    [group] = nested["stacks"]
    assert group["parent"] == sid

    ident = f"vnflcm_sim/{sid}"
    events = f"{cloud.heat}/stacks/{ident}/resources/workers_scale_out/events"
    [before] = (await cloud.req("GET", f"{events}?limit=1&sort_dir=desc"))["events"]
    assert (await cloud.req("GET", f"{cloud.heat}/stacks/{ident}/resources/workers/metadata")) == {
        "metadata": {}
    }
    await cloud.req("POST", f"{cloud.heat}/stacks/{ident}/resources/workers_scale_out/signal")
    assert len(await cloud.servers(ident)) == 3
    [after] = (await cloud.req("GET", f"{events}?limit=1&sort_dir=desc"))["events"]
    assert after["id"] != before["id"] and after["resource_status"] == "SIGNAL_COMPLETE"
    # A stack update that leaves the template's capacity as it was keeps the signalled size.
    await cloud.req("PATCH", f"{cloud.heat}/stacks/{ident}", {"parameters": {"nfv": nfv}}, 202)
    assert len(await cloud.servers(ident)) == 3

    await cloud.req("DELETE", f"{cloud.heat}/stacks/{ident}", status=204)
    shown = await cloud.req("GET", f"{cloud.heat}/stacks/{sid}")  # follows the 302
    assert shown["stack"]["stack_status"] == "DELETE_COMPLETE"
    await cloud.req("GET", f"{cloud.heat}/stacks/vnflcm_sim", status=404)
