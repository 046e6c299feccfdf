"""Tacker's own Kubernetes client, run in Tacker's venv: what a Tacker Kubernetes VIM can do.

    <tacker venv>/bin/python tests/k8s/tacker_k8s_client.py < request.json

The request (on stdin, so the bearer token is never on a command line) is
``{"vim": <a vimConnectionInfo entry>, "deployment": "<namespace>/<name>" | null}``.
The API client is made by Tacker 16.0.0's ``AuthContextManager.init_k8s_api_client``
(the ``kubernetes`` package of Tacker's venv, the CA written to a file as Tacker
writes it), exactly as its v2 Kubernetes infra driver makes it. Prints one JSON
object: ``nodes`` (name -> Ready), ``deployment`` (its replicas and readyReplicas,
or null when it does not exist), or ``error`` (the API's status and reason).
Standard library and Tacker's venv only.
"""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace
from typing import Any


def main() -> int:
    request = json.load(sys.stdin)
    from kubernetes import client
    from tacker.sol_refactored.infra_drivers.kubernetes import kubernetes_utils

    vim = request["vim"]
    vim_info = SimpleNamespace(
        interfaceInfo=vim.get("interfaceInfo") or {}, accessInfo=vim.get("accessInfo") or {}
    )
    out: dict[str, Any] = {}
    try:
        with kubernetes_utils.AuthContextManager(vim_info) as acm:
            api = acm.init_k8s_api_client()
            out["verify_ssl"] = api.configuration.verify_ssl
            nodes = client.CoreV1Api(api_client=api).list_node().items
            out["nodes"] = {
                n.metadata.name: any(
                    c.type == "Ready" and c.status == "True" for c in n.status.conditions or []
                )
                for n in nodes
            }
            if request.get("deployment"):
                namespace, name = request["deployment"].split("/", 1)
                try:
                    d = client.AppsV1Api(api_client=api).read_namespaced_deployment(name, namespace)
                    out["deployment"] = {
                        "replicas": d.status.replicas,
                        "readyReplicas": d.status.ready_replicas,
                    }
                except client.ApiException as exc:
                    if exc.status != 404:
                        raise
                    out["deployment"] = None
    except client.ApiException as exc:
        out["error"] = {"status": exc.status, "reason": exc.reason}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
