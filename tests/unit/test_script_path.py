"""``script_path``: the VNF package's install script goes on the nodes (our own only as the
logged fallback), runs with the argv Tacker's drivers give it, and a script that does not
print what the drivers parse fails the init naming the line (in-memory SSH and Tacker; the
argv through a real bash)."""

from __future__ import annotations

import hashlib
import logging
import os
import shlex
import subprocess
from dataclasses import replace
from importlib import resources
from pathlib import Path

import pytest

from handlers.job import ClusterJob
from handlers.results import Discovered
from handlers.steps import init_main_master, upload_scripts
from handlers.toolkit import hosts, kubeadm
from handlers.toolkit.shell import NodeShell
from handlers.toolkit.topology import Topology, discover
from schemas.cluster_params import parse_cluster_params
from subscriber.config import ClusterSettings
from subscriber.errors import PermanentStepError
from subscriber.kernel import JobContext, Services
from subscriber.logs import EventLogAdapter
from tests import REPO
from tests.cluster_fakes import (
    JOIN_DATA,
    FakeSsh,
    FakeTacker,
    Reply,
    cluster_vnf,
    confirmed,
    join_data_reply,
    k8s_params,
    run_step,
)
from tests.unit.test_cluster_handlers import ctx_for

SCRIPT_PATH = "Scripts/install_k8s_cluster.sh"
CUSTOM = b"#!/bin/bash\necho the package's own install script\n"
OURS = resources.files("handlers.toolkit.node").joinpath("install_k8s_cluster.sh").read_bytes()
TOKEN = "abcdef.0123456789abcdef"
KEY = "c" * 64
HASH = "a" * 64
RUN = r"^bash -c 'set -- .*install_k8s_cluster\.sh$"  # a run, not the upload
CA = "-----BEGIN CERTIFICATE-----\nMIIBdzCCAR2gAwIBAgIU\n-----END CERTIFICATE-----\n"


async def setup(
    files: dict[str, bytes] | None, ssh: FakeSsh, *, masters: int = 1, vnfd: bool = True
) -> tuple[JobContext, ClusterJob, FakeTacker]:
    """A cluster VNF whose package holds ``files`` (``None``: Tacker has no package; with
    ``vnfd=False`` the instance names no vnfdId either), confirmed and discovered."""
    data = k8s_params(ha=masters > 1)
    ips = [f"10.9.0.{2 + i}" for i in range(masters)]
    tacker, openstack, inst, occ = cluster_vnf(
        ips, ["10.9.0.8", "10.9.0.9"], params=data, vip="10.9.0.100" if masters > 1 else None
    )
    if files is not None:
        tacker.onboard(inst, files)
    elif vnfd:
        tacker.instances[inst]["vnfdId"] = "vnfd-not-onboarded"
    ctx = ctx_for(inst, occ, Services(tacker=tacker, openstack=openstack, ssh=ssh))
    ctx = replace(ctx, log=EventLogAdapter(logging.getLogger("test"), {}))
    await confirmed(ctx)
    topo = await discover(tacker.instances[inst], parse_cluster_params(data), openstack)
    ctx.results["discover"] = topo.as_json()
    return ctx, ClusterJob(ClusterSettings(), ctx.notification), tacker


def uploaded(ssh: FakeSsh, path: str = hosts.REMOTE_SCRIPT) -> dict[str, bytes]:
    return {host: data for (host, p), data in ssh.files.items() if p == path}


async def test_the_packages_script_path_file_goes_on_every_node() -> None:
    ssh = FakeSsh()
    ctx, job, _ = await setup({SCRIPT_PATH: CUSTOM, "Scripts/other.sh": b"x"}, ssh)
    result = await run_step(upload_scripts(job), ctx)
    assert result["source"] == "package" and result["path"] == SCRIPT_PATH
    assert result["sha256"] == hashlib.sha256(CUSTOM).hexdigest()
    assert result["reason"] is None
    assert uploaded(ssh) == {"10.9.0.2": CUSTOM, "10.9.0.8": CUSTOM, "10.9.0.9": CUSTOM}
    # The admin token's manifest only where the token is made: the master.
    assert set(uploaded(ssh, hosts.REMOTE_TOKEN_YAML)) == {"10.9.0.2"}


@pytest.mark.parametrize(
    ("files", "vnfd", "reason"),
    [
        ({"Scripts/other.sh": b"x"}, True, "script_path 'Scripts/install_k8s_cluster.sh' is not"),
        (None, True, "Tacker has no onboarded VNF package with vnfdId vnfd-not-onboarded"),
        (None, False, "names no vnfdId"),
    ],
    ids=["package-without-the-file", "no-package", "no-vnfd"],
)
async def test_fallback_to_our_own_script_is_logged(
    files: dict[str, bytes] | None, vnfd: bool, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    ssh = FakeSsh()
    ctx, job, _ = await setup(files, ssh, vnfd=vnfd)
    with caplog.at_level(logging.WARNING):
        result = await run_step(upload_scripts(job), ctx)
    assert result["source"] == "fallback" and reason in result["reason"]
    assert result["sha256"] == hashlib.sha256(OURS).hexdigest()
    assert set(uploaded(ssh).values()) == {OURS}
    [record] = [r for r in caplog.records if "own install_k8s_cluster.sh" in r.getMessage()]
    assert record.levelno == logging.WARNING
    assert getattr(record, "script_path") == SCRIPT_PATH  # noqa: B009
    assert reason in getattr(record, "reason")  # noqa: B009


async def test_a_broken_package_fails_rather_than_falling_back() -> None:
    ssh = FakeSsh()
    ctx, job, tacker = await setup({SCRIPT_PATH: CUSTOM}, ssh)
    tacker.packages["vnfd-1"] = b"not a zip"
    with pytest.raises(PermanentStepError, match="not a zip file"):
        await run_step(upload_scripts(job), ctx)
    assert not uploaded(ssh)


@pytest.mark.parametrize("package", ["kubernetes_cluster", "kubernetes_cluster_v1"])
def test_the_sample_packages_carry_our_script_byte_for_byte(package: str) -> None:
    """Our script is the sample packages' ``script_path`` file: a link to the wheel's copy
    (the fallback), which the package build reads through, so the two cannot drift."""
    root = REPO / "scripts/vnf_package" / package
    assert (root / SCRIPT_PATH).read_bytes() == OURS
    assert f"Name: {SCRIPT_PATH}\n" in (root / "TOSCA-Metadata/TOSCA.meta").read_text()


# ----------------------------------------------------------------- the argv


def argv_of(command: str, env: dict[str, str], tmp_path: Path) -> list[str]:
    """What the install script sees as ``$0`` and ``"$@"`` when ``command`` runs (a real
    bash; the script at a private path instead of /tmp)."""
    script = tmp_path / "install_k8s_cluster.sh"
    script.write_text(
        'printf "%s\\n" "$0" "$@"; env | grep -c "^LCCN_" || true\n', encoding="utf-8"
    )
    local = command.replace(hosts.REMOTE_SCRIPT, shlex.quote(str(script)))
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LCCN_")}
    out = subprocess.run(
        ["bash", "-c", local], env={**clean, **env}, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert out[0] == str(script)
    assert out[-1] == "0"  # the secrets' variables are not exported to the script
    return out[1:-1]


def join_ssh() -> FakeSsh:
    return (
        FakeSsh()
        .on(r"token create", f"{TOKEN}\n")
        .on(r"openssl x509 -pubkey", f"{HASH}\n")
        .on(r"upload-certs", f"[upload-certs] Using certificate key:\n{KEY}\n")
        .on(JOIN_DATA, join_data_reply(TOKEN, HASH, KEY))
        .on(r"install_k8s_cluster\.sh", Reply(stdout=""))
    )


async def shell_of(ssh: FakeSsh, *, masters: int = 1) -> tuple[NodeShell, Topology]:
    ctx, job, _ = await setup(None, ssh, masters=masters)
    return await job.shell(ctx), Discovered.from_json(ctx.results["discover"]).topology


async def test_argv_of_a_worker_join_is_tackers(tmp_path: Path) -> None:
    ssh = join_ssh()
    shell, topo = await shell_of(ssh)
    data = kubeadm.JoinData(token=kubeadm.SecretStr(TOKEN), ca_hash=HASH)
    worker = topo.workers[0]
    await kubeadm.join_worker(shell, topo, worker, data)
    [call] = ssh.ran(RUN)
    assert TOKEN not in call.command and TOKEN in call.secrets
    # kubernetes_mgmt.py: "-w {worker_ip} -i {cluster_ip} -t {kubeadm_token} -s {ssl_ca_cert_hash}"
    assert argv_of(call.command, call.env, tmp_path) == [
        "-w", worker.nic_ip, "-i", topo.main.nic_ip, "-t", TOKEN, "-s", HASH,
    ]  # fmt: skip
    assert call.env["ha_flag"] == "False"


async def test_argv_of_a_control_plane_join_is_tackers(tmp_path: Path) -> None:
    ssh = join_ssh()
    shell, topo = await shell_of(ssh, masters=3)
    node = topo.masters[1]
    await kubeadm.join_control_plane(shell, topo, node)
    [call] = ssh.ran(RUN)
    assert TOKEN not in call.command and KEY not in call.command
    masters = ",".join(m.nic_ip for m in topo.masters)
    # "-m {master_ip} -i {cluster_ip} -p {pod_cidr} -a {k8s_cluster_cidr}
    #  -t {kubeadm_token} -s {ssl_ca_cert_hash} -k {certificate_key}"
    assert argv_of(call.command, call.env, tmp_path) == [
        "-m", masters, "-i", topo.cluster_ip, "-p", shell.params.pod_cidr,
        "-a", shell.params.service_cidr, "-t", TOKEN, "-s", HASH, "-k", KEY,
    ]  # fmt: skip
    assert call.host == node.ssh_ip


async def test_argv_of_the_init_is_tackers_and_its_output_is_checked(tmp_path: Path) -> None:
    output = f"token:{TOKEN}\nserver:https://10.9.0.2:6443\n{CA}ssl_ca_cert_hash:{HASH}\n"
    ssh = FakeSsh().fail(r"test -f /tmp/installed").on(r"install_k8s_cluster\.sh", output)
    ctx, job, _ = await setup({SCRIPT_PATH: CUSTOM}, ssh)
    ctx.results["upload-scripts"] = await run_step(upload_scripts(job), ctx)
    [step] = init_main_master(job).expand(Discovered.from_json(ctx.results["discover"]))
    result = await run_step(step, ctx)
    assert result == {"node": "master2", "server": "https://10.9.0.2:6443", "sslCaCertHash": HASH}
    [call] = ssh.ran(RUN)
    p = parse_cluster_params(k8s_params())
    # "-m {master_ip} -i {cluster_ip} -p {pod_cidr} -a {k8s_cluster_cidr}"
    assert argv_of(call.command, call.env, tmp_path) == [
        "-m", "10.9.0.2", "-i", "10.9.0.2", "-p", p.pod_cidr, "-a", p.service_cidr,
    ]  # fmt: skip

    # A package script that does not print the server line: the init fails, naming it.
    ssh.on(r"install_k8s_cluster\.sh", output.replace("server:https://10.9.0.2:6443\n", ""))
    with pytest.raises(PermanentStepError) as info:
        await run_step(step, ctx)
    message = str(info.value)
    assert "\n" not in message and TOKEN not in message
    assert (
        f"the VNF package's install script (script_path '{SCRIPT_PATH}') on master2: "
        "no 'server:' line in its output" in message
    )
