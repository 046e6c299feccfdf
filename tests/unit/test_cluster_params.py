"""k8s_cluster_installation_param: the seeds' examples parse; bad input names the field."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from schemas.cluster_params import apply_credential_overrides, parse_cluster_params
from subscriber.errors import ClusterParamsError

# seeds/000 (v1 guide), simple_kubernetes_param_file.json
V1_SIMPLE: dict[str, Any] = {
    "k8s_cluster_installation_param": {
        "script_path": "Scripts/install_k8s_cluster.sh",
        "vim_name": "kubernetes_vim",
        "master_node": {
            "aspect_id": "master_instance",
            "ssh_cp_name": "masterNode_CP1",
            "nic_cp_name": "masterNode_CP1",
            "username": "ubuntu",
            "password": "ubuntu",
            "pod_cidr": "192.168.3.0/16",
            "cluster_cidr": "10.199.187.0/24",
            "cluster_cp_name": "masterNode_CP1",
        },
        "worker_node": {
            "aspect_id": "worker_instance",
            "ssh_cp_name": "workerNode_CP2",
            "nic_cp_name": "workerNode_CP2",
            "username": "ubuntu",
            "password": "ubuntu",
        },
        "proxy": {
            "http_proxy": "http://user1:password1@host1:port1",
            "https_proxy": "https://user2:password2@host2:port2",
            "no_proxy": "192.168.246.0/24,10.0.0.1",
            "k8s_node_cidr": "10.10.0.0/24",
        },
    },
    "lcm-operation-user-data": "./UserData/k8s_cluster_user_data.py",
}

# seeds/002 (v2 guide), simple_kubernetes_param_file_v2.json
V2_SIMPLE: dict[str, Any] = {
    "k8s_cluster_installation_param": {
        "script_path": "Scripts/install_k8s_cluster.sh",
        "vim_name": "kubernetes_vim",
        "master_node": {
            "vdu_id": "masterNode",
            "ssh_cp_name": "masterNode_CP1_floating_ip",
            "nic_cp_name": "masterNode_CP1",
            "username": "ubuntu",
            "password": "ubuntu",
            "pod_cidr": "10.200.0.0/16",
            "cluster_cp_name": "masterNode_CP1",
        },
        "worker_node": {
            "vdu_id": "workerNode",
            "ssh_cp_name": "workerNode_CP1_floating_ip",
            "nic_cp_name": "workerNode_CP1",
            "username": "ubuntu",
            "password": "ubuntu",
        },
    },
}


def mutate(base: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    data = copy.deepcopy(base)
    node = data["k8s_cluster_installation_param"]
    *parents, last = path.split(".")
    for part in parents:
        node = node[part]
    if value is ...:
        del node[last]
    else:
        node[last] = value
    return data


def problems(data: dict[str, Any], api: str = "v2") -> dict[str, str]:
    with pytest.raises(ClusterParamsError) as info:
        parse_cluster_params(data, api=api)  # type: ignore[arg-type]
    return dict(info.value.problems)


def test_v1_seed_example() -> None:
    params = parse_cluster_params(V1_SIMPLE, api="v1")
    assert params.api_version == "v1"
    assert params.master_node.aspect_id == "master_instance"
    assert params.pod_cidr == "192.168.3.0/16"  # host bits kept, as kubeadm accepts
    assert params.service_cidr == "10.199.187.0/24"
    assert params.worker_node.password is not None
    assert params.worker_node.password.get_secret_value() == "ubuntu"
    assert "password=SecretStr('**********')" in repr(params.worker_node)
    assert params.proxy is not None and params.proxy.k8s_node_cidr == "10.10.0.0/24"
    assert "password1" not in repr(params)


def test_v2_seed_example_and_defaults() -> None:
    params = parse_cluster_params(V2_SIMPLE, api="v2")
    assert params.master_node.vdu_id == "masterNode"
    assert params.master_node.nic_cp == "masterNode_CP1"
    assert params.pod_cidr == "10.200.0.0/16"
    assert params.service_cidr == "10.96.0.0/12"
    no_pod = parse_cluster_params(mutate(V2_SIMPLE, "master_node.pod_cidr", ...), api="v2")
    assert no_pod.pod_cidr == "10.0.0.0/8"
    v1 = mutate(V1_SIMPLE, "master_node.pod_cidr", ...)
    assert parse_cluster_params(v1, api="v1").pod_cidr == "192.168.0.0/16"
    assert parse_cluster_params(V2_SIMPLE).vim_name_for("x") == "kubernetes_vim"
    unnamed = mutate(V2_SIMPLE, "vim_name", ...)
    assert parse_cluster_params(unnamed).vim_name_for("abc") == "kubernetes_vim_abc"


def test_missing_block() -> None:
    with pytest.raises(ClusterParamsError, match="additionalParams has no k8s_cluster"):
        parse_cluster_params({"other": 1})
    with pytest.raises(ClusterParamsError, match="must be an object"):
        parse_cluster_params({"k8s_cluster_installation_param": "x"})


def test_missing_required_fields_are_named() -> None:
    found = problems(mutate(V2_SIMPLE, "master_node.ssh_cp_name", ...))
    assert found == {"k8s_cluster_installation_param.master_node.ssh_cp_name": "required"}
    found = problems(mutate(V2_SIMPLE, "worker_node", ...))
    assert found == {"k8s_cluster_installation_param.worker_node": "required"}
    found = problems(mutate(V2_SIMPLE, "script_path", ""))
    assert found == {"k8s_cluster_installation_param.script_path": "must not be empty"}


def test_v2_requires_vdu_id_and_nic_cp_name_but_v1_does_not() -> None:
    data = mutate(V2_SIMPLE, "worker_node.vdu_id", ...)
    assert problems(data) == {
        "k8s_cluster_installation_param.worker_node": "vdu_id required with the v2 API"
    }
    data = mutate(data, "worker_node.nic_cp_name", ...)
    assert problems(data) == {
        "k8s_cluster_installation_param.worker_node": (
            "vdu_id and nic_cp_name required with the v2 API"
        )
    }
    v1 = mutate(V1_SIMPLE, "master_node.nic_cp_name", ...)
    assert parse_cluster_params(v1, api="v1").master_node.nic_cp == "masterNode_CP1"


def test_credentials() -> None:
    data = mutate(V2_SIMPLE, "master_node.password", ...)
    assert problems(data) == {
        "k8s_cluster_installation_param.master_node": (
            "give password or ssh_private_key_path: no way to log in"
        )
    }
    data = mutate(data, "master_node.ssh_private_key_path", "/etc/lccn/id_ed25519")
    params = parse_cluster_params(data)
    assert params.master_node.password is None
    relative = mutate(data, "master_node.ssh_private_key_path", "keys/id")
    assert "absolute" in next(iter(problems(relative).values()))


def test_bad_values_are_explained_without_echoing_them() -> None:
    secret = "s3cr3t-value"
    data = mutate(V2_SIMPLE, "master_node.pod_cidr", secret)
    found = problems(data)
    assert found == {
        "k8s_cluster_installation_param.master_node.pod_cidr": "not a CIDR (like 10.0.0.0/8)"
    }
    with pytest.raises(ClusterParamsError) as info:
        parse_cluster_params(mutate(V2_SIMPLE, "worker_node.password", 12345))
    assert "12345" not in str(info.value)
    assert "worker_node.password" in str(info.value)


def test_typos_are_reported_as_unknown_fields() -> None:
    data = mutate(V2_SIMPLE, "worker_node.ssh_cp_nmae", "x")
    assert problems(data) == {
        "k8s_cluster_installation_param.worker_node.ssh_cp_nmae": (
            "unknown field (check the spelling)"
        )
    }


def test_cidrs_must_not_overlap() -> None:
    data = mutate(V2_SIMPLE, "master_node.cluster_cidr", "10.200.16.0/20")
    message = next(iter(problems(data).values()))
    assert "pod_cidr (10.200.0.0/16) overlaps master_node.cluster_cidr" in message
    # Tacker's v2 defaults (10.0.0.0/8, 10.96.0.0/12) overlap: only given values are checked.
    data = mutate(V2_SIMPLE, "master_node.pod_cidr", ...)
    assert parse_cluster_params(data).pod_cidr == "10.0.0.0/8"


def test_v2_takes_every_extra() -> None:
    # Tacker's v2 driver has none of them; we apply them with either API.
    data = copy.deepcopy(V2_SIMPLE)
    data["k8s_cluster_installation_param"]["private_registry_connection_info"] = [
        {"connection_type": "0", "server": "registry.example:5000"}
    ]
    data["k8s_cluster_installation_param"]["proxy"] = V1_SIMPLE["k8s_cluster_installation_param"][
        "proxy"
    ]
    data["k8s_cluster_installation_param"]["helm_installation_script_path"] = "Scripts/h.sh"
    params = parse_cluster_params(data)
    assert params.proxy is not None and params.private_registry_connection_info


def test_several_problems_at_once() -> None:
    data = mutate(V1_SIMPLE, "master_node.username", ...)
    data = mutate(data, "worker_node.password", ...)
    data = mutate(data, "proxy.k8s_node_cidr", "10.10.0.0")
    found = problems(data, api="v1")
    assert set(found) == {
        "k8s_cluster_installation_param.master_node.username",
        "k8s_cluster_installation_param.worker_node",
        "k8s_cluster_installation_param.proxy.k8s_node_cidr",
    }
    assert "prefix length" in found["k8s_cluster_installation_param.proxy.k8s_node_cidr"]


def test_private_registry_connection_type() -> None:
    data = copy.deepcopy(V1_SIMPLE)
    data["k8s_cluster_installation_param"]["private_registry_connection_info"] = [
        {"connection_type": "2", "server": "reg:5000"}
    ]
    found = problems(data, api="v1")
    key = "k8s_cluster_installation_param.private_registry_connection_info.0.connection_type"
    assert found == {key: "must be one of '0' or '1'"}


def test_credential_overrides_for_scale_and_heal() -> None:
    params = parse_cluster_params(V1_SIMPLE, api="v1")
    changed = apply_credential_overrides(
        params, {"worker_node_username": "admin", "worker_node_password": "new"}
    )
    assert changed.worker_node.username == "admin"
    assert changed.worker_node.password is not None
    assert changed.worker_node.password.get_secret_value() == "new"
    assert changed.master_node == params.master_node
    assert changed.api_version == "v1"
    with pytest.raises(ClusterParamsError, match="master_node_password"):
        apply_credential_overrides(params, {"master_node_password": ""})
