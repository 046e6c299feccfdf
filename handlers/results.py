"""The step results that later steps read, each named after the step that makes it.

A step that reads one declares it in its ``needs`` (or ``wants``) and gets it
from :class:`~handlers.job.ClusterJob` (``job.discovered(ctx)``,
``job.access(ctx)`` ...). Results no other step reads are defined beside the
step that makes them. None holds a secret: results are stored and shown.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import PlainSerializer, PlainValidator

from handlers.toolkit.topology import Topology
from subscriber.kernel import StepResult
from subscriber.kernel.ports import ClusterNode

__all__ = [
    "ClusterAccess",
    "Confirmed",
    "Discovered",
    "DrainServers",
    "InstallScript",
    "Leaving",
    "Membership",
    "VimRegistration",
]


def _node(value: Any) -> ClusterNode:
    if isinstance(value, ClusterNode):
        return value
    if not isinstance(value, Mapping):
        raise ValueError("a node is an object")
    return ClusterNode.from_json(value)


Node = Annotated[ClusterNode, PlainValidator(_node), PlainSerializer(ClusterNode.as_json)]


class Confirmed(StepResult, step="confirm"):
    """What Tacker says of the notification's op-occ and instance (``confirm``)."""

    operation: str
    operation_state: str
    api: str
    vnfd_id: str | None = None
    instantiation_state: str | None = None
    hook: str | None = None  # the management-driver hook point that asked for the job


class InstallScript(StepResult, step="upload-scripts"):
    """Which ``install_k8s_cluster.sh`` ``upload-scripts`` put on the nodes.

    ``source`` is ``package`` (the VNF package's ``script_path`` file, as Tacker's
    drivers run it) or ``fallback`` (lccn-subscriber's own, from ``cluster.scripts_dir``
    or the wheel; ``reason`` says why the package's was not used).
    """

    nodes: tuple[str, ...] = ()
    source: str = "fallback"
    path: str | None = None
    sha256: str | None = None
    reason: str | None = None

    @property
    def label(self) -> str:
        """The script as an error names it."""
        if self.source == "package":
            return f"the VNF package's install script (script_path {self.path!r})"
        return "lccn-subscriber's own install_k8s_cluster.sh"


class Membership(StepResult):
    """How the nodes now differ from the inventory the last operation stored."""

    added: tuple[str, ...] = ()
    replaced: tuple[str, ...] = ()  # same name (address), new VNFC: a rebuilt VM
    departed: tuple[Node, ...] = ()


class Discovered(StepResult, step="discover"):
    """The cluster's nodes and addresses (``discover``), and on day 2 what changed.

    ``changes`` is ``None`` when every node is the operation's own (INSTANTIATE,
    the drain hook), else the difference from the stored inventory (SCALE, HEAL).
    """

    masters: tuple[Node, ...]
    workers: tuple[Node, ...]
    cluster_ip: str
    cluster_fip: str | None = None
    endpoint: str
    changes: Membership | None = None

    @classmethod
    def of(cls, topology: Topology, changes: Membership | None = None) -> Discovered:
        return cls(
            masters=topology.masters,
            workers=topology.workers,
            cluster_ip=topology.cluster_ip,
            cluster_fip=topology.cluster_fip,
            endpoint=topology.endpoint,
            changes=changes,
        )

    @property
    def topology(self) -> Topology:
        return Topology(
            masters=self.masters,
            workers=self.workers,
            cluster_ip=self.cluster_ip,
            cluster_fip=self.cluster_fip,
        )

    def touched(self) -> list[ClusterNode]:
        """The nodes this operation builds: every node, or on day 2 the added and
        rebuilt ones."""
        nodes = [*self.masters, *self.workers]
        if self.changes is None:
            return nodes
        names = {*self.changes.added, *self.changes.replaced}
        return [n for n in nodes if n.name in names]

    @property
    def departed(self) -> tuple[ClusterNode, ...]:
        """The inventory's nodes whose VNFC is gone."""
        return self.changes.departed if self.changes is not None else ()


class ClusterAccess(StepResult, step="cluster-access"):
    """The endpoint and CA the VIM is told (``cluster-access``); the token is never stored."""

    endpoint: str
    ssl_ca_cert: str


class VimRegistration(StepResult, step="register-vim"):
    """The VIM we registered in Tacker (``register-vim``), if registration is on."""

    vim_id: str | None = None
    vim_name: str | None = None


class DrainServers(StepResult, step="drain-request"):
    """The Nova servers the drain hook asked us to drain (``drain-request``)."""

    servers: tuple[str, ...] = ()


class Leaving(StepResult, step="select-leaving"):
    """The nodes on the servers to drain (``select-leaving``)."""

    nodes: tuple[str, ...] = ()
    unknown: tuple[str, ...] = ()  # not a node of this cluster (a storage VM, gone ...)
