"""The proxy and Helm extras through a real Service on real sshd hosts (stand-in kubeadm).

Tacker and OpenStack are the in-memory fakes (the VNF package is a zip the fake
Tacker hands out by vnfdId); SSH, the node files and the user's Helm script are
real. The files are read where the test hosts keep them
(``bed.root/hosts/<name>/fs``).
"""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pytest

from handlers.toolkit import helm, proxy
from subscriber.config import SshSettings
from tests.cluster_fakes import add_worker, k8s_params, lcm_op_occ, rebuild_vnfc
from tests.conftest import rerun
from tests.ssh.cluster import Cluster, fs, instantiate, name_of

from .conftest import testhosts

pytestmark = [pytest.mark.ssh, pytest.mark.asyncio, pytest.mark.usefixtures("restore_hostnames")]

PASSWORD = "Pr0xy%21pw"
HTTP = f"http://lccn:{PASSWORD}@proxy.invalid:3128"
HTTPS = "http://proxy.invalid:3129"
HELM_PATH = "Scripts/install_helm.sh"
# Proves it ran as root with the admin kubeconfig and the proxy, once per master.
HELM_OK = b"""#!/bin/bash
set -e
test "$(id -u)" = 0
test -f "$KUBECONFIG"
test -n "$http_proxy" && test -n "$no_proxy"
echo ran >> /root/helm-runs
"""
HELM_FAILS = b"""#!/bin/bash
echo "helm: download of helm-v3.14.0-linux-amd64.tar.gz failed" >&2
exit 7
"""


def proxy_params(bed: Any, *, ha: bool = False) -> dict[str, Any]:
    params = k8s_params(master_user="root", worker_user="root", key=str(bed.client_key), ha=ha)
    params["k8s_cluster_installation_param"].update(
        proxy={"http_proxy": HTTP, "https_proxy": HTTPS, "no_proxy": "10.1.2.3"},
        helm_installation_script_path=HELM_PATH,
    )
    return params


async def start(
    bed: Any,
    ssh: SshSettings,
    tmp_path: Path,
    masters: list[Any],
    workers: list[Any],
    script: bytes,
) -> tuple[Cluster, Any]:
    params = proxy_params(bed, ha=len(masters) > 1)
    return await instantiate(
        bed, tmp_path, masters, workers, ssh=ssh, params=params, package={HELM_PATH: script}
    )


def apt_file(bed: Any, host: Any) -> Path:
    return fs(bed, host, "/etc/apt/apt.conf.d") / Path(proxy.APT_CONF).name


def dropin(bed: Any, host: Any) -> Path:
    return fs(bed, host, "/etc/systemd/system") / "containerd.service.d" / "http-proxy.conf"


def marker(bed: Any, host: Any) -> Path:
    return fs(bed, host, "/var/lib/lccn-subscriber") / "helm-installed"


def helm_runs(bed: Any, host: Any) -> list[str]:
    path = fs(bed, host, "/root") / "helm-runs"
    return path.read_text().split() if path.exists() else []


def assert_proxy_files(bed: Any, host: Any, nodes: list[Any]) -> str:
    apt = apt_file(bed, host)
    assert apt.read_text().splitlines()[1:] == [
        f'Acquire::http::Proxy "{HTTP}";',
        f'Acquire::https::Proxy "{HTTPS}";',
    ]
    text = dropin(bed, host).read_text()
    assert f'Environment="HTTP_PROXY={HTTP.replace("%", "%%")}"' in text
    no_proxy = next(line for line in text.splitlines() if "NO_PROXY=" in line)
    for entry in ("localhost", "127.0.0.1", "10.1.2.3", "10.200.0.0/16", "10.199.187.0/24"):
        assert entry in no_proxy.split("NO_PROXY=")[1].rstrip('"').split(",")
    for node in nodes:
        assert node.address in no_proxy
    for path in (apt, dropin(bed, host)):  # a password inside: root only
        assert stat.S_IMODE(path.stat().st_mode) == 0o600 and path.stat().st_uid == 0
    # nothing else beside them (no temporary file left, no second drop-in)
    assert sorted(p.name for p in apt.parent.iterdir()) == [apt.name]
    assert sorted(p.name for p in dropin(bed, host).parent.iterdir()) == ["http-proxy.conf"]
    return text


def assert_no_secret_stored(tmp_path: Path) -> None:
    data = b"".join(p.read_bytes() for p in tmp_path.glob("lccn.db*"))
    assert PASSWORD.encode() not in data and b"Pr0xy!pw" not in data


async def test_proxy_and_helm_on_instantiate_rerun_then_scale_out(
    bed: Any, ssh_settings: SshSettings, tmp_path: Path
) -> None:
    master, w1, w2 = bed.hosts[0:3]
    c, event = await start(bed, ssh_settings, tmp_path, [master], [w1], HELM_OK)
    try:
        assert event.status == "done", await c.svc.store.jobs.resume_state(event.id)
        dropins = {h.name: assert_proxy_files(bed, h, [master, w1]) for h in (master, w1)}
        # kubeadm ran with the proxy and the cluster's addresses in no_proxy.
        init = next(x for x in bed.calls() if x["tool"] == "kubeadm" and x["argv"][0] == "init")
        assert init["proxy"] is True and master.address in init["no_proxy"].split(",")
        # Helm: on the master only, once, recorded.
        assert helm_runs(bed, master) == ["ran"] and helm_runs(bed, w1) == []
        assert marker(bed, master).read_text().strip() == helm.script_digest(HELM_OK)
        assert not marker(bed, w1).exists()
        ran = await c.result(event.id, "install-helm")
        assert ran["ran"] == [name_of(master, "master")] and ran["path"] == HELM_PATH

        # The same job again: the same files, Helm not run again.
        assert (await rerun(c.svc, event.id)).status == "done"
        steps = await c.steps(event.id)
        assert steps["install-helm"] == "skipped"
        again = await c.result(event.id, "configure-proxy")
        assert all(n["changed"] == [] for n in again["nodes"].values()), again
        assert {h.name: assert_proxy_files(bed, h, [master, w1]) for h in (master, w1)} == dropins
        assert helm_runs(bed, master) == ["ran"]

        # SCALE_OUT: the new worker gets the proxy files; old nodes are not touched.
        add_worker(c.tacker, c.openstack, c.inst, w2.address)
        before = {h.name: dropin(bed, h).stat().st_mtime_ns for h in (master, w1)}
        event = await c.notify("SCALE", lcm_op_occ(c.tacker, c.inst, "SCALE"))
        assert event.status == "done", await c.svc.store.jobs.resume_state(event.id)
        scaled = await c.result(event.id, "configure-proxy")
        assert list(scaled["nodes"]) == [name_of(w2, "worker")]
        assert_proxy_files(bed, w2, [master, w1, w2])
        assert {h.name: dropin(bed, h).stat().st_mtime_ns for h in (master, w1)} == before
        assert helm_runs(bed, master) == ["ran"]  # SCALE has no Helm step
        assert "proxy.invalid" not in str(scaled)
    finally:
        await c.svc.stop()
    assert_no_secret_stored(tmp_path)


async def test_proxy_and_helm_on_a_healed_master(
    bed: Any, ssh_settings: SshSettings, tmp_path: Path
) -> None:
    masters, worker = bed.hosts[0:3], bed.hosts[3]
    # An HA cluster: a healed master is rebuilt under surviving ones.
    c, event = await start(bed, ssh_settings, tmp_path, masters, [worker], HELM_OK)
    try:
        assert event.status == "done", await c.svc.store.jobs.resume_state(event.id)
        assert all(helm_runs(bed, m) == ["ran"] for m in masters)

        healed = masters[1]
        rebuild_vnfc(c.tacker, c.openstack, c.inst, healed.address)
        testhosts.wipe_host(bed, healed)
        event = await c.notify("HEAL", lcm_op_occ(c.tacker, c.inst, "HEAL"))
        assert event.status == "done", await c.svc.store.jobs.resume_state(event.id)
        assert list((await c.result(event.id, "configure-proxy"))["nodes"]) == [
            name_of(healed, "master")
        ]
        assert_proxy_files(bed, healed, [*masters, worker])
        ran = await c.result(event.id, "install-helm")
        assert ran["ran"] == [name_of(healed, "master")]
        assert sorted(ran["already"]) == sorted(
            name_of(m, "master") for m in masters if m != healed
        )
        assert all(helm_runs(bed, m) == ["ran"] for m in masters)
    finally:
        await c.svc.stop()
    assert_no_secret_stored(tmp_path)


async def test_helm_script_failure_fails_the_job_clearly(
    bed: Any, ssh_settings: SshSettings, tmp_path: Path
) -> None:
    master = bed.hosts[0]
    c, event = await start(bed, ssh_settings, tmp_path, [master], [], HELM_FAILS)
    try:
        assert event.status == "failed"
        job, rows = await c.svc.store.jobs.resume_state(event.id)
        statuses = {r.name: r.status for r in rows}
        assert statuses["install-helm"] == "failed"
        assert "admin-token" not in statuses or statuses["admin-token"] != "done"
        assert job is not None
        error = str(job.last_error)
        assert f"the Helm installation script {HELM_PATH} failed on master" in error
        assert "(exit 7)" in error and "download of helm" in error
        assert PASSWORD not in error
        assert not marker(bed, master).exists()
    finally:
        await c.svc.stop()
    assert_no_secret_stored(tmp_path)
