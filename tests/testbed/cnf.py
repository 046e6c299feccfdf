"""The sample CNF (VNF-B) and what Tacker's v1 and v2 APIs need to deploy it on a cluster.

The package is ``scripts/vnf_package/cnf_deployment``: one Deployment, ``lccn-web``, of
two replicas, which Tacker's Kubernetes infra driver (v1 or v2) creates from
``additionalParams["lcm-kubernetes-def-files"]``. The demo (``scripts/demo.py --api v1
--cnf``) deploys it on the cluster ``serve`` built, and ``tests/k8s/test_tacker_driver.py``
on the clusters Tacker's own management drivers built; both take from here:

* :func:`build_and_onboard`: the package as it is (v2), or its v1 copy
  (:func:`v1_flavour`: Tacker 16.0.0's v1 needs ``requirements`` in the flavour's
  ``substitution_mappings``);
* :func:`v1_instantiate_request` (a registered Kubernetes VIM, by id) and
  :func:`v2_instantiate_request` (a ``vimConnectionInfo`` entry that carries the
  cluster's access: :func:`v2_kubernetes_entry`, its token a :class:`Secret`);
* :func:`deployment`: the Deployment as the cluster's API server has it, read with the
  master's admin kubeconfig.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from tests.testbed import tacker_bed, testhosts
from tests.testbed.masked import Secret
from tests.testbed.testhosts import TestBed, TestHost

__all__ = [
    "DEPLOYMENT",
    "FILES",
    "NAMESPACE",
    "PACKAGE",
    "REPLICAS",
    "Secret",
    "build_and_onboard",
    "deployment",
    "v1_flavour",
    "v1_instantiate_request",
    "v2_instantiate_request",
    "v2_kubernetes_entry",
]

PACKAGE = "cnf_deployment"  # scripts/vnf_package/
FILES = ["Files/kubernetes/deployment.yaml"]
DEPLOYMENT = "lccn-web"  # its metadata.name (and the VDU's properties.name)
REPLICAS = 2
NAMESPACE = "default"
FLAVOUR = "Definitions/lccn_cnf_df_simple.yaml"
_MAPPED = "    properties:\n      flavour_id: simple\n"


def v1_flavour() -> dict[str, str]:
    """The sample CNF's flavour as v1 reads it (path in the package -> text).

    Tacker 16.0.0's v1 pops ``requirements`` from the flavour's ``substitution_mappings``
    unconditionally (``tacker/vnflcm/utils.py::_get_vnfd_dict``; a KeyError without it,
    and the INSTANTIATE is ROLLED_BACK at the grant), so the v1 copy maps the external
    virtual link as Tacker's v1 CNF samples do. The package's own (v2's) stays as it is.

    Raises:
        ValueError: the flavour has no ``substitution_mappings`` properties to extend.
    """
    text = (tacker_bed.SCRIPTS / "vnf_package" / PACKAGE / FLAVOUR).read_text()
    if _MAPPED not in text:
        raise ValueError(f"{FLAVOUR}: no substitution_mappings properties to extend")
    extended = _MAPPED + "    requirements:\n      virtual_link_external: []\n"
    return {FLAVOUR: text.replace(_MAPPED, extended)}


def build_and_onboard(state: tacker_bed.BedState, *, api: str = "v2") -> str:
    """Onboard the sample CNF on ``state``'s Tacker, ``api``'s copy (``v1`` or ``v2``);
    its vnfdId."""
    if api not in ("v1", "v2"):
        raise ValueError(f"api: v1 or v2, not {api!r}")
    extra: dict[str, str | bytes] = {}
    if api == "v1":
        extra.update(v1_flavour())
    return tacker_bed.build_and_onboard(state, PACKAGE, extra=extra or None)


def _params() -> dict[str, Any]:
    return {"lcm-kubernetes-def-files": FILES, "namespace": NAMESPACE}


def v1_instantiate_request(vim_id: str) -> dict[str, Any]:
    """A v1 INSTANTIATE of the CNF on the registered Kubernetes VIM ``vim_id``, as a v1
    user writes it (``vimConnectionInfo: [{id, vimId, vimType: kubernetes}]``): Tacker
    takes the endpoint, CA and token from the VIM."""
    return {
        "flavourId": "simple",
        "vimConnectionInfo": [
            {"id": f"k8s-{vim_id[:8]}", "vimId": vim_id, "vimType": "kubernetes"}
        ],
        "additionalParams": _params(),
    }


def v2_kubernetes_entry(endpoint: str, ssl_ca_cert: str, bearer_token: str) -> dict[str, Any]:
    """A v2 ``vimConnectionInfo`` entry that hands a cluster to Tacker, as an operator
    writes it (vimType ``kubernetes``, which Tacker reads as ``ETSINFV.KUBERNETES.V_1``):
    the API server's URL and CA, and a bearer token (kept a :class:`Secret`)."""
    return {
        "vimId": str(uuid.uuid4()),
        "vimType": "kubernetes",
        "interfaceInfo": {"endpoint": endpoint, "ssl_ca_cert": ssl_ca_cert},
        "accessInfo": {"bearer_token": Secret(bearer_token)},
    }


def v2_instantiate_request(entry: dict[str, Any], *, key: str = "vim1") -> dict[str, Any]:
    """A v2 INSTANTIATE of the CNF on the cluster of ``entry`` (:func:`v2_kubernetes_entry`,
    or the one ``serve`` wrote back), under ``key``.

    ``vimConnectionInfo`` comes first: a traceback shows a long argument's head and tail
    only (its JSON bytes, deep in ``http.client``, are not a :class:`Secret`), and the
    token then sits between the CA and the parameters, in neither."""
    return {
        "vimConnectionInfo": {key: entry},
        "flavourId": "simple",
        "additionalParams": _params(),
    }


def deployment(bed: TestBed, master: TestHost) -> dict[str, Any] | None:
    """The CNF's Deployment as ``master``'s API server has it (the real kubectl with the
    master's ``admin.conf``, from this process), or ``None`` when there is none.

    Raises:
        RuntimeError: kubectl failed otherwise (its stderr in the message).
    """
    out = testhosts.admin_kubectl(
        bed, master, "get", "deployment", DEPLOYMENT, "-n", NAMESPACE, "-o", "json"
    )
    if out.returncode != 0:
        if "NotFound" in out.stderr:
            return None
        raise RuntimeError(f"kubectl get deployment {DEPLOYMENT}: {out.stderr.strip()}")
    return json.loads(out.stdout)  # type: ignore[no-any-return]
