"""kubectl on a master: nodes (membership, labels, drain, delete) and the VIM's access token.

Every function runs kubectl as root on the master ``via`` with the admin
kubeconfig, and is convergent: labelling twice, deleting a node that is gone or
draining a drained node succeeds without changing anything.
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
import shlex
import time
from collections.abc import Mapping

from handlers.toolkit.hosts import REMOTE_TOKEN_YAML
from handlers.toolkit.shell import NodeShell
from subscriber.errors import PermanentStepError, TransientStepError
from subscriber.kernel.ports import ClusterNode

__all__ = [
    "CA_CERT",
    "TOKEN_NAMESPACE",
    "TOKEN_SECRET",
    "delete_node",
    "drain_node",
    "ensure_admin_token",
    "is_control_plane",
    "is_member",
    "label_node",
    "node_names",
    "read_access",
    "read_bearer_token",
]

TOKEN_SECRET = "default-token-k8svim"  # Tacker's v2 sample create_admin_token.yaml
TOKEN_NAMESPACE = "default"
_ADMIN_BINDING = "lccn-k8svim-admin"
CA_CERT = "/etc/kubernetes/pki/ca.crt"


async def node_names(shell: NodeShell, via: ClusterNode, *, step: str | None = None) -> set[str]:
    """The names of the cluster's Node objects, as ``via`` sees them.

    Raises:
        CommandFailed: kubectl failed (API server down, no kubeconfig).
    """
    result = await shell.run(via, shell.kubectl("get nodes -o name"))
    lines = result.check(step=step).stdout.split()
    return {line.removeprefix("node/") for line in lines if line.strip()}


async def is_member(shell: NodeShell, via: ClusterNode, name: str) -> bool:
    """Whether a Node called ``name`` exists (asked on ``via``)."""
    result = await shell.run(via, shell.kubectl(f"get node {shlex.quote(name)} -o name"))
    return result.ok


async def is_control_plane(shell: NodeShell, via: ClusterNode, name: str) -> bool:
    """Whether Node ``name`` carries a control-plane role label (``master`` on old clusters)."""
    result = await shell.run(via, shell.kubectl(f"get node {shlex.quote(name)} -o json"))
    if not result.ok:
        return False
    try:
        labels = json.loads(result.stdout).get("metadata", {}).get("labels", {}) or {}
    except ValueError:
        return False
    return any(
        key in labels
        for key in ("node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master")
    )


async def label_node(
    shell: NodeShell,
    via: ClusterNode,
    name: str,
    labels: Mapping[str, str | None],
    *,
    step: str | None = None,
) -> None:
    """Set (value) or remove (``None``) labels of Node ``name``, overwriting other values.

    Raises:
        CommandFailed: no such node, or kubectl failed.
    """
    if not labels:
        return
    items = [f"{k}={v}" if v is not None else f"{k}-" for k, v in sorted(labels.items())]
    args = " ".join(shlex.quote(i) for i in items)
    result = await shell.run(
        via, shell.kubectl(f"label nodes {shlex.quote(name)} {args} --overwrite")
    )
    result.check(step=step)


async def drain_node(
    shell: NodeShell,
    via: ClusterNode,
    name: str,
    *,
    timeout: float = 120.0,  # noqa: ASYNC109 - kubectl's own --timeout
    step: str | None = None,
) -> bool:
    """Cordon Node ``name`` and evict its pods (DaemonSets' are left, as Tacker does).

    Returns:
        False when there is no such node (nothing to drain), else True.

    Raises:
        CommandFailed: the drain did not finish within ``timeout``.
    """
    if not await is_member(shell, via, name):
        return False
    command = shell.kubectl(
        f"drain {shlex.quote(name)} --ignore-daemonsets --delete-emptydir-data --force "
        f"--timeout={int(timeout)}s"
    )
    result = await shell.run(via, command, timeout=timeout + 30.0)
    result.check(step=step)
    return True


async def delete_node(
    shell: NodeShell, via: ClusterNode, name: str, *, step: str | None = None
) -> bool:
    """Delete Node ``name``; False when it was already gone.

    Raises:
        CommandFailed: kubectl failed for another reason.
    """
    if not await is_member(shell, via, name):
        return False
    result = await shell.run(via, shell.kubectl(f"delete node {shlex.quote(name)}"))
    if not result.ok and "NotFound" in result.stderr:
        return False  # deleted by someone else meanwhile
    result.check(step=step)
    return True


# Creates the cluster-admin binding and the Secret unless the Secret exists (one
# command); "AlreadyExists" of either is not an error (a run cut off midway).
_ADMIN_TOKEN = r"""set -e
if {get} >/dev/null 2>&1; then echo exists; exit 0; fi
create() {{
  if ! out=$("$@" 2>&1); then
    case "$out" in *AlreadyExists*) ;; *) printf '%s\n' "$out" >&2; exit 1 ;; esac
  fi
}}
create {binding}
create {secret}
echo created
"""


async def ensure_admin_token(
    shell: NodeShell, via: ClusterNode, *, step: str | None = None
) -> bool:
    """Create the VIM's service-account-token Secret (and its cluster-admin binding).

    Tacker's v2 approach (TACKER.md §1.7): ``create_admin_token.yaml``, uploaded
    by :func:`~handlers.toolkit.hosts.upload_scripts`, is a
    ``kubernetes.io/service-account-token`` Secret of SA ``default``. The check
    and both creations are one command on ``via``.

    Returns:
        False when the Secret already existed (nothing created).

    Raises:
        CommandFailed: a creation failed for another reason than AlreadyExists.
    """
    script = _ADMIN_TOKEN.format(
        get=shell.kubectl(f"get secret {TOKEN_SECRET} -n {TOKEN_NAMESPACE} -o name"),
        binding=shell.kubectl(
            f"create clusterrolebinding {_ADMIN_BINDING} --clusterrole cluster-admin "
            f"--serviceaccount {TOKEN_NAMESPACE}:default"
        ),
        secret=shell.kubectl(f"create -f {REMOTE_TOKEN_YAML}"),
    )
    result = await shell.run(via, f"bash -c {shlex.quote(script)}")
    return result.check(step=step).stdout.strip().splitlines()[-1:] == ["created"]


# The CA, and the token once the token controller filled the Secret, polled on the
# node itself (no SSH round trip per poll) until WAIT seconds passed; the token line
# comes first, the CA file after it unchanged.
_ACCESS = r"""set -e
cat {ca} >/dev/null
end=$((SECONDS + WAIT))
while :; do
  token=$({get} 2>/dev/null) || token=
  if [ -n "$token" ] || [ "$SECONDS" -ge "$end" ]; then break; fi
  sleep 0.2
done
printf 'token:%s\n' "$token"
cat {ca}
"""


async def read_access(
    shell: NodeShell, master: ClusterNode, *, wait: float, step: str | None = None
) -> tuple[str, str]:
    """The cluster CA certificate (PEM) and the VIM's bearer token (a secret), from
    ``master`` in one command that waits up to ``wait`` s for the token controller.

    Raises:
        CommandFailed: the CA is unreadable.
        PermanentStepError: the CA is not a PEM certificate, or the Secret holds
            something that is not base64.
        TransientStepError: the Secret has no token yet after ``wait`` seconds.
    """
    script = _ACCESS.format(
        ca=shlex.quote(CA_CERT),
        get=shell.kubectl(
            f"get secret {TOKEN_SECRET} -n {TOKEN_NAMESPACE} -o jsonpath='{{.data.token}}'"
        ),
    )
    result = await shell.run(
        master,
        f"bash -c {shlex.quote(script)}",
        env={"WAIT": str(math.ceil(wait))},
        timeout=wait + shell.settings.kubectl_timeout,
    )
    first, _, pem = result.check(step=step).stdout.partition("\n")
    if "BEGIN CERTIFICATE" not in pem:
        raise PermanentStepError(f"{master.name}'s {CA_CERT} is no PEM", step=step)
    encoded = first.removeprefix("token:").strip() if first.startswith("token:") else ""
    if not encoded:
        raise TransientStepError(f"Secret {TOKEN_SECRET} has no token after {wait:g}s", step=step)
    return pem, _decoded(encoded, step)


def _decoded(encoded: str, step: str | None) -> str:
    try:
        return base64.b64decode(encoded, validate=True).decode()
    except ValueError:
        raise PermanentStepError(f"Secret {TOKEN_SECRET} holds no valid token", step=step) from None


async def read_bearer_token(
    shell: NodeShell,
    via: ClusterNode,
    *,
    wait: float,
    step: str | None = None,
) -> str:
    """The VIM's bearer token (a secret), waiting up to ``wait`` s for the token controller.

    Raises:
        TransientStepError: the Secret has no token yet after ``wait`` seconds.
        PermanentStepError: the Secret holds something that is not base64.
    """
    deadline = time.monotonic() + wait
    command = shell.kubectl(
        f"get secret {TOKEN_SECRET} -n {TOKEN_NAMESPACE} -o jsonpath='{{.data.token}}'"
    )
    while True:
        result = await shell.run(via, command)
        encoded = result.stdout.strip() if result.ok else ""
        if encoded:
            return _decoded(encoded, step)
        if time.monotonic() >= deadline:
            raise TransientStepError(
                f"Secret {TOKEN_SECRET} has no token after {wait:g}s", step=step
            )
        await asyncio.sleep(1.0)  # polling the API server: no event to wait on over SSH
