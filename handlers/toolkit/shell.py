"""Root shells on a cluster's nodes: one SSH executor, the job's credentials, the tools' paths.

A :class:`NodeShell` is built by a step from the job's parameters (which hold
passwords, so it lives in memory only) and handed to the toolkit's functions.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from schemas.cluster_params import PARAM_KEY, K8sClusterInstallationParams, NodeParams
from subscriber.config import ClusterSettings
from subscriber.kernel.ports import ClusterNode, CommandResult, SshExecutor, SshTarget

__all__ = ["ADMIN_CONF", "NodeShell"]

ADMIN_CONF = "/etc/kubernetes/admin.conf"

# Writes stdin to $1 with mode $2 unless it already holds exactly that; prints
# "changed" or "unchanged".
_WRITE_IF_CHANGED = r"""set -e
path=$1 mode=$2
dir=$(dirname "$path")
mkdir -p "$dir"
tmp=$(mktemp "$dir/.lccn.XXXXXX")
trap 'rm -f "$tmp"' EXIT
chmod "$mode" "$tmp"
cat > "$tmp"
if [ -f "$path" ] && cmp -s "$tmp" "$path" && [ "$(stat -c %a "$path")" = "$mode" ]; then
  echo unchanged
else
  mv -f "$tmp" "$path"
  echo changed
fi
"""


@dataclass(frozen=True, slots=True)
class NodeShell:
    """Runs commands as root on the nodes of one cluster.

    Arguments:
        ssh: the executor (pooled asyncssh in ``serve``).
        settings: the ``cluster`` settings (tool paths, timeouts, script env).
        params: the operation's parameters: each node group's login.
    """

    ssh: SshExecutor
    settings: ClusterSettings
    params: K8sClusterInstallationParams = field(repr=False)

    def group(self, node: ClusterNode) -> NodeParams:
        return self.params.master_node if node.role == "master" else self.params.worker_node

    def target(self, node: ClusterNode) -> SshTarget:
        """How to log in to ``node`` (its group's user, password or key, port)."""
        p = self.group(node)
        return SshTarget(
            host=node.ssh_ip,
            username=p.username,
            port=p.ssh_port,
            password=p.password,
            client_keys=(p.ssh_private_key_path,) if p.ssh_private_key_path else (),
            known_hosts=p.known_hosts,
            origin=f"{PARAM_KEY}.{'master_node' if node.role == 'master' else 'worker_node'}",
        )

    async def run(
        self,
        node: ClusterNode,
        command: str,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - the remote command's limit
        env: Mapping[str, str] | None = None,
        input: str | None = None,
        secrets: Sequence[str] = (),
    ) -> CommandResult:
        """Run ``command`` as root (sudo) on ``node``; the result whatever its exit status.

        Arguments:
            timeout: the remote command's limit (default ``kubectl_timeout``).
            env: variables exported for the command (never on its command line).
            input: text on the command's stdin.
            secrets: values masked in every message and log line about it.
        """
        return await self.ssh.run(
            self.target(node),
            command,
            sudo=True,
            command_timeout=timeout or self.settings.kubectl_timeout,
            env=env,
            input=input,
            secrets=secrets,
        )

    async def write_file(
        self,
        node: ClusterNode,
        path: str,
        content: str,
        mode: str,
        *,
        secrets: Sequence[str] = (),
        step: str | None = None,
    ) -> bool:
        """Write ``content`` (over stdin, never argv) to ``path`` on ``node`` with ``mode``
        (octal, e.g. ``"600"``), unless it already holds exactly that; ``True`` if it changed.

        The temporary file sits beside the target (an atomic rename) and starts with a
        dot, which apt, systemd and containerd all ignore.

        Raises:
            CommandFailed: the write failed on the node (``secrets`` masked).
        """
        command = f"bash -c {shlex.quote(_WRITE_IF_CHANGED)} write {shlex.quote(path)} {mode}"
        result = await self.run(node, command, input=content, secrets=secrets)
        return result.check(step=step).stdout.strip().splitlines()[-1:] == ["changed"]

    def kubectl(self, args: str) -> str:
        """A kubectl command line using the admin kubeconfig (works as root on any master)."""
        return f"{shlex.quote(self.settings.kubectl)} --kubeconfig {ADMIN_CONF} {args}"

    def kubeadm(self, args: str) -> str:
        return f"{shlex.quote(self.settings.kubeadm)} {args}"
