"""The named, checkpointed steps the cluster plans are built from, by what they act on.

=============================  ==================================================
module                         steps
=============================  ==================================================
:mod:`.operation`              ``confirm`` (first in every cluster plan),
                               ``load-params`` / ``validate-params``
:mod:`.nodes`                  ``discover`` (INSTANTIATE) or its day-2 survey,
                               ``upload-scripts``, ``configure-hosts``,
                               ``configure-proxy``, ``label-workers``
:mod:`.control_plane`          ``init-master-<node>``, ``join-master-<node>``,
                               ``join-workers``, ``haproxy-backends``,
                               ``install-helm``
:mod:`.membership`             ``retire-nodes``, ``reconcile-membership``,
                               ``forget-inventory``; the drain hook's
                               ``drain-request``, ``select-leaving``,
                               ``drain-leaving``; a rollback's
                               ``reset-nodes``
:mod:`.vim`                    ``admin-token``, ``cluster-access``,
                               ``register-vim``, ``write-back``; TERMINATE's
                               ``delete-vim``, ``clear-write-back``
:mod:`.storage`                ``storage-server``, ``nfs-client``,
                               ``register-pvs``, ``release-pvs``
:mod:`.registry`               ``configure-registry`` (private container registries)
:mod:`.package`                not a step: the one way a step reads a file of the
                               instance's VNF package (bounded)
=============================  ==================================================

Each factory takes the job's :class:`~handlers.job.ClusterJob` and returns a
:class:`~subscriber.kernel.Step` (or a :class:`~subscriber.kernel.StepsFor`)
whose result is a typed :class:`~subscriber.kernel.StepResult`; the results
later steps read are in :mod:`handlers.results`.
"""

from handlers.steps.control_plane import (
    converge_masters,
    haproxy_backends,
    init_main_master,
    install_helm,
    join_masters,
    join_workers,
)
from handlers.steps.membership import (
    drain_leaving,
    drain_request,
    forget_inventory,
    forget_node,
    reconcile_membership,
    reset_nodes,
    retire_nodes,
    select_leaving,
)
from handlers.steps.nodes import (
    configure_hosts,
    configure_proxy,
    discover_nodes,
    label_workers,
    survey_nodes,
    upload_scripts,
)
from handlers.steps.operation import confirm, load_params
from handlers.steps.package import package_files
from handlers.steps.registry import configure_registry
from handlers.steps.storage import nfs_client, register_pvs, release_pvs, storage_server
from handlers.steps.vim import (
    admin_token,
    clear_write_back,
    cluster_access,
    delete_vim,
    register_vim,
    reregister_vim,
    write_back,
)

__all__ = [
    "admin_token",
    "clear_write_back",
    "cluster_access",
    "configure_hosts",
    "configure_proxy",
    "configure_registry",
    "confirm",
    "converge_masters",
    "delete_vim",
    "discover_nodes",
    "drain_leaving",
    "drain_request",
    "forget_inventory",
    "forget_node",
    "haproxy_backends",
    "init_main_master",
    "install_helm",
    "join_masters",
    "join_workers",
    "label_workers",
    "load_params",
    "nfs_client",
    "package_files",
    "reconcile_membership",
    "register_pvs",
    "register_vim",
    "release_pvs",
    "reregister_vim",
    "reset_nodes",
    "retire_nodes",
    "select_leaving",
    "storage_server",
    "survey_nodes",
    "upload_scripts",
    "write_back",
]
