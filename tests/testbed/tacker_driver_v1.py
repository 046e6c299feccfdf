"""Tacker 16.0.0's own v1 Kubernetes management driver ("K1"), unchanged, on the test bed.

K1 is the class ``KubernetesMgmtDriver`` of ``samples/mgmt_driver/kubernetes/
kubernetes_mgmt.py`` in Tacker's sdist: the driver ``lccn-subscriber`` replaces for
Tacker's v1 API. Unlike the v2 script (:mod:`tests.testbed.tacker_driver`), which Tacker
runs as a program out of the VNF package, K1 is a class Tacker's conductor imports and
calls in its own process. What had to be prepared for it, and why:

* **The driver in Tacker's venv.** Tacker loads v1 management drivers by entry point
  (group ``tacker.tacker.mgmt.drivers``) among those ``[tacker] vnflcm_mgmt_driver``
  names, keyed by the driver's ``get_type()`` (``mgmt-drivers-kubernetes``). The sample
  is no module of the installed ``tacker``, so ``scripts/setup.d/22-tacker-k1.sh`` builds
  a tiny wheel ``lccn-tacker-k1`` in the cache holding K1 byte for byte and installs it
  there; Tacker is not changed and none of its files is in this repository. K1 uploads
  ``create_admin_token.yaml`` from ``<its module dir>/../../../samples/mgmt_driver/
  kubernetes/``: the wheel's layout (``lccn_tacker_k1/samples/mgmt_driver/kubernetes/``)
  puts the sdist's file exactly there.
* **A Tacker of its own** (``tacker_bed.start(k1=True)``). Its tacker.conf names
  ``vnflcm_noop,mgmt-drivers-kubernetes`` (a VNFD that names no driver keeps the
  no-op). K1 calls ``eventlet.monkey_patch()`` in the process that runs it, the
  conductor; Tacker 16.0.0's conductor runs oslo.service's threading backend, and
  patched at that moment it hangs K1's first SSH command (the transport's native
  thread never wakes the channel's now-green event; K1's 30 s ``eventlet.Timeout``
  fires) and is left broken for every later operation. So the K1 bed's conductor is
  Tacker's own, started eventlet-patched on oslo.service's eventlet backend, and the
  run's shared bed (threading, as Tacker ships it) never loads K1. The VIM K1 registers
  is a Kubernetes VIM, whose Fernet key Tacker keeps in Barbican only (``[k8s_vim]
  use_barbican``, on by default): every bed already has the simulated Keystone and
  Barbican and ``[keystone_authtoken]``'s service user for it
  (``tests/testbed/openstack_sim/barbican.py``).
* **The package** (:func:`build_and_onboard_k1_package`). A copy of our v1 package
  (``scripts/vnf_package/kubernetes_cluster_v1``: BaseHOT, user data) whose VNF node names
  K1 for ``instantiate_end``, ``terminate_end``, ``heal_*`` and ``scale_*``, as Tacker's
  sample VNFD does, with the artifact ``Scripts/kubernetes_mgmt.py``: the installed
  module's bytes, since Tacker compares the SHA-256 of the package's file with the
  loaded driver's file before each call and refuses a mismatch. TOSCA.meta lists it with
  its hash (the sample's hashes are stale; ours are computed). ``script_path`` is our
  ``install_k8s_cluster.sh``, as in the v2 copy.
* **The request** (:func:`k1_params`): the v1 guide's ``k8s_cluster_installation_param``
  (``aspect_id`` per node group: K1 reads the nodes' addresses from the Heat members of
  the AutoScalingGroup of that name) with password logins: K1 knows no keys.
* **The simulated Heat.** For each worker, K1 reads the member stack's
  ``OS::Nova::Server`` and intersects its ``server_groups`` attribute with the stack's
  anti-affinity groups; real Heat always gives that attribute (a list), the simulator
  did not (K1 then fails on ``set(None)``), so it now does.
* **The hosts** are those of the v2 script (:func:`tests.testbed.tacker_driver.
  prepared_hosts`): K1 has the same traps (port 22 with a password, ``sudo`` without one,
  a private ``/etc/hosts`` that ``sudo mv`` replaces, ``master<octet>``/``worker<octet>``
  names, ``kubectl: command not found`` before the install, a default route for
  ``kubeadm init phase upload-certs``, our script's environment from ``SetEnv``).
  K1 also reads the first line of ``kubectl get node | grep master<octet>``'s stderr
  before it looks at the exit code, so that check only works while kubectl is missing
  (a fresh host): the kubectl stand-in says so on stderr.
* **Time.** After ``kubectl create -f create_admin_token.yaml`` (the ``admin`` service
  account of kube-system, cluster-admin) K1 sleeps 30 s, then reads the token of the
  ``admin-token-*`` secret the token controller made for it (Kubernetes 1.20 still
  makes one per service account).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

from tests.testbed import tacker_bed
from tests.testbed.cluster_vnf import v1_params
from tests.testbed.testhosts import TestBed

__all__ = [
    "K1_MODULE",
    "build_and_onboard_k1_package",
    "installed_k1",
    "k1_files",
    "k1_params",
    "with_k1",
]

PACKAGE = "kubernetes_cluster_v1"
SOURCES = tacker_bed.SCRIPTS / "vnf_package" / PACKAGE
K1_MODULE = "lccn_tacker_k1/samples/mgmt_driver/kubernetes/kubernetes_mgmt.py"
ARTIFACT = "Scripts/kubernetes_mgmt.py"
FLAVOURS = ("simple", "complex")

_VNF_INTERFACES = f"""\
      # Tacker's own v1 management driver (its sample's KubernetesMgmtDriver), unchanged.
      interfaces:
        Vnflcm:
          instantiate_end:
            implementation: {tacker_bed.K1_DRIVER}
          terminate_end:
            implementation: {tacker_bed.K1_DRIVER}
          heal_start:
            implementation: {tacker_bed.K1_DRIVER}
          heal_end:
            implementation: {tacker_bed.K1_DRIVER}
          scale_start:
            implementation: {tacker_bed.K1_DRIVER}
          scale_end:
            implementation: {tacker_bed.K1_DRIVER}
      artifacts:
        {tacker_bed.K1_DRIVER}:
          description: Management driver for kubernetes cluster
          type: tosca.artifacts.Implementation.Python
          file: {ARTIFACT}
"""

_META_ENTRY = f"""
Name: {ARTIFACT}
Content-Type: text/x-python
Algorithm: SHA-256
Hash: @SHA256@
"""


def installed_k1() -> Path:
    """K1's module file in Tacker's venv. Raises FileNotFoundError when
    ``scripts/setup.d/22-tacker-k1.sh`` has not installed it."""
    found = sorted(tacker_bed.tacker_venv().glob(f"lib/python3*/site-packages/{K1_MODULE}"))
    if not found or not tacker_bed.k1_installed():
        raise FileNotFoundError(
            "Tacker's v1 Kubernetes driver is not in Tacker's venv: run "
            "`bash scripts/setup.d/22-tacker-k1.sh`"
        )
    return found[0]


def k1_files() -> dict[str, bytes]:
    """The package's artifact: the installed module, byte for byte (package path -> bytes)."""
    return {ARTIFACT: installed_k1().read_bytes()}


def with_k1(vnfd: str) -> str:
    """A v1 flavour's VNFD whose VNF node's interfaces (and the comment above them) name K1."""
    pattern = re.compile(
        r"(?m)^      # No Mgmt Driver[^\n]*\n      interfaces:\n        Vnflcm: \{\}\n"
    )
    replaced, count = pattern.subn(lambda _: _VNF_INTERFACES, vnfd)
    if count != 1:
        raise ValueError("the VNF node's empty Vnflcm interface not found in the v1 flavour")
    return replaced


def _tosca_meta(files: dict[str, bytes]) -> str:
    """The package's TOSCA.meta with K1's entry added and every ``@SHA256@`` computed from
    the file the entry names (``files`` first, then the package's sources)."""
    meta = (SOURCES / "TOSCA-Metadata" / "TOSCA.meta").read_text().rstrip("\n") + "\n"
    meta += _META_ENTRY

    def entry(match: re.Match[str]) -> str:
        block = match.group(0)
        if "@SHA256@" not in block:
            return block
        name = re.search(r"^Name: *(\S+)", block, re.MULTILINE)
        assert name is not None, block
        data = files.get(name.group(1))
        if data is None:
            data = (SOURCES / name.group(1)).read_bytes()  # follows the script's symlink
        return block.replace("@SHA256@", hashlib.sha256(data).hexdigest())

    return re.sub(r"(?:^[^\n]+\n?)+", entry, meta, flags=re.MULTILINE)


def build_and_onboard_k1_package(state: tacker_bed.BedState) -> str:
    """Onboard the copy of our v1 package whose management driver is K1; its vnfdId."""
    files = k1_files()
    extra: dict[str, str | bytes] = dict(files)
    for flavour in FLAVOURS:
        name = f"Definitions/lccn_k8s_v1_df_{flavour}.yaml"
        extra[name] = with_k1((SOURCES / name).read_text())
    extra["TOSCA-Metadata/TOSCA.meta"] = _tosca_meta(files)
    return tacker_bed.build_and_onboard(state, PACKAGE, extra=extra)


def k1_params(bed: TestBed) -> dict[str, Any]:
    """additionalParams for K1: the v1 guide's shape, the test user and its password on
    every node (K1 logs in with a password only), our install script as ``script_path``."""
    assert bed.user is not None and bed.password is not None, "the hosts need password login"
    return v1_params(master_user=bed.user, worker_user=bed.user, password=bed.password)
