"""The step toolkit: node operations every cluster plan is built from.

Each function does one thing on the cluster's nodes over SSH, is convergent or
guarded (reads first, changes only what differs), takes a
:class:`~handlers.toolkit.shell.NodeShell` and returns what a step needs,
never a secret in a value that could be stored. Plans wrap them in named,
checkpointed steps (:mod:`handlers.steps`).

=========================  ===================================================
module                     operations
=========================  ===================================================
:mod:`.params`             the operation's parameters, the API version
:mod:`.topology`           discover the nodes (Tacker VNFCs, Heat ports, Nova)
:mod:`.hosts`              upload the node scripts, hostname + /etc/hosts block
:mod:`.kubeadm`            init, control-plane join, worker join, token + CA
                           hash, certificate key
:mod:`.kubectl`            node names, label, drain, delete, admin token,
                           bearer token, CA certificate
:mod:`.etcd`               etcd member list / remove
:mod:`.haproxy`            haproxy backend add / remove
:mod:`.proxy`              the cluster's proxy for apt, containerd, kubeadm
:mod:`.helm`               the user's Helm script (from the VNF package) on masters
:mod:`.storage`            the storage server: volumes, NFS exports, PVs
:mod:`.registry`           private container registries on the nodes
:mod:`.install_report`     what ``install_k8s_cluster.sh`` prints, parsed
:mod:`.shell`              root shells on the nodes (the parameters' credentials)
=========================  ===================================================
"""

from handlers.toolkit.shell import NodeShell
from handlers.toolkit.topology import Topology

__all__ = ["NodeShell", "Topology"]
