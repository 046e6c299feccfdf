"""The cluster parameters of an operation, and the API version it speaks.

Parameters come from the op-occ at hand (``GET vnf_lcm_op_occs/{id}``,
``operationParams.additionalParams``; v1 shows ``operationParams`` as JSON text),
else from the parameters the instance saved at instantiation (v1:
``instantiatedVnfInfo.additionalParams``, snake_case or, as older Tacker showed
them, ``k8sClusterInstallationParam`` in camelCase), else from the instance's last
completed INSTANTIATE op-occ (v2 keeps no instantiation parameters on the
instance, and a TERMINATE'd v1 instance none any more; Tacker's own v2 driver
makes every scale and heal request repeat them, we do not). Every read goes to
the API the instance was made with (the notification's links say which).
They hold passwords: keep them in memory, never in a step result or a log.

A VNF with no parameters anywhere whose every VIM is a Kubernetes or Helm one is a
CNF (deployed on a cluster, perhaps one we built), not a cluster of VMs: its jobs
end at the parameters step (:class:`~subscriber.errors.NotACluster`), not failed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from schemas import VnfLcmOperationOccurrenceNotification
from schemas.cluster_params import (
    PARAM_KEY,
    K8sClusterInstallationParams,
    apply_credential_overrides,
    parse_cluster_params,
)
from schemas.lcm import api_version, operation_params, saved_params
from subscriber.errors import ClusterParamsError, NotACluster, PermanentStepError, TackerRejected
from subscriber.kernel.ports import ApiVersion, TackerApi

__all__ = ["CNF_VIM_TYPES", "api_version", "instantiated_with", "load_params"]

# The VIM types of a VNF deployed on Kubernetes (v2, v2 Helm, v1).
CNF_VIM_TYPES = frozenset({"ETSINFV.KUBERNETES.V_1", "ETSINFV.HELM.V_3", "kubernetes"})


def _mapping(data: Mapping[str, Any] | None, *path: str) -> Mapping[str, Any] | None:
    for key in path:
        if not isinstance(data, Mapping):
            return None
        data = data.get(key)
    return data if isinstance(data, Mapping) else None


async def instantiated_with(
    tacker: TackerApi, vnf_instance_id: str, api: ApiVersion
) -> Mapping[str, Any]:
    """``operationParams`` of the instance's newest COMPLETED INSTANTIATE op-occ that carries
    cluster parameters, else of the newest one (its VIMs still say what the VNF is), else {}.

    A list of op-occs leaves ``operationParams`` out (SOL013's ``exclude_default``,
    which Tacker applies), so each candidate is read whole, newest first. Op-occs outlive
    their instance, so this answers after a TERMINATE and DELETE too.
    """
    occs = await tacker.list_op_occs(
        f"(eq,vnfInstanceId,{vnf_instance_id});(eq,operation,INSTANTIATE)", api=api
    )
    done = [o for o in occs if o.get("operationState") == "COMPLETED"]
    done.sort(key=lambda o: str(o.get("stateEnteredTime") or o.get("startTime") or ""))
    newest: Mapping[str, Any] = {}
    for listed in reversed(done):
        occ = await tacker.get_op_occ(str(listed["id"]), api=api)
        params = operation_params(occ)
        newest = newest or params
        if PARAM_KEY in (_mapping(params, "additionalParams") or {}):
            return params
    return newest


async def _instance(
    tacker: TackerApi, notification: VnfLcmOperationOccurrenceNotification, api: ApiVersion
) -> Any:
    """The instance, or ``{}`` when a TERMINATE's instance was deleted since (Tacker 404)."""
    try:
        return await tacker.get_vnf_instance(notification.vnfInstanceId, api=api)
    except TackerRejected as exc:
        if notification.operation.value == "TERMINATE" and getattr(exc, "status", None) == 404:
            return {}
        raise


def _vim_types(*sources: Any) -> set[str]:
    """The ``vimType`` of the VIMs the VNF runs on: every entry of a v2 map, the first of
    a v1 list. v1 runs an instance on its list's first entry (``vnflcm_utils._get_vim``
    reads ``vim_connection_info[0]``); Tacker appends the project's default VIM, which the
    instance was created with, to an INSTANTIATE request's own entries, so a v1 CNF
    lists an OpenStack VIM after its Kubernetes one."""
    types: set[str] = set()
    for vci in sources:
        if isinstance(vci, Mapping):
            entries: Iterable[Any] = vci.values()
        elif isinstance(vci, list):
            entries = vci[:1]
        else:
            continue
        for entry in entries:
            if isinstance(entry, Mapping) and isinstance(entry.get("vimType"), str):
                types.add(entry["vimType"])
    return types


async def load_params(
    tacker: TackerApi,
    notification: VnfLcmOperationOccurrenceNotification,
    occ: Mapping[str, Any] | None = None,
) -> K8sClusterInstallationParams:
    """The operation's ``k8s_cluster_installation_param``, else the instance's saved ones.

    v1 scale/heal requests may carry ``master_node_username``/``_password``
    overrides on top of the saved parameters. ``occ`` is the notification's op-occ
    when already read (else it is read here).

    Raises:
        NotACluster: no parameters anywhere, and every VIM of the request and the
            instance is a Kubernetes or Helm one (a CNF).
        PermanentStepError: no parameters anywhere (and not a CNF), or invalid ones
            (each bad field named, no value echoed).
        TackerUnavailable: Tacker could not be asked (retriable).
    """
    n = notification
    api = api_version(n)
    if occ is None:
        occ = await tacker.get_op_occ(n.vnfLcmOpOccId, api=api)
    operation = operation_params(occ)
    request = _mapping(operation, "additionalParams") or {}
    try:
        if PARAM_KEY in request:
            return parse_cluster_params(request, api=api)
        instance = await _instance(tacker, n, api)
        saved: Mapping[str, Any] | None = saved_params(instance)
        instantiated: Mapping[str, Any] = {}
        if (not saved or PARAM_KEY not in saved) and n.operation.value != "INSTANTIATE":
            instantiated = await instantiated_with(tacker, n.vnfInstanceId, api)
            saved = _mapping(instantiated, "additionalParams")
        if not saved or PARAM_KEY not in saved:
            vims = _vim_types(
                operation.get("vimConnectionInfo"),
                instance.get("vimConnectionInfo"),
                instantiated.get("vimConnectionInfo"),
            )
            if vims and vims <= CNF_VIM_TYPES:
                raise NotACluster(
                    f"VNF instance {n.vnfInstanceId} is deployed on Kubernetes "
                    f"({', '.join(sorted(vims))}) and has no {PARAM_KEY}: a CNF, "
                    "not a cluster of VMs; nothing to do",
                    {"notACluster": True, "vimTypes": sorted(vims)},
                )
            raise PermanentStepError(
                f"neither the {n.operation.value} request ({n.vnfLcmOpOccId}) nor the "
                f"instance's saved additionalParams carry {PARAM_KEY}",
                vnf_instance_id=n.vnfInstanceId,
            )
        params = parse_cluster_params(saved, api=api)
        return apply_credential_overrides(params, request)
    except ClusterParamsError as exc:
        # A PermanentStepError (not the schema's own error) so the runner files it as such.
        raise PermanentStepError(str(exc), vnf_instance_id=n.vnfInstanceId) from None
