"""Tacker 16.0.0's own v2 Kubernetes management-driver script, unchanged, on the test bed.

The script (``kubernetes_mgmt_v2.py`` of Tacker's sample package
``samples/mgmt_driver/kubernetes/sol_v2_kubernetes_vnf_package``) is the driver
``lccn-subscriber`` replaces. To run it beside ours, on the same hosts and with the same
install script, this is what had to be prepared, and why:

* **The script itself.** It ships only in Tacker's sdist, not in the wheel Tacker's venv
  holds: ``scripts/setup.d/21-tacker-sdist.sh`` downloads the sdist once into the cache
  (CI starts from scratch), and :func:`driver_files` reads the script and its
  ``create_admin_token.yaml`` out of it, byte for byte. It imports ``paramiko`` and
  ``tacker``: Tacker runs it with its own Python (its venv), which has both.
* **The package.** A copy of our cluster package (``scripts/vnf_package/kubernetes_cluster``)
  whose flavours name the script as the management driver (``instantiate_end``,
  ``scale_*``, ``heal_*``, as Tacker's sample VNFD does) instead of our
  ``lccn_hook.py``, with the two files in ``Scripts/`` where the script looks for
  them. The package's ``script_path`` script is ours
  (``Scripts/install_k8s_cluster.sh``). :func:`build_and_onboard_driver_package`.
* **The request.** :func:`driver_params`: the v2 guide's ``k8s_cluster_installation_param``
  with password logins (the script knows no keys), the test user on every node.
* **The cluster's access, afterwards.** The script collects the API server's URL, its
  CA and a bearer token, then discards them: nothing reaches Tacker. To deploy a CNF on
  the cluster, an operator hands it over in the CNF's own request;
  :func:`collected_access` reads the same three from the master as the script does.
* **The hosts** (:func:`prepared_hosts`; undone on exit). The script assumes an Ubuntu
  cloud image's VM, reached at port 22 (hard-coded) with a password:
  - sshd on port 22 with password login and a sudo user: the ``k8s`` hosts have that
    already (``testhosts``, ``password=True``).
  - **sudo without a password** for that user, as the cloud image's default user has:
    the script runs ``sudo mv /tmp/tmp_hosts /etc/hosts`` with no terminal and no
    password. The line is added to the host's own ``/etc/sudoers`` (its /etc overlay).
  - **A private /etc/hosts that ``mv`` can replace.** The hosts' ``/etc/hosts`` is a
    file bind-mounted over the overlay's, and ``mv`` onto a mount point fails (EBUSY).
    The bind is removed in the host's mount namespace only, so ``/etc/hosts`` there is
    the file of the host's /etc overlay: ``mv`` writes the overlay's upper directory
    (the host's), and the machine's ``/etc/hosts`` is the lower layer, never written.
    Before anything runs, :func:`check_private_etc` makes sure the host's mount
    namespace is not ours and its ``/etc`` is that overlay.
  - **Node names ``master<octet>`` / ``worker<octet>``.** Tacker's install script sets
    the hostname so; ours takes the hostname as it is, and the driver finds, labels
    and drains nodes by those names. The hosts get them (UTS namespace), and their
    ``/etc/hosts`` names them, so sudo resolves its own host.
  - **The install script's environment.** The driver builds its own command line, so
    what ours needs on these hosts (``K8S_SKIP_PHASES=packages,cni``, the built
    version, kubeadm's preflight skipped: see ``testhosts.SCRIPT_ENV``) comes
    from ``SetEnv`` in a ``Match User`` block of each host's sshd configuration
    (reloaded with SIGHUP), with a ``PATH`` that puts two small tools first:
  - **``kubectl`` before the install.** The driver's first command on the master is
    ``kubectl get node | grep master<octet>``, and it reads ``kubectl: command not
    found`` as "not installed yet"; any other error fails it. On a real VM kubectl
    comes with the install script's packages phase, which is skipped here (the built
    tools are already on the hosts). So, for the test user, ``kubectl`` answers as
    bash does for a missing command until the install has left a kubeconfig, and is
    the real kubectl from then on.
  - **A default route.** The hosts have none, so ``kubeadm token create`` (the
    script's first command of a SCALE_OUT) warns on stderr that it found no default
    route to pick an address from, and the script fails any command of its that
    writes to stderr. Each host gets a default route on its own link (``dev eth0``, no
    gateway), so kubeadm picks the host's address, as on a VM. Nothing is routed
    anywhere: an address outside the bed's block is looked for on the bed's bridge
    and nobody answers there; the machine's own routes are untouched.
  - **``cilium status --wait``.** The driver's last step on the master. The CNI phase
    is skipped (no container runtime, no Cilium), so ``cilium`` here waits, as
    ``cilium status --wait`` does for Cilium's pods, until every node is Ready (the
    kubelet stand-in reports it), and fails after 5 minutes otherwise.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import tarfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from tests.testbed import cnf, tacker_bed, testhosts
from tests.testbed.cluster_vnf import k8s_params
from tests.testbed.testhosts import TestBed, TestHost

__all__ = [
    "DRIVER_SCRIPT",
    "build_and_onboard_driver_package",
    "check_private_etc",
    "collected_access",
    "driver_files",
    "driver_params",
    "flavours",
    "node_name",
    "prepared_hosts",
    "sdist_path",
    "with_room",
]

SAMPLE = "samples/mgmt_driver/kubernetes/sol_v2_kubernetes_vnf_package/contents/Scripts"
DRIVER_SCRIPT = "kubernetes_mgmt_v2.py"
ADMIN_TOKEN = "create_admin_token.yaml"
PACKAGE = "kubernetes_cluster"
DEFINITIONS = tacker_bed.SCRIPTS / "vnf_package" / PACKAGE / "Definitions"
FLAVOURS = ("simple", "complex")
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

_VNF_INTERFACES = """\
      # Tacker's own v2 management-driver script (its sample package's), unchanged.
      interfaces:
        Vnflcm:
          instantiate_end:
            implementation: mgmt-drivers-kubernetes
          heal_start:
            implementation: mgmt-drivers-kubernetes
          heal_end:
            implementation: mgmt-drivers-kubernetes
          scale_start:
            implementation: mgmt-drivers-kubernetes
          scale_end:
            implementation: mgmt-drivers-kubernetes
      artifacts:
        mgmt-drivers-kubernetes:
          description: Management driver for kubernetes cluster
          type: tosca.artifacts.Implementation.Python
          file: ../Scripts/kubernetes_mgmt_v2.py

"""

_KUBECTL = """#!/bin/sh
# kubectl as a VM has it before the install (see tests/testbed/tacker_driver.py):
# missing until the install has left a kubeconfig, then the real one.
if [ -z "${KUBECONFIG:-}" ] && [ ! -f "$HOME/.kube/config" ]; then
    echo "bash: line 1: kubectl: command not found" >&2
    exit 127
fi
exec /usr/local/bin/kubectl "$@"
"""

_CILIUM = """#!/bin/sh
# `cilium status --wait` where the CNI phase is skipped (see tests/testbed/tacker_driver.py):
# waits until every node is Ready, 5 minutes at most.
if [ "$*" != "status --wait" ]; then
    echo "cilium (test hosts): only 'status --wait' is known" >&2
    exit 2
fi
deadline=$(( $(date +%s) + 300 ))
jsonpath='{range .items[*]}{.metadata.name}='
jsonpath="$jsonpath"'{.status.conditions[?(@.type=="Ready")].status}{"\\n"}{end}'
while :; do
    nodes="$(kubectl get nodes -o jsonpath="$jsonpath" 2>/dev/null || true)"
    if [ -n "$nodes" ] && ! printf '%s\\n' "$nodes" | grep -qv '=True$'; then
        printf '%s\\n' "$nodes"
        echo "every node Ready"
        exit 0
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
        echo "nodes not Ready within 300 s: $nodes" >&2
        exit 1
    fi
    sleep 2
done
"""


def sdist_path() -> Path:
    """Where ``scripts/setup.d/21-tacker-sdist.sh`` keeps Tacker's sdist."""
    return tacker_bed.tacker_home() / "sdist" / f"tacker-{tacker_bed.TACKER_VERSION}.tar.gz"


def driver_files() -> dict[str, bytes]:
    """The v2 script and its admin-token manifest, as the sdist has them (package path ->
    bytes). Raises FileNotFoundError when the sdist is not cached."""
    path = sdist_path()
    if not path.is_file():
        raise FileNotFoundError(
            f"Tacker's sdist is not in {path}: run `bash scripts/setup.d/21-tacker-sdist.sh`"
        )
    prefix = f"tacker-{tacker_bed.TACKER_VERSION}/{SAMPLE}"
    out = {}
    with tarfile.open(path) as archive:
        for name in (DRIVER_SCRIPT, ADMIN_TOKEN):
            member = archive.extractfile(f"{prefix}/{name}")
            assert member is not None, name
            out[f"Scripts/{name}"] = member.read()
    return out


def _with_driver(vnfd: str) -> str:
    """A flavour's VNFD with the VNF node's interfaces (and the comment above them) set to
    Tacker's script."""
    pattern = re.compile(
        r"(?ms)^(    VNF:\n      type: [^\n]+\n      properties:\n(?:        [^\n]*\n)+)"
        r".*?(?=^    masterNode:)"
    )
    replaced, count = pattern.subn(lambda m: m.group(1) + _VNF_INTERFACES, vnfd)
    if count != 1:
        raise ValueError("the VNF node of the cluster package's flavour was not found")
    return replaced


def with_room(vnfd: str, max_workers: int) -> str:
    """A flavour's VNFD whose workers may grow to ``max_workers``: workerNode's
    ``max_number_of_instances`` and the ``workerNode_scale`` aspect's ``max_scale_level``
    (one worker a step, two at instantiation) raised to match. The package allows four
    workers, so a SCALE_OUT by 3 (``bench/vs_tacker.py``) needs it, in both packages."""
    vdu = re.compile(
        r"(?ms)(^    workerNode:\n      type: tosca\.nodes\.nfv\.Vdu\.Compute\n.*?"
        r"max_number_of_instances: )\d+"
    )
    out, count = vdu.subn(lambda m: f"{m.group(1)}{max_workers}", vnfd, count=1)
    level = re.compile(r"(?m)^(              max_scale_level: )\d+$")
    out, levels = level.subn(lambda m: f"{m.group(1)}{max_workers - 2}", out)
    if count != 1 or levels != 1:
        raise ValueError("workerNode or its scaling aspect not found in the flavour")
    return out


def _hot_with_room(hot: str, max_workers: int) -> str:
    """A flavour's base HOT whose workers' AutoScalingGroup may grow to ``max_workers``."""
    group = re.compile(
        r"(?m)(^  workerNode:\n    type: OS::Heat::AutoScalingGroup\n    properties:\n"
        r"      min_size: \d+\n      max_size: )\d+$"
    )
    out, count = group.subn(lambda m: f"{m.group(1)}{max_workers}", hot)
    if count != 1:
        raise ValueError("the workers' AutoScalingGroup not found in the base HOT")
    return out


def flavours(*, max_workers: int | None = None) -> dict[str, str]:
    """The cluster package's flavour definitions and base HOTs (path in the package ->
    text), with room for ``max_workers`` (:func:`with_room`) when given."""
    out = {}
    for flavour in FLAVOURS:
        name = f"Definitions/lccn_k8s_cluster_df_{flavour}.yaml"
        text = (DEFINITIONS.parent / name).read_text()
        out[name] = with_room(text, max_workers) if max_workers else text
        if max_workers:
            hot = f"BaseHOT/{flavour}/lccn_k8s_cluster_{flavour}.yaml"
            out[hot] = _hot_with_room((DEFINITIONS.parent / hot).read_text(), max_workers)
    return out


def build_and_onboard_driver_package(
    state: tacker_bed.BedState, *, max_workers: int | None = None
) -> str:
    """Onboard the copy of our cluster package that runs Tacker's script; its vnfdId.
    ``max_workers``: see :func:`with_room`."""
    extra: dict[str, str | bytes] = dict(driver_files())
    for name, text in flavours(max_workers=max_workers).items():
        extra[name] = _with_driver(text) if name.startswith("Definitions/") else text
    return tacker_bed.build_and_onboard(state, PACKAGE, extra=extra)


def driver_params(bed: TestBed, *, ha: bool = False) -> dict[str, Any]:
    """additionalParams for the script: the v2 guide's shape, the test user's password on
    every node, our install script as ``script_path``."""
    assert bed.user is not None and bed.password is not None, "the hosts need password login"
    return k8s_params(master_user=bed.user, worker_user=bed.user, password=bed.password, ha=ha)


def node_name(role: str, host: TestHost) -> str:
    """The name Tacker's scripts give a node: ``master<octet>`` / ``worker<octet>``."""
    return f"{role}{host.address.rsplit('.', 1)[1]}"


def collected_access(bed: TestBed, master: TestHost, *, timeout: float = 30.0) -> dict[str, str]:
    """The cluster's access data as Tacker's v2 script collects it on ``master`` (and then
    discards: it stores nothing in Tacker), for an operator to hand the cluster to Tacker.

    ``endpoint``: the master's API server (the script's ``server``, from ``kubectl
    cluster-info``); ``ssl_ca_cert``: the master's ``/etc/kubernetes/pki/ca.crt`` (which
    the install script prints and the script parses); ``bearer_token``: the token of the
    first ``default-token*`` secret of the ``default`` namespace, by name, as the script's
    ``kubectl get secret | grep '^default-token' | ... describe`` reads it: a token of
    the service account ``default``, which the script binds to ``cluster-admin``. On
    Kubernetes 1.20 the token controller fills such a secret in shortly after it is
    made; this waits up to ``timeout`` seconds for one.

    The token is returned as a :class:`~tests.testbed.cnf.Secret` (its repr hidden), never
    printed: errors name secrets, not their data.

    Raises:
        AssertionError: no such secret with a token within ``timeout``, or kubectl failed.
    """
    ca = (bed.private_dir(master, "/etc/kubernetes") / "pki" / "ca.crt").read_text()
    deadline = time.monotonic() + timeout
    while True:
        out = testhosts.admin_kubectl(bed, master, "get", "secrets", "-n", "default", "-o", "json")
        assert out.returncode == 0, f"kubectl get secrets: {out.stderr.strip()}"
        secrets = sorted(json.loads(out.stdout)["items"], key=lambda s: s["metadata"]["name"])
        names = [s["metadata"]["name"] for s in secrets]
        for secret in secrets:
            if (
                secret["metadata"]["name"].startswith("default-token")
                and secret.get("type") == "kubernetes.io/service-account-token"
                and (secret.get("data") or {}).get("token")
            ):
                try:
                    token = base64.b64decode(secret["data"]["token"], validate=True).decode()
                except (binascii.Error, UnicodeDecodeError):
                    raise AssertionError(
                        f"secret {secret['metadata']['name']}: its token is not base64 text"
                    ) from None
                return {
                    "endpoint": f"https://{master.address}:6443",
                    "ssl_ca_cert": ca,
                    "bearer_token": cnf.Secret(token),
                }
        if time.monotonic() > deadline:
            raise AssertionError(f"no default-token* secret with a token in {timeout} s: {names}")
        time.sleep(1)


def check_private_etc(host: TestHost) -> None:
    """Refuse to go on unless ``host`` has a mount namespace of its own whose /etc is the
    host's overlay: what the script writes to /etc must never reach the machine's."""
    ours = os.stat("/proc/self/ns/mnt").st_ino
    theirs = os.stat(f"/proc/{host.pid}/ns/mnt").st_ino
    if ours == theirs:
        raise RuntimeError(f"{host.name} shares this process's mount namespace")
    mounts = Path(f"/proc/{host.pid}/mountinfo").read_text().splitlines()
    etc = [m for m in mounts if m.split()[4] == "/etc" and " - overlay lccn-etc " in m]
    if not etc:
        raise RuntimeError(f"{host.name}: /etc is not the host's overlay")


def _in_host(host: TestHost, script: str) -> None:
    """Run ``script`` (sh) in the host's mount and UTS namespaces."""
    subprocess.run(
        ["nsenter", "-t", str(host.pid), "-m", "-u", "sh", "-ec", script],
        check=True,
        capture_output=True,
        timeout=60,
    )


def _reload_sshd(host: TestHost) -> None:
    """SIGHUP: sshd re-executes itself with its configuration read anew; wait until it
    listens again."""
    os.kill(host.pid, signal.SIGHUP)
    time.sleep(0.2)
    deadline = time.monotonic() + 20
    while True:
        try:
            with socket.create_connection((host.address, host.port), timeout=0.5) as sock:
                sock.settimeout(2)
                if sock.recv(64).startswith(b"SSH-"):
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"sshd of {host.name} not back after SIGHUP")
        time.sleep(0.1)


def _setenv_block(bed: TestBed, bin_dir: Path) -> str:
    assert bed.user is not None
    pairs = {"PATH": f"{bin_dir}:{SYSTEM_PATH}", **testhosts.SCRIPT_ENV}
    values = " ".join(f'"{key}={value}"' for key, value in pairs.items())
    return f"\n# tacker_driver.prepared_hosts\nMatch User {bed.user}\n    SetEnv {values}\n"


@contextlib.contextmanager
def prepared_hosts(
    bed: TestBed, masters: Sequence[TestHost], workers: Sequence[TestHost]
) -> Iterator[None]:
    """The hosts as Tacker's script expects them (see the module); undone on exit."""
    assert bed.kubernetes == "real" and bed.user is not None
    roles = [("master", h) for h in masters] + [("worker", h) for h in workers]
    for _, host in roles:
        check_private_etc(host)
    bin_dir = bed.root / "tacker-driver-bin"
    bin_dir.mkdir(exist_ok=True)
    for name, text in (("kubectl", _KUBECTL), ("cilium", _CILIUM)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    done: list[tuple[TestHost, str]] = []
    try:
        for role, host in roles:
            name = node_name(role, host)
            hosts_text = f"127.0.0.1 localhost\n127.0.1.1 {name}\n{host.address} {name}\n"
            config = bed.root / "hosts" / host.name / "sshd_config"
            original = config.read_text()
            done.append((host, original))
            _in_host(
                host,
                "umount /etc/hosts\n"
                f"printf %s {shlex.quote(hosts_text)} > /etc/hosts\n"
                f"hostname {shlex.quote(name)}\n"
                "cp -p /etc/sudoers /etc/sudoers.tacker-driver\n"
                f"echo '{bed.user} ALL=(ALL:ALL) NOPASSWD: ALL' >> /etc/sudoers\n",
            )
            config.write_text(original + _setenv_block(bed, bin_dir))
            _reload_sshd(host)
            _default_route(host, "replace")
        yield
    finally:
        for host, original in done:
            _restore(bed, host, original)
        home = bed.root / "hosts"
        for _, host in roles:  # the install's kubeconfig for the test user
            with contextlib.suppress(FileNotFoundError):
                subprocess.run(["rm", "-rf", str(home / host.name / "home" / ".kube")], check=True)


def _default_route(host: TestHost, action: str) -> None:
    """A default route on the host's own link (no gateway), as a VM has one (see the
    module): ``replace`` adds it, ``del`` takes it away."""
    subprocess.run(
        ["ip", "-n", host.namespace, "route", action, "default", "dev", "eth0"],
        check=action != "del",
        capture_output=True,
        timeout=30,
    )


def _restore(bed: TestBed, host: TestHost, sshd_config: str) -> None:
    _default_route(host, "del")
    config = bed.root / "hosts" / host.name / "sshd_config"
    config.write_text(sshd_config)
    _reload_sshd(host)
    private_hosts = bed.root / "hosts" / host.name / "hosts"
    _in_host(
        host,
        "if [ -f /etc/sudoers.tacker-driver ]; then "
        "mv /etc/sudoers.tacker-driver /etc/sudoers; fi\n"
        f"cat {shlex.quote(str(private_hosts))} > /etc/hosts\n"
        f"mount --bind {shlex.quote(str(private_hosts))} /etc/hosts\n"
        f"hostname {shlex.quote(host.name)}\n",
    )
