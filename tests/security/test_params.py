"""Parameters that reach a file or a command line are validated for what they are.

``k8s_cluster_installation_param`` comes from the op-occ a notification names: every
value written into ``/etc/exports``, containerd's ``certs.d``, ``/etc/hosts``, apt or
systemd files, or used as a login or a Heat resource name, is checked for its kind
(an absolute path, an NFS client, a hostname, a port, a name) before any step runs.
Before, ``export_to = "10.0.0.0/24\\n/ *(rw,no_root_squash,insecure)\\n#"`` exported
the storage server's ``/`` read-write to everyone, and a registry server ``..`` put
its CA in ``/etc/containerd/ca.crt``.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from handlers.toolkit import registry, storage
from schemas.cluster_params import PARAM_KEY, parse_cluster_params
from subscriber.errors import ClusterParamsError, PermanentStepError
from tests.cluster_fakes import k8s_params

INJECTION = "10.0.0.0/24\n/ *(rw,no_root_squash,insecure)\n#"


def _storage(**setup: Any) -> dict[str, Any]:
    """The v2 parameters with seed 004's storage server, ``setup`` overriding its values."""
    data = k8s_params(key="/keys/id")
    data[PARAM_KEY]["storage_server"] = {
        "ssh_cp_name": "storage_server_CP",
        "username": "ubuntu",
        "password": "ubuntu",
        "cinder_volume_setup_params": [
            {"volume_resource_id": "storage_server_volume", "mount_to": "/volume"}
        ],
        "nfs_server_setup_params": [
            {"export_dir": "/volume/nfs/pv1", "export_to": "10.10.0.0/24"},
        ],
    }
    for key, value in setup.items():
        group = "cinder_volume_setup_params" if key == "mount_to" else "nfs_server_setup_params"
        data[PARAM_KEY]["storage_server"][group][0][key] = value
    return data


def _refused(data: dict[str, Any], path: str, secret: str | None = None) -> str:
    with pytest.raises(ClusterParamsError) as info:
        parse_cluster_params(data)
    message = str(info.value)
    assert f"{PARAM_KEY}.{path}:" in message, message
    assert "\n" not in message
    if secret is not None:
        assert secret not in message
    return message


def test_export_to_cannot_add_an_export() -> None:
    _refused(
        _storage(export_to=INJECTION),
        "storage_server.nfs_server_setup_params.0.export_to",
        secret="no_root_squash,insecure",
    )
    for bad in ["10.0.0.0/24(rw)\n/ *(rw)", "a b", "10.0.0.0/24(rw)(ro)", "10.0.0.0/24(rw", "#"]:
        _refused(_storage(export_to=bad), "storage_server.nfs_server_setup_params.0.export_to")


def test_export_options_come_from_an_allowed_set() -> None:
    for bad in ["*(rw,fsid=0)", "*(rw,mp=/x)", "*()", "*(rw,,sync)", "*(refer=/a@h)"]:
        _refused(_storage(export_to=bad), "storage_server.nfs_server_setup_params.0.export_to")
    for good in [
        "10.10.0.0/24",
        "*",
        "10.10.0.7",
        "fd00::/64",
        "nfs-client.example",
        "*.example.org",
        "@trusted",
        "10.10.0.0/24(ro,sync,no_subtree_check,root_squash,anonuid=65534,sec=sys:krb5)",
    ]:
        parse_cluster_params(_storage(export_to=good))


def test_no_root_squash_needs_the_operators_consent() -> None:
    params = parse_cluster_params(_storage(export_to="10.10.0.0/24(rw,no_root_squash)"))
    setups = params.storage_server.nfs_server_setup_params  # type: ignore[union-attr]
    with pytest.raises(PermanentStepError, match=r"no_root_squash is not allowed \(cluster\."):
        storage.exports_text(setups)
    allowed = storage.exports_text(setups, allow_no_root_squash=True)
    assert allowed.splitlines()[1:] == ["/volume/nfs/pv1 10.10.0.0/24(rw,no_root_squash)"]
    tacker = parse_cluster_params(_storage()).storage_server
    assert storage.exports_text(tacker.nfs_server_setup_params).splitlines()[1:] == [  # type: ignore[union-attr]
        f"/volume/nfs/pv1 10.10.0.0/24({storage.EXPORT_OPTIONS})"
    ]


@pytest.mark.parametrize(
    "bad",
    ["/", "volume", "/volume/../etc", "/volume/./x", "/vol ume", "/vol\nume", "/a#b", '/a"b', ""],
)
def test_export_and_mount_paths_are_absolute_and_plain(bad: str) -> None:
    _refused(_storage(export_dir=bad), "storage_server.nfs_server_setup_params.0.export_dir")
    _refused(_storage(mount_to=bad), "storage_server.cinder_volume_setup_params.0.mount_to")


def _registry(**values: Any) -> dict[str, Any]:
    data = k8s_params(key="/keys/id")
    data[PARAM_KEY]["private_registry_connection_info"] = [
        {"connection_type": "1", "server": "registry.example:5000", **values}
    ]
    return data


@pytest.mark.parametrize(
    "bad",
    [
        "..",
        ".",
        "../../etc",
        "reg/v2",
        "reg:0",
        "reg:65536",
        "reg:99999",
        "-reg",
        "reg.:5000",
        "[not-ipv6]:5000",
        "reg 5000",
        "https://reg",
    ],
)
def test_a_registry_server_cannot_leave_certs_d(bad: str) -> None:
    _refused(_registry(server=bad), "private_registry_connection_info.0.server")


def test_registry_servers_of_every_kind_are_accepted() -> None:
    for server in ["r", "reg:5000", "registry.example:5000", "10.9.0.51:5000", "[fd00::5]:443"]:
        params = parse_cluster_params(_registry(server=server))
        path = registry.ca_path(params.private_registry_connection_info[0].server)
        assert path == f"/etc/containerd/certs.d/{server}/ca.crt"


def test_a_registry_hosts_line_names_hostnames_only() -> None:
    for bad in ["10.9.0.50 reg;reboot", "10.9.0.50 reg\tx\ny", "10.9.0.50 $(id)"]:
        _refused(_registry(hosts_string=bad), "private_registry_connection_info.0.hosts_string")
    parse_cluster_params(_registry(hosts_string="10.9.0.50 registry.example registry"))


def _set(path: str, value: Any) -> dict[str, Any]:
    data = copy.deepcopy(k8s_params(key="/keys/id", password="pw", worker_user="ubuntu"))
    node = data[PARAM_KEY]
    *parents, last = path.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
    return data


@pytest.mark.parametrize(
    ("path", "bad"),
    [
        ("master_node.ssh_cp_name", "../stacks"),
        ("master_node.nic_cp_name", "a/b"),
        ("master_node.cluster_cp_name", ".."),
        ("master_node.vdu_id", "master\nNode"),
        ("worker_node.username", "ubuntu root"),
        ("worker_node.username", "-oProxyCommand=x"),
        ("worker_node.username", "u\x00"),
        ("proxy.http_proxy", "http://proxy:3128/\x01"),
        ("proxy.no_proxy", "10.0.0.1,$(reboot)"),
        ("proxy.no_proxy", "a b"),
        ("vim_name", "vim\nname"),
        ("script_path", "Scripts/x\x00.sh"),
    ],
)
def test_other_values_that_reach_a_file_or_a_command_are_checked(path: str, bad: str) -> None:
    _refused(_set(path, bad), path)


def test_the_seeds_examples_still_parse() -> None:
    seed = _set(
        "proxy",
        {
            "http_proxy": "http://user1:password1@host1:port1",
            "https_proxy": "https://user2:password2@host2:port2",
            "no_proxy": "192.168.246.0/24,10.0.0.1",
            "k8s_node_cidr": "10.10.0.0/24",
        },
    )
    seed[PARAM_KEY]["vim_name"] = "kubernetes_vim_complex"
    seed[PARAM_KEY]["master_node"]["ssh_cp_name"] = "masterNode_CP1_floating_ip"
    seed[PARAM_KEY]["master_node"]["cluster_fip_name"] = "vip_CP_floating_ip"
    seed[PARAM_KEY]["storage_server"] = _storage()[PARAM_KEY]["storage_server"]
    seed[PARAM_KEY]["pv_registration_params"] = [
        {
            "pv_manifest_file_path": "Files/kubernetes/nfs-pv1.yaml",
            "nfs_server_cp": "storage_server_CP",
        }
    ]
    params = parse_cluster_params(seed)
    assert params.worker_node.username == "ubuntu"
    v1 = copy.deepcopy(seed)
    for group in ("master_node", "worker_node"):
        v1[PARAM_KEY][group].pop("vdu_id")
        v1[PARAM_KEY][group]["aspect_id"] = group.replace("_node", "_instance")
    parse_cluster_params(v1, api="v1")
