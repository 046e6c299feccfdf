"""The proxy and Helm extras: their files, commands, guards, and that no proxy URL or
password reaches a command line, a step result or a message (in-memory SSH and Tacker)."""

from __future__ import annotations

import copy
import io
import json
import zipfile
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from handlers.heal import HealCluster
from handlers.instantiate import InstantiateCluster
from handlers.job import ClusterJob
from handlers.scale import ScaleCluster
from handlers.steps import configure_proxy, install_helm
from handlers.toolkit import helm, kubeadm, proxy
from handlers.toolkit.shell import NodeShell
from handlers.toolkit.topology import discover
from schemas.cluster_params import parse_cluster_params
from subscriber.config import ClusterSettings, TackerSettings
from subscriber.errors import ClusterParamsError, PermanentStepError, SkipStep, TackerRejected
from subscriber.kernel import JobContext, Services, Step
from subscriber.tacker import TackerClient
from tests.cluster_fakes import (
    Call,
    FakeOpenStack,
    FakeSsh,
    FakeTacker,
    Reply,
    assert_only_new_nodes,
    cluster_vnf,
    confirmed,
    k8s_params,
    run_step,
    topology,
    vnf_package,
)
from tests.loopback import serving
from tests.unit.test_cluster_handlers import ctx_for

PASSWORD = "S3cr%40t-pw"  # percent-encoded '@' inside: systemd must not expand it
HTTP = f"http://proxyuser:{PASSWORD}@proxy.example:3128"
HTTPS = "https://proxy.example:3129"
HELM_PATH = "Scripts/install_helm.sh"
HELM_SCRIPT = b"#!/bin/bash\nset -e\necho helm installed\n"


def proxy_params(*, ha: bool = False, **extra: Any) -> dict[str, Any]:
    data = k8s_params(ha=ha)
    data["k8s_cluster_installation_param"]["proxy"] = {
        "http_proxy": HTTP,
        "https_proxy": HTTPS,
        "no_proxy": "192.168.246.0/24, 10.0.0.1",
        "k8s_node_cidr": "10.9.0.0/29",
    }
    data["k8s_cluster_installation_param"].update(extra)
    return data


def node_ssh(*, fail_helm: bool = False) -> FakeSsh:
    """Nodes without systemd whose Helm script succeeds (or fails) and leaves its marker."""
    ssh = FakeSsh().on("systemctl try-restart", "no systemd: containerd not restarted")

    def cat_marker(call: Call) -> Reply:
        marker = ssh.files.get((call.host, helm.MARKER))
        return Reply(marker.decode()) if marker else Reply(exit_status=1)

    def mark(call: Call) -> str:
        ssh.files[(call.host, helm.MARKER)] = call.command.split()[-1].encode()
        return ""

    ssh.on(f"^cat {helm.MARKER}$", cat_marker).on(r"^sh -c .*helm-installed", mark)
    if fail_helm:
        ssh.fail(
            "^bash /tmp/install_helm.sh",
            3,
            f"curl: (56) proxy {HTTP} refused: helm download failed",
        )
    else:
        ssh.on("^bash /tmp/install_helm.sh", "helm installed")
    return ssh


def assert_no_secret(*things: Any) -> None:
    text = json.dumps(things, default=str)
    assert PASSWORD not in text and "S3cr@t-pw" not in text and HTTP not in text


# ----------------------------------------------------------------- parameters


def test_proxy_urls_are_checked_without_echoing_them() -> None:
    data = proxy_params()
    data["k8s_cluster_installation_param"]["proxy"]["http_proxy"] = 'http://u:p"w@x:1'
    with pytest.raises(ClusterParamsError) as info:
        parse_cluster_params(data)
    assert "proxy.http_proxy" in str(info.value) and 'p"w' not in str(info.value)
    bad = copy.deepcopy(proxy_params())
    bad["k8s_cluster_installation_param"]["proxy"]["no_proxy"] = "a,b\nc"
    with pytest.raises(ClusterParamsError, match=r"proxy\.no_proxy"):
        parse_cluster_params(bad)


def test_proxy_and_helm_are_accepted_with_v2() -> None:
    params = parse_cluster_params(proxy_params(helm_installation_script_path=HELM_PATH))
    assert params.api_version == "v2" and params.proxy is not None
    assert params.helm_installation_script_path == HELM_PATH
    assert HTTP not in repr(params)


# ----------------------------------------------------------------- proxy toolkit


async def test_proxy_no_proxy_lists_the_cluster_addresses_once() -> None:
    topo, params = await topology(proxy_params())
    entries = proxy.no_proxy(params, topo).split(",")
    assert len(entries) == len(set(entries))
    assert entries[:4] == ["localhost", "127.0.0.1", "192.168.246.0/24", "10.0.0.1"]
    # k8s_node_cidr: the CIDR and each of its hosts (a /29: 6 hosts)
    assert "10.9.0.0/29" in entries and "10.9.0.1" in entries and "10.9.0.6" in entries
    for node in topo.nodes:
        assert node.nic_ip in entries
    assert topo.cluster_ip in entries
    assert params.pod_cidr in entries and params.service_cidr in entries
    assert ".svc" in entries


async def test_proxy_files_quote_for_apt_and_systemd() -> None:
    topo, params = await topology(proxy_params())
    assert params.proxy is not None
    apt = proxy.apt_conf(params.proxy)
    assert f'Acquire::http::Proxy "{HTTP}";' in apt
    assert f'Acquire::https::Proxy "{HTTPS}";' in apt
    dropin = proxy.containerd_dropin(params, topo)
    assert dropin.splitlines()[1] == "[Service]"
    # systemd expands %-specifiers: a percent-encoded password is written as %%.
    assert f'Environment="HTTP_PROXY={HTTP.replace("%", "%%")}"' in dropin
    assert f'Environment="NO_PROXY={proxy.no_proxy(params, topo)}"' in dropin


async def test_proxy_apply_sends_urls_on_stdin_only_and_reruns_change_nothing() -> None:
    topo, params = await topology(proxy_params())
    ssh = node_ssh()
    shell = NodeShell(ssh, ClusterSettings(), params)
    node = topo.workers[0]
    first = await proxy.apply_proxy(shell, topo, node, step="configure-proxy")
    assert first.changed == (proxy.APT_CONF, proxy.CONTAINERD_DROPIN)
    assert not first.containerd_restarted and first.notes  # no systemd on the fake
    writes = ssh.ran("cmp -s")
    assert len(writes) == 2
    for call in ssh.calls:
        assert PASSWORD not in call.command and "proxy.example" not in call.command
    apt, dropin = (c.input for c in writes)
    assert HTTP in apt and HTTP.replace("%", "%%") in dropin
    assert all(PASSWORD in c.secrets and HTTP in c.secrets for c in writes)
    assert all(c.command.split()[-1] == "600" for c in writes)  # credentials: mode 600
    assert_no_secret(first.as_json())

    again = await proxy.apply_proxy(shell, topo, node, step="configure-proxy")
    assert again.changed == () and not again.containerd_restarted
    restarts = ssh.ran("try-restart")
    assert len(restarts) == 1  # only after the first write


async def test_proxy_reaches_the_install_script_environment_masked() -> None:
    topo, params = await topology(proxy_params())
    shell = NodeShell(node_ssh(), ClusterSettings(), params)
    env = kubeadm.script_env(shell, topo, topo.workers[0])
    assert env["http_proxy"] == env["HTTP_PROXY"] == HTTP
    assert env["https_proxy"] == HTTPS
    assert env["no_proxy"] == proxy.no_proxy(params, topo)
    secrets = proxy.proxy_secrets(params)
    assert HTTP in secrets and PASSWORD in secrets and "S3cr@t-pw" in secrets
    # no proxy: nothing added
    plain = NodeShell(node_ssh(), ClusterSettings(), parse_cluster_params(k8s_params()))
    assert "http_proxy" not in kubeadm.script_env(plain, topo, topo.workers[0])


# ----------------------------------------------------------------- steps and plans


def services_with(tacker: FakeTacker, openstack: FakeOpenStack, ssh: FakeSsh) -> Services:
    return Services(tacker=tacker, openstack=openstack, ssh=ssh)


async def test_proxy_step_touches_every_node_on_instantiate_only_new_ones_later() -> None:
    data = proxy_params()
    tacker, openstack, inst, occ = cluster_vnf(["10.9.0.2"], ["10.9.0.3", "10.9.0.4"], params=data)
    ssh = node_ssh()
    ctx = ctx_for(inst, occ, services_with(tacker, openstack, ssh))
    topo = await discover(tacker.instances[inst], parse_cluster_params(data), openstack)
    ctx.results["discover"] = topo.as_json()
    step = configure_proxy(ClusterJob(ClusterSettings(), ctx.notification))
    result = await run_step(step, ctx)
    assert sorted(result["nodes"]) == sorted(n.name for n in topo.nodes)
    assert_no_secret(result)

    # SCALE/HEAL: only the added and rebuilt nodes
    await assert_only_new_nodes(step, ctx, "worker4")


async def test_proxy_step_skips_without_a_proxy() -> None:
    tacker, openstack, inst, occ = cluster_vnf(["10.9.0.2"], [])
    ctx = ctx_for(inst, occ, services_with(tacker, openstack, node_ssh()))
    job = ClusterJob(ClusterSettings(), ctx.notification)
    with pytest.raises(SkipStep, match="no proxy"):
        await run_step(configure_proxy(job), ctx)


def test_proxy_and_helm_steps_in_the_plans() -> None:
    _, _, inst, occ = cluster_vnf(["10.9.0.2"], [])
    n = ctx_for(inst, occ, Services()).notification
    outline = InstantiateCluster().plan(n).outline()
    assert outline.index("configure-proxy") == outline.index("configure-hosts") + 1
    assert outline.index("install-helm") == outline.index("label-workers") + 1
    assert "configure-proxy" in ScaleCluster().plan(n).outline()
    assert "install-helm" not in ScaleCluster().plan(n).outline()  # workers only
    heal = HealCluster().plan(n).outline()
    assert "configure-proxy" in heal and "install-helm" in heal
    helm_step = next(
        s
        for s in InstantiateCluster().plan(n).items
        if isinstance(s, Step) and s.name == "install-helm"
    )
    assert not helm_step.idempotent  # a user's script: guarded by its marker, never rerun blind


# ----------------------------------------------------------------- helm


async def helm_ctx(ssh: FakeSsh, *, masters: int = 1) -> tuple[JobContext, Step, FakeTacker]:
    data = proxy_params(ha=masters > 1, helm_installation_script_path=HELM_PATH)
    ips = [f"10.9.0.{2 + i}" for i in range(masters)]
    tacker, openstack, inst, occ = cluster_vnf(
        ips, ["10.9.0.9"], params=data, vip="10.9.0.100" if masters > 1 else None
    )
    tacker.onboard(inst, {HELM_PATH: HELM_SCRIPT})
    ctx = ctx_for(inst, occ, services_with(tacker, openstack, ssh))
    await confirmed(ctx)
    topo = await discover(tacker.instances[inst], parse_cluster_params(data), openstack)
    ctx.results["discover"] = topo.as_json()
    job = ClusterJob(ClusterSettings(script_env={"HELM_VERSION": "v3.14.4"}), ctx.notification)
    return ctx, install_helm(job), tacker


async def test_helm_runs_once_per_master_with_proxy_env_and_marker() -> None:
    ssh = node_ssh()
    ctx, step, _ = await helm_ctx(ssh, masters=3)
    result = await run_step(step, ctx)
    assert sorted(result["ran"]) == ["master2", "master3", "master4"]
    assert result["sha256"] == helm.script_digest(HELM_SCRIPT)
    runs = ssh.ran("^bash /tmp/install_helm.sh")
    assert len(runs) == 3
    assert all(c.env["KUBECONFIG"] == "/etc/kubernetes/admin.conf" for c in runs)
    assert all(c.env["HELM_VERSION"] == "v3.14.4" for c in runs)  # cluster.script_env
    assert all(c.env["http_proxy"] == HTTP and PASSWORD in c.secrets for c in runs)
    assert all(ssh.files[(h, helm.REMOTE_HELM_SCRIPT)] == HELM_SCRIPT for h in ("10.9.0.2",))
    assert_no_secret(result, [c.command for c in ssh.calls])

    # Again: every master's marker names this script.
    with pytest.raises(SkipStep, match="already ran on every master"):
        await run_step(step, ctx)
    assert len(ssh.ran("^bash /tmp/install_helm")) == 3


async def test_helm_failure_fails_the_step_clearly_and_masked() -> None:
    ssh = node_ssh(fail_helm=True)
    ctx, step, _ = await helm_ctx(ssh)
    with pytest.raises(PermanentStepError) as info:
        await run_step(step, ctx)
    message = str(info.value)
    assert f"the Helm installation script {HELM_PATH} failed on master2 (exit 3)" in message
    assert "helm download failed" in message
    assert PASSWORD not in message
    assert (ctx.results["discover"]["masters"][0]["sshIp"], helm.MARKER) not in ssh.files


async def test_helm_script_missing_from_the_package_is_permanent() -> None:
    ssh = node_ssh()
    ctx, step, tacker = await helm_ctx(ssh)
    tacker.packages["vnfd-1"] = vnf_package({"Scripts/other.sh": b""})
    with pytest.raises(PermanentStepError, match="is not in the VNF package"):
        await run_step(step, ctx)
    del tacker.packages["vnfd-1"]
    with pytest.raises(TackerRejected, match="no onboarded VNF package"):
        await run_step(step, ctx)


# ----------------------------------------------------------------- Tacker client


@pytest.fixture
async def package_server() -> AsyncIterator[tuple[str, list[web.Request]]]:
    seen: list[web.Request] = []
    pkg = vnf_package({HELM_PATH: HELM_SCRIPT})

    async def index(request: web.Request) -> web.Response:
        seen.append(request)
        if request.query.get("filter") == "(eq,vnfdId,vnfd-1)":
            return web.json_response(
                [
                    {"id": "pkg-0", "onboardingState": "CREATED"},
                    {"id": "pkg-1", "onboardingState": "ONBOARDED", "vnfdId": "vnfd-1"},
                ]
            )
        return web.json_response([])

    async def content(request: web.Request) -> web.Response:
        seen.append(request)
        return web.Response(body=pkg, content_type="application/zip")

    async with serving(
        ("GET", "/vnfpkgm/v1/vnf_packages", index),
        ("GET", "/vnfpkgm/v1/vnf_packages/pkg-1/package_content", content),
    ) as url:
        yield url, seen


async def test_helm_package_content_from_the_vnfd_id(
    package_server: tuple[str, list[web.Request]],
) -> None:
    url, seen = package_server
    settings = TackerSettings(endpoint=url, retry_attempts=1, noauth_project_id="p" * 32)
    async with TackerClient(settings) as client:
        spool = io.BytesIO()
        await client.vnf_package("vnfd-1", spool)
        with zipfile.ZipFile(spool) as archive:
            assert archive.read(HELM_PATH) == HELM_SCRIPT
        with pytest.raises(TackerRejected, match="no onboarded VNF package with vnfdId nope"):
            await client.vnf_package("nope", io.BytesIO())
    assert seen[1].headers["Accept"] == "application/zip"
    assert "Version" not in seen[1].headers
