"""etcd membership of a stacked control plane: list the members, remove a master's.

kubeadm adds a control-plane node's etcd member when it joins but never removes
one whose VM was deleted: a healed master must have its old member removed
first, or the new one cannot join (same name and peer URL) and quorum counts a
dead member. Tacker's driver does it with ``etcdctl member remove <id>``
through ``kubectl exec`` into the etcd static pod (TACKER.md §1.6); we do the
same by default, or run ``etcdctl`` on the master itself
(``cluster.etcdctl_via: host``) where pods cannot be exec'ed into.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Any

from handlers.toolkit.shell import NodeShell
from subscriber.errors import PermanentStepError
from subscriber.kernel.ports import ClusterNode

__all__ = ["EtcdMember", "etcd_members", "etcdctl_command", "remove_etcd_member"]

_TLS = (
    "--endpoints=https://127.0.0.1:2379 --cacert=/etc/kubernetes/pki/etcd/ca.crt "
    "--cert=/etc/kubernetes/pki/etcd/server.crt --key=/etc/kubernetes/pki/etcd/server.key"
)


@dataclass(frozen=True, slots=True)
class EtcdMember:
    """One etcd member; ``id`` as etcdctl prints it (hex)."""

    id: str
    name: str
    peer_urls: tuple[str, ...]

    def is_node(self, node: ClusterNode) -> bool:
        """Whether this member is ``node``'s (by name, else by its peer address)."""
        if self.name == node.name:
            return True
        return any(f"//{node.nic_ip}:" in url for url in self.peer_urls)


def etcdctl_command(shell: NodeShell, via: ClusterNode, args: str) -> str:
    """An ``etcdctl`` command line against ``via``'s local etcd member."""
    inner = f"ETCDCTL_API=3 {shlex.quote(shell.settings.etcdctl)} {_TLS} {args}"
    if shell.settings.etcdctl_via == "host":
        return inner
    pod = shlex.quote(f"etcd-{via.name}")
    return shell.kubectl(f"exec -n kube-system {pod} -- sh -c {shlex.quote(inner)}")


def parse_members(text: str) -> list[EtcdMember]:
    """``etcdctl member list -w json`` output as members (ids in hex, as etcdctl takes them).

    Raises:
        ValueError: not that output.
    """
    data: Any = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("not an etcdctl member list")
    members = []
    for raw in data.get("members") or []:
        member_id = raw.get("ID")
        if member_id is None:
            continue
        members.append(
            EtcdMember(
                id=format(int(member_id), "x"),
                name=str(raw.get("name") or ""),
                peer_urls=tuple(raw.get("peerURLs") or ()),
            )
        )
    return members


async def etcd_members(
    shell: NodeShell, via: ClusterNode, *, step: str | None = None
) -> list[EtcdMember]:
    """The members of the cluster's etcd, asked through master ``via``.

    Raises:
        CommandFailed: etcdctl failed; PermanentStepError: unreadable output.
    """
    result = await shell.run(via, etcdctl_command(shell, via, "member list -w json"))
    try:
        return parse_members(result.check(step=step).stdout)
    except (ValueError, TypeError, AttributeError) as exc:
        raise PermanentStepError(f"etcdctl member list on {via.name}: {exc}", step=step) from None


async def remove_etcd_member(
    shell: NodeShell, via: ClusterNode, node: ClusterNode, *, step: str | None = None
) -> str | None:
    """Remove ``node``'s etcd member (by id), asking through another master ``via``.

    Returns:
        The removed member's id, or None when ``node`` has no member (already removed).

    Raises:
        CommandFailed: etcdctl failed.
    """
    for member in await etcd_members(shell, via, step=step):
        if member.is_node(node):
            result = await shell.run(via, etcdctl_command(shell, via, f"member remove {member.id}"))
            if not result.ok and "member not found" in result.stderr.lower():
                return None
            result.check(step=step)
            return member.id
    return None
