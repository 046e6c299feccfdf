"""How Tacker shows an instance and an op-occ, in each VNF LCM API.

The two APIs differ in the shape of what a handler reads (TACKER.md §4,
TACKER-DRIVERS.md):

* which API an instance speaks: its notification's links say ``/vnflcm/v1/``
  or ``/vnflcm/v2/`` (:func:`api_version`);
* an op-occ's ``operationParams``: v2 an object; v1 the request as JSON *text*
  (and a MODIFY_INFO's as the text of a Python dict) (:func:`operation_params`);
* the parameters an instance saved at instantiation: v1 keeps them in
  ``instantiatedVnfInfo.additionalParams``, under ``k8s_cluster_installation_param``
  as given; older Tacker showed them converted to camelCase
  (``k8sClusterInstallationParam`` with ``masterNode.sshCpName`` ..., seed 000)
  (:func:`saved_params`). v2 keeps none on the instance.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping
from typing import Any

from schemas.cluster_params import PARAM_KEY, ApiVersion

__all__ = ["CAMEL_PARAM_KEY", "api_version", "operation_params", "saved_params"]

CAMEL_PARAM_KEY = "k8sClusterInstallationParam"
# What Tacker's camelCase conversion made of a snake_case key: an upper-case letter after
# a lower-case letter or a digit starts a word (k8sNodeCidr -> k8s_node_cidr).
_WORD = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def api_version(notification: object) -> ApiVersion:
    """The VNF LCM API an op-occ notification's instance speaks: its links say
    ``/vnflcm/v1/`` (Tacker's v1 conductor), else v2."""
    links = getattr(notification, "links", None)
    instance = getattr(links, "vnfInstance", None)
    href = getattr(instance, "href", "") or ""
    return "v1" if "/vnflcm/v1/" in href else "v2"


def operation_params(occ: Mapping[str, Any] | None) -> dict[str, Any]:
    """An op-occ's ``operationParams`` as an object, whichever way Tacker shows it.

    v2 gives an object. v1 gives text: the request as JSON (INSTANTIATE, SCALE,
    HEAL, TERMINATE ...), or a MODIFY_INFO's request as the text of a Python dict.
    Anything else (absent, unreadable) is an empty object.
    """
    if not isinstance(occ, Mapping):
        return {}
    value = occ.get("operationParams")
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            try:
                value = ast.literal_eval(value)  # literals only: nothing is run
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                return {}
    return dict(value) if isinstance(value, Mapping) else {}


def _snake(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {_WORD.sub("_", str(k)).lower(): _snake(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_snake(v) for v in value]
    return value


def saved_params(instance: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The ``additionalParams`` an instance saved at instantiation (v1), with the cluster
    parameters under ``k8s_cluster_installation_param`` in snake_case whichever
    spelling Tacker showed; ``None`` when it saved none."""
    if not isinstance(instance, Mapping):
        return None
    info = instance.get("instantiatedVnfInfo")
    saved = info.get("additionalParams") if isinstance(info, Mapping) else None
    if not isinstance(saved, Mapping):
        saved = instance.get("additionalParams")
    if not isinstance(saved, Mapping):
        return None
    out = dict(saved)
    if PARAM_KEY not in out and isinstance(out.get(CAMEL_PARAM_KEY), Mapping):
        out[PARAM_KEY] = _snake(out.pop(CAMEL_PARAM_KEY))
    return out
