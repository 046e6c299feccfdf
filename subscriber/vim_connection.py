"""Our ``vimConnectionInfo`` entry as Tacker keeps it: the v2 map, or the v1 list.

Pure functions, shared by the write-back (:mod:`subscriber.tacker.client`), the echo
filter and the hook's answer (:mod:`subscriber.handback`), which hands the same entry to
Tacker inside the operation.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from subscriber.kernel.ports import ApiVersion, KubernetesAccess

__all__ = ["KUBERNETES_V2", "entry_id", "v1_list_patch", "vim_connection_entry"]

KUBERNETES_V2 = "ETSINFV.KUBERNETES.V_1"


def entry_id(vnf_instance_id: str, key: str) -> str:
    """A stable id for our entry, so a repeated write-back updates instead of adding."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"lccn-subscriber:{vnf_instance_id}:{key}"))


def vim_connection_entry(
    vnf_instance_id: str, access: KubernetesAccess, *, key: str, api: ApiVersion
) -> Any:
    """Our complete Kubernetes ``vimConnectionInfo``: the v2 map, or the v1 list.

    v2: MODIFY_INFO does not fill anything in from the VIM DB, so the entry carries the
    endpoint, CA and token. v1: the entry of Tacker's v1 driver (``vimType
    kubernetes``, the endpoint as ``authUrl``, the VIM's id): v1 shows entries and keeps
    the PATCH request as text, both unmasked, so the token and CA stay in the VIM.
    The v1 entry is written in Tacker's stored (snake_case) form: the list merge keeps a
    request's entry as given, and Tacker reads its entries back by ``vim_id``,
    ``vim_type``, ``access_info`` (a camelCase entry makes every later GET fail).
    """
    vim_id = access.vim_id or entry_id(vnf_instance_id, key + ":vim")
    if api == "v1":
        return [
            {
                "id": entry_id(vnf_instance_id, key),
                "vim_id": vim_id,
                "vim_type": "kubernetes",
                "interface_info": {},
                "access_info": {"auth_url": access.endpoint},
            }
        ]
    entry = {
        "vimId": vim_id,
        "interfaceInfo": {"endpoint": access.endpoint, "ssl_ca_cert": access.ssl_ca_cert},
        "accessInfo": {"bearer_token": access.bearer_token.get_secret_value()},
    }
    return {key: {**entry, "vimType": KUBERNETES_V2}}


def v1_list_patch(instance: Mapping[str, Any], ours: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The v1 ``vimConnectionInfo`` of a PATCH that puts ``ours`` *after* the instance's
    other entries.

    v1 merges by ``id`` and stores the request's entries first, then the ones it did
    not name; Tacker's own operations use the first entry (the VIM the VNF runs on). So
    every other entry is named, by id only (unchanged), ahead of ours.
    """
    mine = {str(e["id"]) for e in ours}
    others = [
        {"id": str(e["id"])}
        for e in instance.get("vimConnectionInfo") or ()
        if isinstance(e, Mapping) and e.get("id") and str(e["id"]) not in mine
    ]
    return [*others, *ours]
