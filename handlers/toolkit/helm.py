"""The user's Helm installation script (``helm_installation_script_path``) on the masters.

Tacker's v1 driver copies ``install_helm.sh`` from the VNF package to
``/tmp/install_helm.sh`` on each master and runs it (TACKER.md §1.6,
``HELM_INSTALL_TIMEOUT`` 300 s). We read the script from the package Tacker
holds (:meth:`~subscriber.kernel.ports.TackerApi.vnf_package_content`: the
package of the instance's ``vnfdId``), upload it and run it as root with
``cluster.script_env``, ``KUBECONFIG`` set to the admin kubeconfig and the
cluster's proxy in its environment (over stdin, masked in every message).

A user's script is not known to be safe to run twice, so each master records
its success in :data:`MARKER` (the script's sha256): a master whose marker names
this script is skipped, one whose marker names another script (a new package)
runs it again. The step that wraps this is not idempotent: a run cut off midway
is not repeated blindly.
"""

from __future__ import annotations

import hashlib
import shlex

from handlers.toolkit.proxy import environment, proxy_secrets
from handlers.toolkit.shell import ADMIN_CONF, NodeShell
from handlers.toolkit.topology import Topology
from subscriber.errors import CommandFailed, PermanentStepError
from subscriber.kernel.ports import ClusterNode

__all__ = [
    "MARKER",
    "REMOTE_HELM_SCRIPT",
    "installed",
    "run_helm_script",
    "script_digest",
]

REMOTE_HELM_SCRIPT = "/tmp/install_helm.sh"
MARKER = "/var/lib/lccn-subscriber/helm-installed"
_MARK = r"""set -e
mkdir -p "$(dirname "$1")"
printf '%s\n' "$2" > "$1"
"""


def script_digest(script: bytes) -> str:
    return hashlib.sha256(script).hexdigest()


async def installed(shell: NodeShell, node: ClusterNode, digest: str) -> bool:
    """Whether this script (by digest) already succeeded on ``node``."""
    result = await shell.run(node, f"cat {MARKER}")
    return result.ok and result.stdout.strip() == digest


async def run_helm_script(
    shell: NodeShell,
    topo: Topology,
    node: ClusterNode,
    script: bytes,
    *,
    path: str,
    step: str | None = None,
) -> None:
    """Upload ``script`` to ``node`` and run it as root; record its success on the node.

    Arguments:
        path: the script's path in the package (named in the error).

    Raises:
        PermanentStepError: the script failed (its exit status and stderr tail,
            masked); SshError: no connection.
    """
    await shell.ssh.upload(shell.target(node), script, REMOTE_HELM_SCRIPT, mode=0o755)
    env = {
        **shell.settings.script_env,
        "KUBECONFIG": ADMIN_CONF,
        **environment(shell.params, topo),
    }
    result = await shell.run(
        node,
        f"bash {REMOTE_HELM_SCRIPT}",
        timeout=shell.settings.helm_timeout,
        env=env,
        secrets=proxy_secrets(shell.params),
    )
    if not result.ok:
        status = (
            f"signal {result.exit_signal}" if result.exit_signal else f"exit {result.exit_status}"
        )
        tail = (result.stderr.strip() or result.stdout.strip())[-800:]
        raise PermanentStepError(
            f"the Helm installation script {path} failed on {node.name} ({status})"
            + (f": {result.redacted(tail)}" if tail else ""),
            step=step,
        )
    marker = await shell.run(
        node,
        f"sh -c {shlex.quote(_MARK)} mark {MARKER} {script_digest(script)}",
    )
    try:
        marker.check(step=step)
    except CommandFailed as exc:
        raise PermanentStepError(
            f"the Helm installation script {path} succeeded on {node.name} but its "
            f"completion could not be recorded: {exc}",
            step=step,
        ) from None
