"""Files on the nodes: the node-side scripts, the hostname and the ``/etc/hosts`` block.

Every node's ``/etc/hosts`` carries one block between two marker lines naming
every node of the cluster (Tacker's driver appends lines with ``sed``; a block
we rewrite whole is convergent: running it twice, or after a node left, gives
the same file). Lines outside the block that name one of our nodes are dropped,
so an old address of a healed or renamed node cannot linger.
"""

from __future__ import annotations

import asyncio
import shlex
from collections.abc import Sequence
from importlib import resources

from handlers.toolkit.shell import NodeShell
from handlers.toolkit.topology import checked_node_name, ip_address_of
from subscriber.config import ClusterSettings
from subscriber.errors import ConfigError
from subscriber.kernel.ports import ClusterNode

__all__ = [
    "HOSTS_BEGIN",
    "HOSTS_END",
    "NODE_FILES",
    "REMOTE_SCRIPT",
    "REMOTE_TOKEN_YAML",
    "hosts_block",
    "node_file",
    "upload_scripts",
    "write_hosts",
]

REMOTE_SCRIPT = "/tmp/install_k8s_cluster.sh"
REMOTE_TOKEN_YAML = "/tmp/create_admin_token.yaml"
HOSTS_BEGIN = "# lccn-subscriber nodes begin"
HOSTS_END = "# lccn-subscriber nodes end"
# Keeps every line outside our block whose name is not one of ours, then appends the block.
_HOSTS_SCRIPT = r"""set -e
[ "$(hostname)" = "$1" ] || hostname "$1"
shift
tmp=$(mktemp)
awk -v names="$*" -v b="$BEGIN" -v e="$END" '
  BEGIN { n = split(names, a, " "); for (i = 1; i <= n; i++) ours[a[i]] = 1 }
  $0 == b { inside = 1; next }
  $0 == e { inside = 0; next }
  inside { next }
  !($2 in ours) { print }
' /etc/hosts > "$tmp"
cat >> "$tmp"
cat "$tmp" > /etc/hosts
rm -f "$tmp"
"""


NODE_FILES = ("install_k8s_cluster.sh", "create_admin_token.yaml")


def node_file(settings: ClusterSettings, name: str) -> bytes:
    """A node-side file: from ``cluster.scripts_dir`` when set, else the one shipped
    in the package (:mod:`handlers.toolkit.node`, package data of the wheel).

    Raises:
        ConfigError: ``cluster.scripts_dir`` lacks it.
    """
    if settings.scripts_dir is not None:
        path = settings.scripts_dir / name
        try:
            return path.read_bytes()
        except OSError as exc:
            raise ConfigError(f"cluster.scripts_dir: {path}: {exc.strerror or exc}") from exc
    return resources.files("handlers.toolkit.node").joinpath(name).read_bytes()


async def upload_scripts(
    shell: NodeShell, nodes: Sequence[ClusterNode], script: bytes | None = None
) -> None:
    """Put ``install_k8s_cluster.sh`` in /tmp of each node, and ``create_admin_token.yaml``
    in /tmp of each master (the admin token is made on a master; Tacker's drivers put it
    on workers too, where nothing reads it: an SFTP session a worker less).

    Every upload runs at once (a master's two files over its one connection).
    Convergent: an upload replaces the file.

    Arguments:
        script: the install script to upload (the VNF package's ``script_path`` file);
            ``None``: our own (:func:`node_file`).

    Raises:
        SshError: a node could not be reached or refused the upload.
        ConfigError: ``cluster.scripts_dir`` lacks a file.
    """
    own, token_yaml = (node_file(shell.settings, name) for name in NODE_FILES)
    install = own if script is None else script

    uploads = [shell.ssh.upload(shell.target(n), install, REMOTE_SCRIPT, mode=0o755) for n in nodes]
    uploads += [
        shell.ssh.upload(shell.target(n), token_yaml, REMOTE_TOKEN_YAML, mode=0o644)
        for n in nodes
        if n.role == "master"
    ]
    await asyncio.gather(*uploads)


def hosts_block(members: Sequence[ClusterNode]) -> str:
    """The ``/etc/hosts`` block naming ``members``.

    Raises:
        DiscoveryError: a member's address is not an IP address or its name not a DNS
            label (checked at discovery; checked again where the file is made).
    """
    lines = (
        f"{ip_address_of(n.nic_ip, f'node {n.name}')} {checked_node_name(n.name, 'a node')}\n"
        for n in members
    )
    return "".join([HOSTS_BEGIN + "\n", *lines, HOSTS_END + "\n"])


async def write_hosts(
    shell: NodeShell,
    node: ClusterNode,
    members: Sequence[ClusterNode],
    *,
    forget: Sequence[str] = (),
    step: str | None = None,
) -> None:
    """Set ``node``'s hostname and make its ``/etc/hosts`` block name exactly ``members``.

    Arguments:
        node: the node to write on (its hostname becomes ``node.name``).
        members: every node of the cluster, ``node`` included.
        forget: names of nodes that left: their lines outside the block go too.
        step: named in the error.

    Raises:
        CommandFailed: the node's script failed; SshError: no connection.
    """
    names = " ".join(shlex.quote(n) for n in [*(m.name for m in members), *forget])
    command = f"bash -c {shlex.quote(_HOSTS_SCRIPT)} hosts {shlex.quote(node.name)} {names}"
    result = await shell.run(
        node, command, input=hosts_block(members), env={"BEGIN": HOSTS_BEGIN, "END": HOSTS_END}
    )
    result.check(step=step)
