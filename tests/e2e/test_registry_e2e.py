"""Private registries end to end: the real Tacker 16.0.0 instantiates the sample package's
simple flavour with ``private_registry_connection_info``; ``serve`` (a subprocess) reads
the registry's CA from the package Tacker holds and configures every node; the nodes'
own credentials are then accepted by a real registry.

The registry is Debian's ``docker-registry`` with htpasswd basic auth and TLS (a CA made
here), inside the network namespace of a test host (:mod:`tests.testbed.registry`). The
package is the sample one with that CA added as ``Files/registry/ca.crt``, onboarded
once for the module. Only OpenStack (the simulator) and kubeadm/kubectl (the stand-ins)
are not real.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster_fakes import host_params
from tests.e2e.day2 import Loop
from tests.e2e.test_day2_e2e import loop
from tests.ssh.test_registry import assert_node_configured, logins_from
from tests.testbed import registry as test_registry
from tests.testbed import tacker_bed as tb
from tests.testbed.tacker_api import NETWORK_ID, instantiate_request, unique_name

__all__ = ["loop"]  # the fixture, shared with test_day2_e2e

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600), pytest.mark.usefixtures("fresh_cluster")]

USER = "puller"
PASSWORD = "e2e-Registry-pw"
WRONG = "e2e-wrong-pw"
CA_PATH = "Files/registry/ca.crt"


@pytest.fixture(scope="module")
def e2e_registry(hosts: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    root = tmp_path_factory.mktemp("registry")
    with test_registry.serving(hosts.hosts[-1], root, username=USER, password=PASSWORD) as server:
        yield server


@pytest.fixture(scope="module")
def registry_vnfd(bed: tb.BedState, e2e_registry: Any) -> str:
    """The sample package plus the registry's CA, onboarded to the real Tacker: its vnfdId."""
    return tb.build_and_onboard(bed, extra={CA_PATH: e2e_registry.ca_pem})


def registry_entry(reg: Any, password: str) -> list[dict[str, Any]]:
    return [
        {
            "connection_type": "1",
            "server": reg.server,
            "username": USER,
            "password": password,
            "certificate_path": CA_PATH,
            "hosts_string": reg.hosts_string,
        }
    ]


def instantiate(lp: Loop, vnfd_id: str, entry: list[dict[str, Any]]) -> str:
    """Create and INSTANTIATE (simple flavour) through Tacker; returns the op-occ id."""
    lp.inst = lp.tacker.create(vnfd_id, unique_name("e2e-registry"))
    params = host_params(lp.hosts)
    params["k8s_cluster_installation_param"]["private_registry_connection_info"] = entry
    occ = lp.tacker.run_op(
        lp.inst,
        "instantiate",
        instantiate_request(lp.sim.vim_connection_info(), params, NETWORK_ID),
    )
    assert occ["operationState"] == "COMPLETED", occ.get("error")
    lp.instantiated = True
    return str(occ["id"])


def serve_db(lp: Loop) -> bytes:
    return b"".join(p.read_bytes() for p in Path(lp.serve.tmp).glob("lccn.db*"))


def test_registry_credentials_accepted_from_every_node_then_scale_out(
    hosts: Any, loop: Loop, e2e_registry: Any, registry_vnfd: str
) -> None:
    reg = e2e_registry
    t0 = time.monotonic()
    shown = loop.handled(instantiate(loop, registry_vnfd, registry_entry(reg, PASSWORD)))
    elapsed = time.monotonic() - t0
    steps = Loop.steps(shown)
    assert steps["configure-registry"]["status"] == "done"
    members = loop.members()
    result = steps["configure-registry"]["result"]
    assert sorted(result["nodes"]) == sorted(members)
    assert all(n["verified"] == {reg.server: "accepted"} for n in result["nodes"].values())
    for member in members.values():
        assert logins_from(reg, member.address) >= 1  # the step's own check reached it
        assert_node_configured(hosts, loop.host(member.address), reg)

    # SCALE_OUT: the new worker is configured and its credentials accepted too.
    out = loop.scale("SCALE_OUT")
    scaled = Loop.steps(loop.handled(out["id"]))
    [new] = set(loop.members()) - set(members)
    assert list(scaled["configure-registry"]["result"]["nodes"]) == [new]
    assert_node_configured(hosts, loop.host(loop.members()[new].address), reg)
    data = serve_db(loop)
    assert PASSWORD.encode() not in data
    print(f"registry through the real Tacker: cluster with its registry in {elapsed:.1f} s")


def test_registry_wrong_password_fails_clearly_and_replays_once_the_account_is_fixed(
    hosts: Any, loop: Loop, e2e_registry: Any, registry_vnfd: str
) -> None:
    reg = e2e_registry
    occ = instantiate(loop, registry_vnfd, registry_entry(reg, WRONG))
    failed = loop.handled(occ, want="failed")
    job = failed["jobs"][-1]
    steps = Loop.steps(failed)
    assert steps["configure-registry"]["status"] == "failed"
    assert "write-back" not in steps or steps["write-back"]["status"] != "done"
    error = job["lastError"]
    assert f"the private registry {reg.server} from " in error
    assert f"refused the credentials of user '{USER}' (HTTP 401)" in error
    assert WRONG not in str(failed)
    try:
        # The operator fixes the registry's account (it now has that password) and replays.
        reg.restart(password=WRONG)
        loop.serve.cli("replay", str(failed["id"]), "--yes")
        shown = loop.handled(occ, jobs_after=len(failed["jobs"]))
        replayed = shown["jobs"][-1]
        assert replayed["status"] == "done"
        assert Loop.steps(shown)["configure-registry"]["status"] == "done"
        for member in loop.members().values():
            assert_node_configured(hosts, loop.host(member.address), reg)
    finally:
        reg.restart(password=PASSWORD)
    assert WRONG.encode() not in serve_db(loop)
