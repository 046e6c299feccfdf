"""Private registries (``private_registry_connection_info``): parameters, the node files,
the login check's commands and verdicts, the step's targets, and that no password
reaches a command line, a step result or a message (in-memory SSH and Tacker)."""

from __future__ import annotations

import base64
import copy
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from handlers.heal import HealCluster
from handlers.instantiate import InstantiateCluster
from handlers.job import ClusterJob
from handlers.scale import ScaleCluster
from handlers.steps import configure_registry
from handlers.toolkit import registry
from handlers.toolkit.shell import NodeShell
from handlers.toolkit.topology import discover
from schemas.cluster_params import parse_cluster_params
from subscriber.config import ClusterSettings
from subscriber.errors import (
    ClusterParamsError,
    PermanentStepError,
    SkipStep,
    TransientStepError,
)
from subscriber.kernel import Services, Step
from tests import REPO
from tests.cluster_fakes import (
    Call,
    FakeSsh,
    assert_only_new_nodes,
    cluster_vnf,
    confirmed,
    k8s_params,
    run_step,
    topology,
)
from tests.unit.test_cluster_handlers import ctx_for

PASSWORD = 'R3g"is\\try:pw'  # a quote, a backslash and a colon: curl's config quoting
SERVER = "registry.example:5000"
CA_PATH = "Files/registry/ca.crt"
CA = b"-----BEGIN CERTIFICATE-----\nMIIBtest\n-----END CERTIFICATE-----\n"


def registry_params(**extra: Any) -> dict[str, Any]:
    data = k8s_params()
    data["k8s_cluster_installation_param"]["private_registry_connection_info"] = [
        {
            "connection_type": "1",
            "server": SERVER,
            "username": "puller",
            "password": PASSWORD,
            "certificate_path": CA_PATH,
            "hosts_string": "10.9.0.50 registry.example",
        },
        {"connection_type": "0", "server": "10.9.0.51:5000"},
    ]
    data["k8s_cluster_installation_param"].update(extra)
    return data


NO_CONFIG = "no /etc/containerd/config.toml: containerd's config_path not checked"


def registry_ssh(
    *,
    codes: Mapping[str, str] | None = None,
    curl_exit: Mapping[str, tuple[int, str]] | None = None,
    config_outcome: str = NO_CONFIG,
) -> FakeSsh:
    """Nodes without systemd whose ``/etc/hosts`` and containerd config are kept, and whose
    curl answers HTTP ``codes`` (by host; 200 by default) or exits with ``curl_exit``."""
    ssh = FakeSsh(uploads=False)  # the registry step's files go over stdin

    def hosts_block(call: Call) -> str:
        key, data = (call.host, "/etc/hosts"), call.input.encode()
        changed = ssh.files.get(key, b"") != data
        ssh.files[key] = data
        return "changed" if changed else "unchanged"

    ssh.on(re.escape(registry.HOSTS_BEGIN), hosts_block)
    ssh.on(re.escape(f" config {registry.CONTAINERD_CONFIG} "), config_outcome)
    ssh.on("try-restart", "no systemd: containerd not restarted")
    ssh.on("^curl ", "200")
    for host, code in (codes or {}).items():
        ssh.on("^curl ", code, host=host)
    for host, (status, err) in (curl_exit or {}).items():
        ssh.fail("^curl ", status, err, host=host)
    return ssh


def assert_no_secret(*things: Any) -> None:
    text = json.dumps(things, default=str)
    token = base64.b64encode(f"puller:{PASSWORD}".encode()).decode()
    assert PASSWORD not in text and token not in text and "R3g" not in text


# ----------------------------------------------------------------- parameters


def test_registry_parameters_are_checked_without_echoing_the_password() -> None:
    params = parse_cluster_params(registry_params())  # v2 too: we apply it with either API
    first = params.private_registry_connection_info[0]
    assert first.server == SERVER and first.hosts_string == "10.9.0.50 registry.example"
    assert PASSWORD not in repr(params)
    for field_name, value, message in (
        ("server", "https://registry.example", "not a registry server"),
        ("server", 'reg"x', "not a registry server"),
        ("hosts_string", "registry.example 10.9.0.50", "must start with an IP address"),
        ("hosts_string", "10.9.0.50", "an address and its names"),
        ("hosts_string", "10.9.0.50 a\n10.9.0.51 b", "an address and its names"),
        ("password", None, "give both username and password, or neither"),
        ("username", "a:b", "must not contain ':'"),
    ):
        data = copy.deepcopy(registry_params())
        entry = data["k8s_cluster_installation_param"]["private_registry_connection_info"][0]
        if value is None:
            del entry[field_name]
        else:
            entry[field_name] = value
        with pytest.raises(ClusterParamsError) as info:
            parse_cluster_params(data)
        assert message in str(info.value), (field_name, str(info.value))
        assert "private_registry_connection_info.0" in str(info.value)
        assert PASSWORD not in str(info.value)


# ----------------------------------------------------------------- the files


async def test_registry_files_for_https_with_a_ca_and_for_http() -> None:
    _, params = await topology(registry_params())
    https, http = params.private_registry_connection_info
    toml = registry.hosts_toml(https, with_ca=True)
    assert f'server = "https://{SERVER}"' in toml
    assert f'[host."https://{SERVER}"]' in toml
    assert f'ca = "/etc/containerd/certs.d/{SERVER}/ca.crt"' in toml
    assert registry.ca_path(SERVER) == f"/etc/containerd/certs.d/{SERVER}/ca.crt"
    plain = registry.hosts_toml(http, with_ca=False)
    assert 'server = "http://10.9.0.51:5000"' in plain and "ca =" not in plain
    block = registry.hosts_lines(params.private_registry_connection_info)
    assert block.splitlines() == [
        registry.HOSTS_BEGIN,
        "10.9.0.50 registry.example",
        registry.HOSTS_END,
    ]
    auth = json.loads(registry.auth_config(params.private_registry_connection_info) or "")
    assert list(auth["auths"]) == [SERVER]  # the HTTP one has no credentials
    decoded = base64.b64decode(auth["auths"][SERVER]["auth"]).decode()
    assert decoded == f"puller:{PASSWORD}"
    # curl's config: the user quoted so that curl reads the password back exactly
    config = registry.curl_config(https)
    assert config.splitlines() == [
        f'url = "https://{SERVER}/v2/"',
        'user = "puller:R3g\\"is\\\\try:pw"',
    ]
    assert "user" not in registry.curl_config(http)
    secrets = registry.registry_secrets(params.private_registry_connection_info)
    assert PASSWORD in secrets and auth["auths"][SERVER]["auth"] in secrets


async def test_registry_apply_sends_secrets_on_stdin_only_and_reruns_change_nothing() -> None:
    topo, params = await topology(registry_params())
    ssh = registry_ssh()
    shell = NodeShell(ssh, ClusterSettings(), params)
    node = topo.workers[0]
    first = await registry.apply_registries(shell, topo, node, {SERVER: CA}, step="x")
    assert first.changed == (
        registry.ca_path(SERVER),
        f"/etc/containerd/certs.d/{SERVER}/hosts.toml",
        "/etc/containerd/certs.d/10.9.0.51:5000/hosts.toml",
        "/etc/hosts",
        registry.AUTH_CONFIG,
    )
    assert first.verified == {SERVER: "accepted", "10.9.0.51:5000": "reachable"}
    assert first.notes and "config_path not checked" in first.notes[0]
    host = node.ssh_ip
    assert ssh.files[(host, registry.ca_path(SERVER))] == CA
    assert ssh.modes[(host, registry.AUTH_CONFIG)] == "600"  # root only
    for call in ssh.calls:
        assert PASSWORD not in call.command and "puller" not in call.command
    curls = ssh.ran("^curl ")
    assert len(curls) == 2
    assert f"--cacert /etc/containerd/certs.d/{SERVER}/ca.crt " in curls[0].command
    assert "-K -" in curls[0].command and "--cacert" not in curls[1].command
    assert "puller:" in curls[0].input and PASSWORD in curls[0].secrets
    auth_write = next(c for c in ssh.calls if registry.AUTH_CONFIG in c.command)
    assert PASSWORD in auth_write.secrets
    assert_no_secret(first.as_json())

    again = await registry.apply_registries(shell, topo, node, {SERVER: CA}, step="x")
    assert again.changed == () and again.verified == first.verified


async def test_registry_config_path_is_set_and_containerd_restarted() -> None:
    topo, params = await topology(registry_params())
    ssh = registry_ssh(config_outcome="changed")
    shell = NodeShell(ssh, ClusterSettings(), params)
    done = await registry.apply_registries(shell, topo, topo.main, {SERVER: CA})
    assert registry.CONTAINERD_CONFIG in done.changed
    assert not done.containerd_restarted and "no systemd" in done.notes[0]
    assert any("try-restart containerd" in c.command for c in ssh.calls)


async def test_registry_login_verdicts_name_server_and_user_never_the_password() -> None:
    topo, params = await topology(registry_params())
    node = topo.workers[0]
    https = params.private_registry_connection_info[0]
    for codes, exits, error, text in (
        ({node.ssh_ip: "401"}, {}, PermanentStepError, "refused the credentials of user"),
        ({node.ssh_ip: "403"}, {}, PermanentStepError, "(HTTP 403)"),
        ({node.ssh_ip: "500"}, {}, PermanentStepError, "answered HTTP 500"),
        (
            {},
            {node.ssh_ip: (60, "curl: (60) SSL certificate problem: unable to get issuer")},
            PermanentStepError,
            "SSL certificate problem",
        ),
        ({}, {node.ssh_ip: (7, "curl: (7) Failed to connect")}, TransientStepError, "connect"),
    ):
        shell = NodeShell(registry_ssh(codes=codes, curl_exit=exits), ClusterSettings(), params)
        with pytest.raises(error) as info:
            await registry.verify_login(shell, topo, node, https, with_ca=True, step="s")
        message = str(info.value)
        assert text in message and SERVER in message and node.name in message
        assert PASSWORD not in message
    # no credentials: an answer of 401 still proves the registry is there
    http = params.private_registry_connection_info[1]
    shell = NodeShell(registry_ssh(codes={node.ssh_ip: "401"}), ClusterSettings(), params)
    assert await registry.verify_login(shell, topo, node, http, with_ca=False) == "reachable"


# ----------------------------------------------------------------- the step


async def _registry_step(
    workers: list[str], files: dict[str, bytes]
) -> tuple[FakeSsh, Any, Any, Any]:
    """A confirmed cluster VNF (one master, ``workers``) with the registry parameters and
    ``files`` in its package, its topology discovered: the SSH fake, the job context, the
    topology and the registry step."""
    data = registry_params()
    tacker, openstack, inst, occ = cluster_vnf(["10.9.0.2"], workers, params=data)
    tacker.onboard(inst, files)
    ssh = registry_ssh()
    ctx = ctx_for(inst, occ, Services(tacker=tacker, openstack=openstack, ssh=ssh))
    await confirmed(ctx)
    topo = await discover(tacker.instances[inst], parse_cluster_params(data), openstack)
    ctx.results["discover"] = topo.as_json()
    return ssh, ctx, topo, configure_registry(ClusterJob(ClusterSettings(), ctx.notification))


async def test_registry_step_every_node_on_instantiate_only_new_ones_later() -> None:
    ssh, ctx, topo, step = await _registry_step(["10.9.0.3", "10.9.0.4"], {CA_PATH: CA})
    result = await run_step(step, ctx)
    assert sorted(result["nodes"]) == sorted(n.name for n in topo.nodes)
    assert result["registries"] == [SERVER, "10.9.0.51:5000"]
    for node in topo.nodes:  # the package's CA on every node
        assert ssh.files[(node.ssh_ip, registry.ca_path(SERVER))] == CA
    assert_no_secret(result)

    await assert_only_new_nodes(step, ctx, "worker4")


async def test_registry_step_refuses_a_missing_or_bad_certificate_and_skips_without() -> None:
    for files, message in (
        ({}, "certificate_path 'Files/registry/ca.crt' is not in the VNF package"),
        ({CA_PATH: b"not a certificate"}, "is not a PEM certificate"),
    ):
        ssh, ctx, _, step = await _registry_step([], files)
        with pytest.raises(PermanentStepError, match="private_registry_connection_info") as info:
            await run_step(step, ctx)
        assert message in str(info.value)
        assert ssh.calls == []  # nothing written before the package was read
    tacker, openstack, inst, occ = cluster_vnf(["10.9.0.2"], [], params=k8s_params())
    ctx = ctx_for(inst, occ, Services(tacker=tacker, openstack=openstack, ssh=registry_ssh()))
    step = configure_registry(ClusterJob(ClusterSettings(), ctx.notification))
    with pytest.raises(SkipStep, match="no private_registry_connection_info"):
        await run_step(step, ctx)


@pytest.mark.parametrize("handler", [InstantiateCluster, ScaleCluster, HealCluster])
def test_registry_step_follows_the_joins_in_every_building_plan(handler: Any) -> None:
    _, _, inst, occ = cluster_vnf(["10.9.0.2"], [], params=k8s_params())
    ctx = ctx_for(inst, occ, Services())
    plan = handler(ClusterSettings()).steps(ClusterJob(ClusterSettings(), ctx.notification))
    names = [item.name if isinstance(item, Step) else item.pattern for item in plan]
    assert names.index("configure-registry") == names.index("join-workers") + 1


def test_registry_module_paths_are_where_the_parameters_guide_says() -> None:
    guide = (REPO / "docs" / "guide" / "parameters.md").read_text()
    for path in (registry.AUTH_CONFIG, registry.CERTS_D):
        assert path in guide


def test_hosts_block_is_replaced_where_it_stands(tmp_path: Path) -> None:
    """Another block moving past ours (configure-hosts appends its own) is no change of
    ours; a new entry is replaced in place; no entries remove the block."""
    import subprocess

    hosts = tmp_path / "hosts"
    script = registry._HOSTS.replace("/etc/hosts", str(hosts))

    def write(block: str) -> str:
        argv = ["bash", "-c", script, "hosts", registry.HOSTS_BEGIN, registry.HOSTS_END]
        out = subprocess.run(argv, input=block, capture_output=True, text=True, check=True)
        return out.stdout.strip()

    cluster = "# cluster begin\n10.0.0.1 master1\n# cluster end\n"
    ours = f"{registry.HOSTS_BEGIN}\n10.1.1.1 registry.test\n{registry.HOSTS_END}"
    hosts.write_text("127.0.0.1 localhost\n" + cluster)
    assert write(ours) == "changed"
    assert write(ours) == "unchanged"
    hosts.write_text(hosts.read_text().replace(cluster, "") + cluster)  # the cluster's moved
    assert write(ours) == "unchanged"
    assert hosts.read_text() == f"127.0.0.1 localhost\n{ours}\n{cluster}"
    assert write(ours.replace("10.1.1.1", "10.1.1.2")) == "changed"
    assert "10.1.1.2 registry.test\n" in hosts.read_text()
    assert write("") == "changed"
    assert hosts.read_text() == "127.0.0.1 localhost\n" + cluster
