"""Private registries through a real Service on real sshd hosts, against a real registry.

The registry is Debian's ``docker-registry`` with htpasswd basic auth and TLS (a
CA made here), run inside the network namespace of a test host that is not part
of the cluster (:mod:`tests.testbed.registry`). Tacker and OpenStack are the
in-memory fakes (the CA reaches the step inside the VNF package the fake Tacker
hands out); SSH, the node files, curl on the nodes and the registry are real.
Every SSH command is recorded to prove no password went on a command line.
"""

from __future__ import annotations

import base64
import json
import stat
import subprocess
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Unpack

import pytest

from handlers.toolkit import registry
from handlers.toolkit.shell import NodeShell
from handlers.toolkit.topology import discover
from schemas.cluster_params import parse_cluster_params
from subscriber.config import ClusterSettings, SshSettings
from subscriber.errors import PermanentStepError
from subscriber.kernel.ports import CommandResult, RunOptions, SshTarget, UploadOptions
from subscriber.ssh import SshPool
from tests.cluster_fakes import add_worker, cluster_vnf, k8s_params, lcm_op_occ, rebuild_vnfc
from tests.conftest import rerun
from tests.ssh.cluster import Cluster, instantiate, name_of
from tests.testbed import registry as test_registry

from .conftest import testhosts

pytestmark = [pytest.mark.ssh, pytest.mark.asyncio, pytest.mark.usefixtures("restore_hostnames")]

USER = "puller"
PASSWORD = 'Reg"istry\\pw:1'  # a quote, a backslash and a colon reach curl intact
CA_PATH = "Files/registry/ca.crt"


@pytest.fixture(scope="module")
def real_registry(bed: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The registry on the bed's last host (never a cluster node here)."""
    root = tmp_path_factory.mktemp("registry")
    with test_registry.serving(bed.hosts[-1], root, username=USER, password=PASSWORD) as server:
        yield server


class RecordingPool:
    """The real pool, every command line and upload path recorded."""

    def __init__(self, pool: SshPool) -> None:
        self.pool = pool
        self.commands: list[str] = []

    async def run(
        self, target: SshTarget, command: str, **options: Unpack[RunOptions]
    ) -> CommandResult:
        self.commands.append(command)
        return await self.pool.run(target, command, **options)

    async def upload(
        self, target: SshTarget, source: Any, remote_path: str, **options: Unpack[UploadOptions]
    ) -> None:
        self.commands.append(f"upload {remote_path}")
        await self.pool.upload(target, source, remote_path, **options)


@pytest.fixture
async def recording(ssh_settings: SshSettings) -> AsyncIterator[RecordingPool]:
    async with SshPool(ssh_settings) as pool:
        yield RecordingPool(pool)


def params_for(bed: Any, reg: Any, password: str = PASSWORD) -> dict[str, Any]:
    params = k8s_params(master_user="root", worker_user="root", key=str(bed.client_key))
    params["k8s_cluster_installation_param"]["private_registry_connection_info"] = [
        {
            "connection_type": "1",
            "server": reg.server,
            "username": USER,
            "password": password,
            "certificate_path": CA_PATH,
            "hosts_string": reg.hosts_string,
        }
    ]
    return params


def certs_dir(bed: Any, host: Any, server: str) -> Path:
    return Path(bed.private_dir(host, "/etc/containerd")) / "certs.d" / server


def auth_file(bed: Any, host: Any) -> Path:
    return Path(bed.private_dir(host, "/var/lib/kubelet")) / "config.json"


def node_login(bed: Any, host: Any, reg: Any) -> str:
    """``GET /v2/`` from inside ``host`` (its /etc/hosts, its CA file) with the credentials
    read from the node's own auth config: the HTTP status."""
    auth = json.loads(auth_file(bed, host).read_text())["auths"][reg.server]["auth"]
    user = base64.b64decode(auth).decode().replace("\\", "\\\\").replace('"', '\\"')
    ca = f"/etc/containerd/certs.d/{reg.server}/ca.crt"
    curl = ["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "20"]
    proc = subprocess.run(
        ["nsenter", "-t", str(host.pid), "-m", "-n", "--", *curl, "--cacert", ca, "-K", "-"],
        input=f'url = "https://{reg.server}/v2/"\nuser = "{user}"\n',
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return proc.stdout.strip() or proc.stderr.strip()


def assert_node_configured(bed: Any, host: Any, reg: Any) -> None:
    ca = certs_dir(bed, host, reg.server) / "ca.crt"
    assert ca.read_bytes() == reg.ca_pem
    toml = (certs_dir(bed, host, reg.server) / "hosts.toml").read_text()
    assert f'server = "https://{reg.server}"' in toml
    assert f'ca = "{registry.ca_path(reg.server)}"' in toml
    hosts = (Path(bed.root) / "hosts" / host.name / "hosts").read_text().splitlines()
    assert hosts.count(reg.hosts_string) == 1
    auth = auth_file(bed, host)
    assert stat.S_IMODE(auth.stat().st_mode) == 0o600 and auth.stat().st_uid == 0
    assert node_login(bed, host, reg) == "200"  # the node's own credentials are accepted


def logins_from(reg: Any, address: str) -> int:
    """Accepted ``GET /v2/`` in the registry's access log from ``address``."""
    return sum(
        1
        for line in reg.log().splitlines()
        if line.startswith(f"{address} - ") and '"GET /v2/ ' in line and '" 200 ' in line
    )


CONTAINERD_DEFAULT = """version = 2
[plugins."io.containerd.grpc.v1.cri".registry]
  config_path = ""
[plugins."io.containerd.transfer.v1.local"]
  config_path = ""
"""


async def start_service(
    bed: Any, reg: Any, ssh: Any, tmp_path: Path, masters: list[Any], workers: list[Any]
) -> tuple[Cluster, Any]:
    # containerd's default config (1.7) on the master: config_path must come to name certs.d
    config = Path(bed.private_dir(masters[0], "/etc/containerd")) / "config.toml"
    return await instantiate(
        bed,
        tmp_path,
        masters,
        workers,
        executor=ssh,
        params=params_for(bed, reg),
        package={CA_PATH: reg.ca_pem},
        prepare=lambda *_: config.write_text(CONTAINERD_DEFAULT),
    )


def assert_secret_nowhere(commands: Sequence[str], tmp_path: Path) -> None:
    token = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    for command in commands:
        assert PASSWORD not in command and token not in command and "Reg" not in command
    data = b"".join(p.read_bytes() for p in tmp_path.glob("lccn.db*"))
    assert PASSWORD.encode() not in data and token.encode() not in data


async def test_registry_login_accepted_rerun_changes_nothing_scale_out_adds_the_node(
    bed: Any, real_registry: Any, recording: RecordingPool, tmp_path: Path
) -> None:
    reg = real_registry
    master, w1, w2 = bed.hosts[0:3]
    c, event = await start_service(bed, reg, recording, tmp_path, [master], [w1])
    try:
        assert event.status == "done", await c.svc.store.jobs.resume_state(event.id)
        done = await c.result(event.id, "configure-registry")
        assert sorted(done["nodes"]) == sorted([name_of(master, "master"), name_of(w1, "worker")])
        for node in done["nodes"].values():
            assert node["verified"] == {reg.server: "accepted"}
            assert registry.AUTH_CONFIG in node["changed"] and "/etc/hosts" in node["changed"]
        for host in (master, w1):
            assert logins_from(reg, host.address) >= 1  # the step's check reached the registry
            assert_node_configured(bed, host, reg)
        config = Path(bed.private_dir(master, "/etc/containerd")) / "config.toml"
        assert config.read_text() == CONTAINERD_DEFAULT.replace(
            'config_path = ""', f'config_path = "{registry.CERTS_D}"'
        )
        assert registry.CONTAINERD_CONFIG in done["nodes"][name_of(master, "master")]["changed"]

        # The same job again: nothing changes, the check runs again and passes.
        before = {h.name: auth_file(bed, h).stat().st_mtime_ns for h in (master, w1)}
        assert (await rerun(c.svc, event.id)).status == "done"
        again = await c.result(event.id, "configure-registry")
        assert all(n["changed"] == [] for n in again["nodes"].values()), again
        assert {h.name: auth_file(bed, h).stat().st_mtime_ns for h in (master, w1)} == before

        # SCALE_OUT: the new worker only.
        add_worker(c.tacker, c.openstack, c.inst, w2.address)
        event = await c.notify("SCALE", lcm_op_occ(c.tacker, c.inst, "SCALE"))
        assert event.status == "done", await c.svc.store.jobs.resume_state(event.id)
        scaled = await c.result(event.id, "configure-registry")
        assert list(scaled["nodes"]) == [name_of(w2, "worker")]
        assert_node_configured(bed, w2, reg)
        assert {h.name: auth_file(bed, h).stat().st_mtime_ns for h in (master, w1)} == before

        # HEAL of a worker: its VM is rebuilt (files gone); it alone is configured again.
        rebuild_vnfc(c.tacker, c.openstack, c.inst, w1.address)
        testhosts.wipe_host(bed, w1)
        assert not auth_file(bed, w1).exists()
        event = await c.notify("HEAL", lcm_op_occ(c.tacker, c.inst, "HEAL"))
        assert event.status == "done", await c.svc.store.jobs.resume_state(event.id)
        healed = await c.result(event.id, "configure-registry")
        assert list(healed["nodes"]) == [name_of(w1, "worker")]
        assert_node_configured(bed, w1, reg)
    finally:
        await c.svc.stop()
    assert_secret_nowhere(recording.commands, tmp_path)


async def test_registry_wrong_password_is_refused_clearly_and_kept_secret(
    bed: Any, real_registry: Any, recording: RecordingPool, tmp_path: Path
) -> None:
    reg = real_registry
    testhosts.reset_cluster(bed)
    host = bed.hosts[1]
    wrong = "not-the-Reg-pw"
    data = params_for(bed, reg, password=wrong)
    tacker, openstack, inst, _ = cluster_vnf([bed.hosts[0].address], [host.address], params=data)
    params = parse_cluster_params(data)
    topo = await discover(tacker.instances[inst], params, openstack)
    node = next(n for n in topo.nodes if n.ssh_ip == host.address)
    shell = NodeShell(recording, ClusterSettings(), params)
    cas: Mapping[str, bytes] = {reg.server: reg.ca_pem}
    with pytest.raises(PermanentStepError) as info:
        await registry.apply_registries(shell, topo, node, cas, step="configure-registry")
    message = str(info.value)
    assert f"the private registry {reg.server} from {node.name} refused the credentials" in message
    assert f"user '{USER}'" in message and "(HTTP 401)" in message
    assert wrong not in message
    token = base64.b64encode(f"{USER}:{wrong}".encode()).decode()
    for command in recording.commands:
        assert wrong not in command and token not in command
    # the files were written (root only) before the check refused the login
    assert stat.S_IMODE(auth_file(bed, host).stat().st_mode) == 0o600
    assert node_login(bed, host, reg) == "401"
