#!/usr/bin/python3
"""Stand-in ``kubeadm``, ``kubectl`` and ``etcdctl`` for the sshd test hosts.

Runs with the system ``/usr/bin/python3`` (the hosts' private /root hides any
other Python). Invoked as ``k8s_standin.py kubeadm|kubectl ARGS...`` by the
wrappers ``tests/testbed/testhosts.py`` puts on each host's PATH, with
``LCCN_STANDIN_DIR`` naming the directory shared by every host of a test bed:

* ``state.json``  the one cluster state (nodes, roles, labels, tokens, objects),
  read and written under an exclusive ``flock`` on ``state.lock``, so a
  worker's ``kubeadm join`` is visible to a master's ``kubectl get nodes``;
* ``calls.jsonl`` one line per call: host, user, argv, exit status;
* ``join_delay``  seconds each ``kubeadm join`` sleeps (outside the lock), the
  benchmark's fixed per-join cost (env ``LCCN_STANDIN_JOIN_DELAY`` wins).

Behaviour follows real kubeadm/kubectl where the cluster flow depends on it:
``init`` refuses to run twice, joins check the endpoint, token, CA hash and
(for control-plane joins) the uploaded certificate key and a stable
control-plane endpoint; kubectl needs a kubeconfig; errors go to stderr with a
non-zero exit. etcd membership is modelled as kubeadm makes it: ``init`` and
control-plane joins add the node's member, a control-plane join fails while a
member of the same name or peer address is still there (a rebuilt master whose
old member was not removed), ``reset`` removes it, and ``etcdctl member
list -w json`` / ``member remove ID`` (run on a control-plane host) read and
change it.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any

STATE_DIR = os.environ.get("LCCN_STANDIN_DIR", "/var/lib/lccn-standin")
VERSION = os.environ.get("LCCN_STANDIN_K8S_VERSION", "v1.26.8")
ETC = "/etc/kubernetes"


class Fail(Exception):
    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


@contextlib.contextmanager
def locked_state(write: bool = True):  # type: ignore[no-untyped-def]
    os.makedirs(STATE_DIR, exist_ok=True)
    with open(os.path.join(STATE_DIR, "state.lock"), "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX if write else fcntl.LOCK_SH)
        path = os.path.join(STATE_DIR, "state.json")
        try:
            with open(path) as fh:
                state = json.load(fh)
        except (FileNotFoundError, ValueError):
            state = {}
        yield state
        if write:
            fd, tmp = tempfile.mkstemp(dir=STATE_DIR, prefix=".state.")
            with os.fdopen(fd, "w") as fh:
                json.dump(state, fh, indent=1, sort_keys=True)
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)


# ``kubeadm join --config F``: the flags the file stands for, recorded as the call's
# argv (with "config": F), so a test sees the same join either way.
EFFECTIVE: list[list[str]] = []


def record(tool: str, argv: list[str], code: int) -> None:
    entry: dict[str, Any] = {
        "t": time.time(),
        "host": socket.gethostname(),
        "uid": os.getuid(),
        "tool": tool,
        "argv": argv,
        "rc": code,
    }
    if os.environ.get("http_proxy") or os.environ.get("https_proxy"):
        # the environment the install script gave kubeadm (not the URLs: they hold passwords)
        entry["proxy"] = True
        entry["no_proxy"] = os.environ.get("no_proxy", "")
    if EFFECTIVE:
        entry["config"] = opt(argv, "--config")
        entry["argv"] = [argv[0], *EFFECTIVE[-1]]
    line = json.dumps(entry)
    with open(os.path.join(STATE_DIR, "calls.jsonl"), "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.write(line + "\n")


def need_root() -> None:
    if os.geteuid() != 0:
        raise Fail(
            "[preflight] Some fatal errors occurred:\n\t[ERROR IsPrivilegedUser]: "
            "user is not running as root"
        )


def opt(args: list[str], name: str, default: str | None = None) -> str | None:
    """Value of ``--name value`` or ``--name=value``."""
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return default


def flag(args: list[str], name: str) -> bool:
    return any(a == name or a.startswith(name + "=") for a in args)


def positionals(args: list[str], valued: set[str]) -> list[str]:
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg.startswith("-"):
            if "=" not in arg and arg in valued:
                skip = True
            continue
        out.append(arg)
    return out


def my_address() -> str:
    try:
        out = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
    except OSError:
        out = []
    return out[0] if out else "127.0.0.1"


def new_token() -> str:
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
    part = lambda n: "".join(secrets.choice(alphabet) for _ in range(n))  # noqa: E731
    return f"{part(6)}.{part(16)}"


def make_ca() -> tuple[str, str]:
    """A real self-signed CA (so openssl can hash it) and its kubeadm discovery hash."""
    with tempfile.TemporaryDirectory() as tmp:
        crt, key = os.path.join(tmp, "ca.crt"), os.path.join(tmp, "ca.key")
        subprocess.run(
            [
                "openssl",
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-subj",
                "/CN=kubernetes",
                "-days",
                "3650",
                "-keyout",
                key,
                "-out",
                crt,
            ],
            check=True,
            capture_output=True,
        )
        with open(crt) as fh:
            pem = fh.read()
    return pem, ca_hash(pem)


def ca_hash(pem: str) -> str:
    pub = subprocess.run(
        ["openssl", "x509", "-pubkey", "-noout"],
        input=pem.encode(),
        capture_output=True,
        check=True,
    ).stdout
    der = subprocess.run(
        ["openssl", "pkey", "-pubin", "-outform", "der"], input=pub, capture_output=True, check=True
    ).stdout
    digest = subprocess.run(
        ["openssl", "dgst", "-sha256", "-hex"], input=der, capture_output=True, check=True
    ).stdout.decode()
    return digest.strip().split()[-1]


def write_file(path: str, text: str, mode: int = 0o600) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        fh.write(text)
    os.chmod(path, mode)


def kubeconfig(server: str, user: str) -> str:
    return (
        "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n"
        f"    certificate-authority: {ETC}/pki/ca.crt\n    server: {server}\n"
        "  name: kubernetes\ncontexts:\n- context:\n    cluster: kubernetes\n"
        f"    user: {user}\n  name: {user}@kubernetes\ncurrent-context: {user}@kubernetes\n"
        f"users:\n- name: {user}\n  user:\n    token: standin-{secrets.token_hex(8)}\n"
    )


def add_node(state: dict[str, Any], name: str, address: str, control_plane: bool) -> None:
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
    }
    if control_plane:
        labels["node-role.kubernetes.io/control-plane"] = ""
    state.setdefault("nodes", {})[name] = {
        "name": name,
        "address": address,
        "roles": ["control-plane"] if control_plane else [],
        "labels": labels,
        "ready": True,
        "unschedulable": False,
        "created": time.time(),
        "version": VERSION,
    }


def write_node_files(state: dict[str, Any], control_plane: bool) -> None:
    cluster = state["cluster"]
    write_file(f"{ETC}/pki/ca.crt", cluster["ca_crt"], 0o644)
    write_file(f"{ETC}/kubelet.conf", kubeconfig(cluster["server"], "system:node"))
    os.makedirs("/var/lib/kubelet", exist_ok=True)
    write_file("/var/lib/kubelet/config.yaml", "kind: KubeletConfiguration\n", 0o644)
    if control_plane:
        write_file(f"{ETC}/admin.conf", kubeconfig(cluster["server"], "kubernetes-admin"))
        os.makedirs(f"{ETC}/manifests", exist_ok=True)
        for comp in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"):
            write_file(f"{ETC}/manifests/{comp}.yaml", f"kind: Pod\nname: {comp}\n")
        os.makedirs("/var/lib/etcd/member", exist_ok=True)


def join_command(cluster: dict[str, Any], token: str) -> str:
    return (
        f"kubeadm join {cluster['endpoint']} --token {token} "
        f"--discovery-token-ca-cert-hash sha256:{cluster['ca_hash']} "
    )


def add_etcd_member(state: dict[str, Any], name: str, address: str) -> None:
    state.setdefault("etcd", {})[name] = {
        "ID": secrets.randbits(63),
        "name": name,
        "peerURLs": [f"https://{address}:2380"],
        "clientURLs": [f"https://{address}:2379"],
    }


def etcd_member_of(state: dict[str, Any], name: str, address: str) -> dict[str, Any] | None:
    for member in state.get("etcd", {}).values():
        if member["name"] == name or f"https://{address}:2380" in member["peerURLs"]:
            return dict(member)
    return None


def etcdctl(args: list[str]) -> str:
    need_root()
    if not os.path.exists(f"{ETC}/manifests/etcd.yaml"):
        raise Fail(
            '{"level":"warn","msg":"retrying of unary invoker failed","error":"rpc error: '
            'code = DeadlineExceeded desc = latest balancer error: connection refused"}'
        )
    pos = positionals(args, {"-w", "--write-out", "--endpoints", "--cacert", "--cert", "--key"})
    with locked_state(write=pos[:2] == ["member", "remove"]) as state:
        members = state.get("etcd", {})
        if pos[:2] == ["member", "list"]:
            listed = sorted(members.values(), key=lambda m: m["ID"])
            if (opt(args, "-w") or opt(args, "--write-out")) == "json":
                return json.dumps({"header": {"cluster_id": 1}, "members": listed}) + "\n"
            return "".join(
                f"{m['ID']:x}, started, {m['name']}, {m['peerURLs'][0]}, "
                f"{m['clientURLs'][0]}, false\n"
                for m in listed
            )
        if pos[:2] == ["member", "remove"] and len(pos) == 3:
            for name, member in list(members.items()):
                if f"{member['ID']:x}" == pos[2].lower():
                    del members[name]
                    return f"Member {pos[2]} removed from cluster 1\n"
            raise Fail(f"Error: etcdserver: member not found ({pos[2]})")
    raise Fail("stand-in etcdctl supports: member list [-w json], member remove ID")


# ---------------------------------------------------------------- kubeadm


# The head of kubeadm 1.20's `kubeadm config print init-defaults` (what scripts read).
INIT_DEFAULTS = """apiVersion: kubeadm.k8s.io/v1beta2
kind: InitConfiguration
localAPIEndpoint:
  advertiseAddress: 1.2.3.4
  bindPort: 6443
---
apiVersion: kubeadm.k8s.io/v1beta2
kind: ClusterConfiguration
certificatesDir: /etc/kubernetes/pki
kubernetesVersion: v1.20.0
"""


def kubeadm(args: list[str]) -> str:
    if not args:
        raise Fail("kubeadm: missing command")
    cmd = args[0]
    if cmd == "version":
        if opt(args, "-o") == "short" or opt(args, "--output") == "short":
            return f"{VERSION}\n"
        return f'kubeadm version: &version.Info{{GitVersion:"{VERSION}"}}\n'
    if args[:3] == ["config", "print", "init-defaults"]:
        return INIT_DEFAULTS
    if args[:3] == ["config", "print", "join-defaults"]:
        return JOIN_DEFAULTS
    if cmd == "init" and len(args) > 2 and args[1] == "phase" and args[2] == "upload-certs":
        return kubeadm_upload_certs(args[3:])
    if cmd == "init":
        return kubeadm_init(args[1:])
    if cmd == "token":
        return kubeadm_token(args[1:])
    if cmd == "join":
        return kubeadm_join(args[1:])
    if cmd == "reset":
        return kubeadm_reset(args[1:])
    raise Fail(f'unknown command "{cmd}" for "kubeadm"')


def kubeadm_init(args: list[str]) -> str:
    need_root()
    if os.path.exists(f"{ETC}/admin.conf") or os.path.exists(
        f"{ETC}/manifests/kube-apiserver.yaml"
    ):
        raise Fail(
            "[preflight] Some fatal errors occurred:\n\t[ERROR FileAvailable--etc-"
            "kubernetes-manifests-kube-apiserver.yaml]: /etc/kubernetes/manifests/"
            "kube-apiserver.yaml already exists"
        )
    address = opt(args, "--apiserver-advertise-address") or my_address()
    name = opt(args, "--node-name") or socket.gethostname()
    cp_endpoint = opt(args, "--control-plane-endpoint")
    endpoint = cp_endpoint or f"{address}:6443"
    if ":" not in endpoint:
        endpoint += ":6443"
    pem, digest = make_ca()
    token = new_token()
    with locked_state() as state:
        if state.get("cluster"):
            raise Fail(
                "[stand-in] a cluster already exists in this test bed; "
                "run `kubeadm reset -f` on its control plane first"
            )
        cluster = {
            "endpoint": endpoint,
            "server": f"https://{endpoint}",
            "control_plane_endpoint": cp_endpoint,
            "pod_cidr": opt(args, "--pod-network-cidr"),
            "service_cidr": opt(args, "--service-cidr", "10.96.0.0/12"),
            "kubernetes_version": opt(args, "--kubernetes-version", VERSION),
            "ca_crt": pem,
            "ca_hash": digest,
            "init_node": name,
            "created": time.time(),
        }
        state["cluster"] = cluster
        state["tokens"] = {token: {"created": time.time()}}
        state["certificate_key"] = secrets.token_hex(32) if flag(args, "--upload-certs") else None
        state["objects"] = {}
        add_node(state, name, address, control_plane=True)
        add_etcd_member(state, name, address)
        write_node_files(state, control_plane=True)
        cert_key = state["certificate_key"]
    out = [
        f"[init] Using Kubernetes version: {cluster['kubernetes_version']}",
        '[certs] Generating "ca" certificate and key',
        '[kubeconfig] Writing "admin.conf" kubeconfig file',
        f"[mark-control-plane] Marking the node {name} as control-plane",
        f"[bootstrap-token] Using token: {token}",
    ]
    if cert_key:
        out += [
            '[upload-certs] Storing the certificates in Secret "kubeadm-certs" '
            'in the "kube-system" Namespace',
            "[upload-certs] Using certificate key:",
            cert_key,
        ]
    out += [
        "",
        "Your Kubernetes control-plane has initialized successfully!",
        "",
        "To start using your cluster, you need to run the following as a regular user:",
        "",
        "  mkdir -p $HOME/.kube",
        "  sudo cp -i /etc/kubernetes/admin.conf $HOME/.kube/config",
        "  sudo chown $(id -u):$(id -g) $HOME/.kube/config",
        "",
    ]
    join = join_command(cluster, token)
    if cp_endpoint and cert_key:
        out += [
            "You can now join any number of the control-plane node running the following "
            "command on each as root:",
            "",
            f"  {join}\\",
            f"\t--control-plane --certificate-key {cert_key}",
            "",
        ]
    out += [
        "Then you can join any number of worker nodes by running the following on each as root:",
        "",
        f"{join}",
        "",
    ]
    return "\n".join(out)


def kubeadm_upload_certs(args: list[str]) -> str:
    need_root()
    if not flag(args, "--upload-certs"):
        return "[upload-certs] Skipping phase. Please see --upload-certs\n"
    config = opt(args, "--config")
    if config is not None:
        # Like kubeadm: the file must be a kubeadm configuration it can read.
        with open(config) as fh:
            text = fh.read()
        if "kind: InitConfiguration" not in text or "apiVersion: kubeadm.k8s.io/" not in text:
            raise Fail(f"unable to read config from {config!r}: no InitConfiguration")
    if not os.path.exists(f"{ETC}/admin.conf"):
        raise Fail(
            "error execution phase upload-certs: failed to load admin kubeconfig: "
            "open /etc/kubernetes/admin.conf: no such file or directory"
        )
    key = secrets.token_hex(32)
    with locked_state() as state:
        if not state.get("cluster"):
            raise Fail("couldn't reach the API server: connection refused")
        state["certificate_key"] = key
    return (
        '[upload-certs] Storing the certificates in Secret "kubeadm-certs" in the '
        f'"kube-system" Namespace\n[upload-certs] Using certificate key:\n{key}\n'
    )


def kubeadm_token(args: list[str]) -> str:
    if not args or args[0] not in ("create", "list"):
        raise Fail("kubeadm token: supported: create, list")
    if not os.path.exists(f"{ETC}/admin.conf"):
        raise Fail(
            "failed to load admin kubeconfig: open /etc/kubernetes/admin.conf: "
            "no such file or directory"
        )
    with locked_state(write=args[0] == "create") as state:
        cluster = state.get("cluster")
        if not cluster:
            raise Fail("couldn't reach the API server: connection refused")
        if args[0] == "list":
            return "TOKEN                     TTL\n" + "".join(
                f"{t}   23h\n" for t in state.get("tokens", {})
            )
        token = new_token()
        state.setdefault("tokens", {})[token] = {"created": time.time()}
    if flag(args, "--print-join-command"):
        return join_command(cluster, token) + "\n"
    return token + "\n"


def join_delay() -> float:
    env = os.environ.get("LCCN_STANDIN_JOIN_DELAY")
    if env:
        return float(env)
    try:
        with open(os.path.join(STATE_DIR, "join_delay")) as fh:
            return float(fh.read().strip() or 0)
    except (OSError, ValueError):
        return 0.0


JOIN_DEFAULTS = """apiVersion: kubeadm.k8s.io/v1beta2
kind: JoinConfiguration
discovery:
  bootstrapToken:
    apiServerEndpoint: kube-apiserver:6443
    token: abcdef.0123456789abcdef
nodeRegistration:
  name: node
"""

# The flags real kubeadm accepts beside --config (the rest must be in the file).
_MIXABLE = {"--config", "--ignore-preflight-errors", "--skip-phases", "--v", "-v"}


def join_args_from_config(args: list[str]) -> list[str]:
    """A JoinConfiguration file read into the flags the rest of the stand-in takes."""
    path = opt(args, "--config")
    assert path is not None
    for arg in args:
        name = arg.split("=", 1)[0]
        if name.startswith("-") and name not in _MIXABLE:
            raise Fail(f"can not mix '--config' with arguments [{name.lstrip('-')}]")
    with open(path) as fh:
        text = fh.read()
    if "kind: JoinConfiguration" not in text:
        raise Fail(f"unable to read config from {path!r}: no JoinConfiguration")

    def field(name: str) -> str | None:
        found = re.search(rf"^\s*{name}:\s*\"?([^\"\n]+)\"?\s*$", text, re.M)
        return found.group(1).strip() if found else None

    out = [field("apiServerEndpoint") or "", "--token", field("token") or ""]
    digest = re.search(r"sha256:[0-9a-f]{64}", text)
    out += ["--discovery-token-ca-cert-hash", digest.group(0) if digest else ""]
    if field("name"):
        out += ["--node-name", field("name") or ""]
    if re.search(r"^controlPlane:", text, re.M):
        out += ["--control-plane", "--certificate-key", field("certificateKey") or ""]
        if field("advertiseAddress"):
            out += ["--apiserver-advertise-address", field("advertiseAddress") or ""]
    return out


def kubeadm_join(args: list[str]) -> str:
    need_root()
    if opt(args, "--config") is not None:
        args = join_args_from_config(args)
        EFFECTIVE.append(args)
    valued = {
        "--token",
        "--discovery-token-ca-cert-hash",
        "--certificate-key",
        "--node-name",
        "--apiserver-advertise-address",
        "--cri-socket",
        "--config",
    }
    pos = positionals(args, valued)
    if not pos:
        raise Fail("[discovery] please provide the API server endpoint")
    endpoint = pos[0]
    token = opt(args, "--token")
    digest = opt(args, "--discovery-token-ca-cert-hash") or ""
    control_plane = flag(args, "--control-plane")
    cert_key = opt(args, "--certificate-key")
    name = opt(args, "--node-name") or socket.gethostname()
    address = opt(args, "--apiserver-advertise-address") or my_address()
    if os.path.exists(f"{ETC}/kubelet.conf"):
        raise Fail(
            "[preflight] Some fatal errors occurred:\n\t[ERROR FileAvailable--etc-"
            "kubernetes-kubelet.conf]: /etc/kubernetes/kubelet.conf already exists"
        )
    with locked_state(write=False) as state:
        cluster = state.get("cluster")
        if not cluster or cluster["endpoint"] != endpoint:
            raise Fail(
                f"error execution phase preflight: couldn't validate the identity of "
                f'the API Server: Get "https://{endpoint}/api/v1/namespaces/kube-public/'
                f'configmaps/cluster-info": dial tcp {endpoint}: connect: connection refused'
            )
        if token not in state.get("tokens", {}):
            raise Fail(
                "error execution phase preflight: couldn't validate the identity of the "
                "API Server: could not find a JWS signature in the cluster-info ConfigMap "
                f'for token ID "{(token or "").split(".")[0]}"'
            )
        if digest.removeprefix("sha256:") != cluster["ca_hash"]:
            raise Fail(
                "error execution phase preflight: couldn't validate the identity of the "
                "API Server: cluster CA found in cluster-info ConfigMap is invalid: none "
                'of the public keys "sha256:..." are pinned'
            )
        if control_plane:
            if not cluster.get("control_plane_endpoint"):
                raise Fail(
                    "error execution phase preflight: One or more conditions for hosting "
                    "a new control plane instance is not satisfied.\n\nunable to add a new "
                    "control plane instance to a cluster that doesn't have a stable "
                    "controlPlaneEndpoint address"
                )
            if not cert_key or cert_key != state.get("certificate_key"):
                raise Fail(
                    "error execution phase control-plane-prepare/download-certs: error "
                    "downloading certs: error decoding certificate key"
                )
        if name in state.get("nodes", {}):
            raise Fail(
                f'error execution phase kubelet-start: a Node with name "{name}" and '
                'status "Ready" already exists in the cluster. You must delete the '
                "existing Node or change the name of this new joining Node"
            )
        if control_plane and etcd_member_of(state, name, address) is not None:
            raise Fail(
                "error execution phase control-plane-join/etcd: error creating local etcd "
                f"static pod manifest file: etcdserver: Peer URLs already exists ({address})"
            )
    delay = join_delay()
    if delay > 0:
        time.sleep(delay)  # the artificial cost of a join, outside the lock
    with locked_state() as state:
        add_node(state, name, address, control_plane=control_plane)
        if control_plane:
            add_etcd_member(state, name, address)
        write_node_files(state, control_plane=control_plane)
    if control_plane:
        return (
            "[preflight] Running pre-flight checks\n[download-certs] Downloading the "
            'certificates in Secret "kubeadm-certs" in the "kube-system" Namespace\n'
            "This node has joined the cluster and a new control plane instance was created\n"
        )
    return (
        "[preflight] Running pre-flight checks\n[kubelet-start] Starting the kubelet\n\n"
        "This node has joined the cluster:\n* Certificate signing request was sent to "
        "apiserver and a response was received.\n"
    )


def kubeadm_reset(args: list[str]) -> str:
    need_root()
    name = socket.gethostname()
    was_cp = os.path.exists(f"{ETC}/manifests/kube-apiserver.yaml")
    for path in (
        f"{ETC}/admin.conf",
        f"{ETC}/kubelet.conf",
        f"{ETC}/pki",
        f"{ETC}/manifests",
        "/var/lib/kubelet",
        "/var/lib/etcd",
    ):
        if os.path.isdir(path):
            for entry in os.listdir(path):
                full = os.path.join(path, entry)
                shutil.rmtree(full) if os.path.isdir(full) else os.unlink(full)
            if path.startswith(ETC + "/"):
                os.rmdir(path)
        elif os.path.exists(path):
            os.unlink(path)
    with locked_state() as state:
        nodes = state.get("nodes", {})
        if was_cp:
            state.get("etcd", {}).pop(name, None)
        if was_cp and name in nodes:
            # Like kubeadm: a control plane leaves etcd; its Node object stays NotReady.
            nodes[name]["ready"] = False
            others = [n for n in nodes.values() if "control-plane" in n["roles"] and n["ready"]]
            if not others:
                state.clear()  # the last control plane is gone: so is the cluster
        elif name in nodes:
            nodes[name]["ready"] = False
    return (
        "[reset] Deleted contents of the etcd data directory: /var/lib/etcd\n"
        "[reset] Stopping the kubelet service\n"
    )


# ---------------------------------------------------------------- kubectl


def kubectl_config(args: list[str]) -> str:
    path = (
        opt(args, "--kubeconfig")
        or os.environ.get("KUBECONFIG")
        or os.path.expanduser("~/.kube/config")
    )
    if not os.access(path, os.R_OK):
        raise Fail(
            "The connection to the server localhost:8080 was refused - did you "
            "specify the right host or port?"
        )
    return path


def age(created: float) -> str:
    seconds = int(time.time() - created)
    return f"{seconds}s" if seconds < 120 else f"{seconds // 60}m"


def node_json(node: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node["name"], "labels": node["labels"]},
        "spec": {"unschedulable": node["unschedulable"]} if node["unschedulable"] else {},
        "status": {
            "addresses": [
                {"type": "InternalIP", "address": node["address"]},
                {"type": "Hostname", "address": node["name"]},
            ],
            "conditions": [{"type": "Ready", "status": "True" if node["ready"] else "False"}],
            "nodeInfo": {"kubeletVersion": node["version"]},
        },
    }


def node_row(node: dict[str, Any]) -> list[str]:
    status = "Ready" if node["ready"] else "NotReady"
    if node["unschedulable"]:
        status += ",SchedulingDisabled"
    roles = ",".join(node["roles"]) or "<none>"
    return [node["name"], status, roles, age(node["created"]), node["version"]]


def table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = [
        "   ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip() for r in [header, *rows]
    ]
    return "\n".join(lines) + "\n"


def jsonpath(obj: Any, expr: str) -> str:
    expr = expr.strip()
    if expr.startswith("{") and expr.endswith("}"):
        expr = expr[1:-1]
    parts = re.split(r"(?<!\\)\.", expr.lstrip("."))
    for part in parts:
        if not part:
            continue
        part = part.replace("\\.", ".")
        obj = obj.get(part) if isinstance(obj, dict) else None
        if obj is None:
            return ""
    return obj if isinstance(obj, str) else json.dumps(obj)


def output(
    args: list[str],
    items: list[dict[str, Any]],
    single: bool,
    rows: tuple[list[str], list[list[str]]] | None,
) -> str:
    fmt = opt(args, "-o") or opt(args, "--output")
    if fmt == "json":
        data = items[0] if single else {"apiVersion": "v1", "kind": "List", "items": items}
        return json.dumps(data, indent=4) + "\n"
    if fmt == "name":
        return "".join(f"{i['kind'].lower()}/{i['metadata']['name']}\n" for i in items)
    if fmt and fmt.startswith("jsonpath="):
        return jsonpath(items[0] if single else {"items": items}, fmt.split("=", 1)[1])
    assert rows is not None
    return table(*rows)


def ns_of(args: list[str]) -> str:
    return opt(args, "-n") or opt(args, "--namespace") or "default"


VALUED = {
    "-n",
    "--namespace",
    "-o",
    "--output",
    "-f",
    "--filename",
    "--kubeconfig",
    "--field-selector",
    "-l",
    "--selector",
    "--timeout",
    "--clusterrole",
    "--serviceaccount",
    "--grace-period",
}


def kubectl(args: list[str]) -> str:
    kubectl_config(args)
    pos = positionals(args, VALUED)
    if not pos:
        raise Fail("kubectl: missing command")
    with locked_state(
        write=pos[0] in ("label", "create", "drain", "delete", "cordon", "uncordon", "apply")
    ) as state:
        if not state.get("cluster"):
            raise Fail(
                "The connection to the server was refused - did you specify the right host or port?"
            )
        return kubectl_cmd(state, pos, args)


def find_node(state: dict[str, Any], name: str) -> dict[str, Any]:
    node = state.get("nodes", {}).get(name)
    if node is None:
        raise Fail(f'Error from server (NotFound): nodes "{name}" not found')
    return node


def kubectl_cmd(state: dict[str, Any], pos: list[str], args: list[str]) -> str:
    verb = pos[0]
    nodes = state.setdefault("nodes", {})
    objects = state.setdefault("objects", {})
    if verb == "cluster-info":
        server = state["cluster"]["server"]
        green, yellow, reset = "\x1b[0;32m", "\x1b[0;33m", "\x1b[0m"
        return (
            f"{green}Kubernetes control plane{reset} is running at {yellow}{server}{reset}\n"
            f"{green}CoreDNS{reset} is running at {yellow}{server}/api/v1/namespaces/"
            f"kube-system/services/kube-dns:dns/proxy{reset}\n"
        )
    if verb == "version":
        return f"Client Version: {VERSION}\nServer Version: {VERSION}\n"
    if verb == "get":
        return kubectl_get(state, pos[1:], args)
    if verb == "describe":
        if len(pos) < 3 or pos[1] not in ("secret", "secrets"):
            raise Fail("stand-in kubectl describe supports: secret NAME")
        secret = objects.get(f"Secret/{ns_of(args)}/{pos[2]}")
        if secret is None:
            raise Fail(f'Error from server (NotFound): secrets "{pos[2]}" not found')
        token = base64.b64decode(secret["data"].get("token", "")).decode()
        return (
            f"Name:         {pos[2]}\nNamespace:    {ns_of(args)}\n"
            f"Type:  {secret['type']}\n\nData\n====\nca.crt:     1099 bytes\n"
            f"namespace:  {len(ns_of(args))} bytes\ntoken:      {token}\n"
        )
    if verb == "label":
        if len(pos) < 4 or pos[1] not in ("node", "nodes", "no"):
            raise Fail("stand-in kubectl label supports: nodes NAME key=value|key-")
        node = find_node(state, pos[2])
        for item in pos[3:]:
            if item.endswith("-") and "=" not in item:
                node["labels"].pop(item[:-1], None)
                continue
            key, _, value = item.partition("=")
            if (
                key in node["labels"]
                and node["labels"][key] != value
                and not flag(args, "--overwrite")
            ):
                raise Fail(
                    f"error: '{key}' already has a value ({node['labels'][key]}), "
                    "and --overwrite is false"
                )
            node["labels"][key] = value
        return f"node/{pos[2]} labeled\n"
    if verb in ("drain", "cordon", "uncordon"):
        if len(pos) < 2:
            raise Fail(f"error: USAGE: {verb} NODE [flags]")
        node = find_node(state, pos[1])
        node["unschedulable"] = verb != "uncordon"
        if verb == "drain":
            return f"node/{pos[1]} cordoned\nnode/{pos[1]} drained\n"
        return f"node/{pos[1]} {verb}ed\n"
    if verb == "delete":
        if len(pos) >= 3 and pos[1] in ("node", "nodes", "no"):
            for name in pos[2:]:
                find_node(state, name)
                del nodes[name]
            return "".join(f'node "{n}" deleted\n' for n in pos[2:])
        if len(pos) >= 3 and pos[1] in ("secret", "secrets"):
            key = f"Secret/{ns_of(args)}/{pos[2]}"
            if objects.pop(key, None) is None:
                raise Fail(f'Error from server (NotFound): secrets "{pos[2]}" not found')
            return f'secret "{pos[2]}" deleted\n'
        if len(pos) >= 3 and pos[1] in VOLUME_KINDS:
            return delete_volumes(state, VOLUME_KINDS[pos[1]], pos[2:], args)
        raise Fail("stand-in kubectl delete supports: node, secret, pv, pvc NAME")
    if verb in ("create", "apply"):
        if len(pos) >= 3 and pos[1] == "clusterrolebinding":
            return create_objects(
                state,
                [
                    {
                        "kind": "ClusterRoleBinding",
                        "metadata": {"name": pos[2]},
                        "roleRef": {"name": opt(args, "--clusterrole")},
                        "subjects": [opt(args, "--serviceaccount")],
                    }
                ],
                verb,
            )
        path = opt(args, "-f") or opt(args, "--filename")
        if not path:
            raise Fail("error: must specify one of -f and -k")
        if path == "-":
            return create_objects(state, parse_manifests(sys.stdin.read()), verb)
        with open(path) as fh:
            return create_objects(state, parse_manifests(fh.read()), verb)
    raise Fail(f'error: unknown command "{verb}" for "kubectl" (stand-in)')


def kubectl_get(state: dict[str, Any], pos: list[str], args: list[str]) -> str:
    if not pos:
        raise Fail("error: You must specify the type of resource to get.")
    kind = pos[0]
    names = pos[1:]
    if kind in ("node", "nodes", "no"):
        nodes = state.get("nodes", {})
        selected = (
            [find_node(state, n) for n in names]
            if names
            else sorted(nodes.values(), key=lambda n: n["created"])
        )
        return output(
            args,
            [node_json(n) for n in selected],
            bool(names),
            (["NAME", "STATUS", "ROLES", "AGE", "VERSION"], [node_row(n) for n in selected]),
        )
    if kind in ("secret", "secrets"):
        ns = ns_of(args)
        found = [
            o for k, o in sorted(state.get("objects", {}).items()) if k.startswith(f"Secret/{ns}/")
        ]
        if names:
            found = [o for o in found if o["metadata"]["name"] in names]
            if not found:
                raise Fail(f'Error from server (NotFound): secrets "{names[0]}" not found')
        if not found and not (opt(args, "-o") or opt(args, "--output")):
            sys.stderr.write(f"No resources found in {ns} namespace.\n")
            return ""
        rows = [
            [o["metadata"]["name"], o["type"], str(len(o["data"])), age(o["created"])]
            for o in found
        ]
        return output(args, found, bool(names), (["NAME", "TYPE", "DATA", "AGE"], rows))
    if kind in VOLUME_KINDS:
        return get_volumes(state, VOLUME_KINDS[kind], names, args)
    if kind in ("pod", "pods", "po"):
        fmt = opt(args, "-o") or opt(args, "--output")
        if fmt == "json":
            return json.dumps({"apiVersion": "v1", "kind": "List", "items": []}) + "\n"
        sys.stderr.write("No resources found\n")
        return ""
    raise Fail(f'error: the server doesn\'t have a resource type "{kind}"')


def parse_manifests(text: str) -> list[dict[str, Any]]:
    text = text.strip()
    if text.startswith("{"):
        data = json.loads(text)
        return data.get("items", [data]) if data.get("kind") == "List" else [data]
    try:
        import yaml
    except ImportError:
        return [simple_yaml(doc) for doc in re.split(r"^---\s*$", text, flags=re.M) if doc.strip()]
    return [d for d in yaml.safe_load_all(text) if d]


def simple_yaml(doc: str) -> dict[str, Any]:
    """Enough YAML for manifests: nested maps of scalars by indentation."""
    root: dict[str, Any] = {}
    stack: list[tuple[int, dict[str, Any]]] = [(-1, root)]
    for raw in doc.splitlines():
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        indent = len(raw) - len(raw.lstrip())
        key, _, value = raw.strip().partition(":")
        while stack[-1][0] >= indent:
            stack.pop()
        value = value.strip().strip("'\"")
        if value:
            stack[-1][1][key.lstrip("- ")] = value
        else:
            child: dict[str, Any] = {}
            stack[-1][1][key.lstrip("- ")] = child
            stack.append((indent, child))
    return root


def create_objects(state: dict[str, Any], docs: list[dict[str, Any]], verb: str) -> str:
    objects = state.setdefault("objects", {})
    out = []
    for doc in docs:
        kind = doc.get("kind", "")
        meta = doc.get("metadata") or {}
        name = meta.get("name", "")
        cluster_scoped = kind.startswith("Cluster") or kind == "PersistentVolume"
        ns = "" if cluster_scoped else meta.get("namespace") or "default"
        key = f"{kind}/{ns}/{name}"
        if key in objects and verb == "create":
            raise Fail(
                f"Error from server (AlreadyExists): error when creating: "
                f'{kind.lower()}s "{name}" already exists'
            )
        obj = {
            "kind": kind,
            "metadata": {"name": name, "namespace": ns},
            "created": time.time(),
            "type": doc.get("type", ""),
            "data": {},
        }
        if kind == "Secret" and doc.get("type") == "kubernetes.io/service-account-token":
            token = (
                "eyJhbGciOiJSUzI1NiJ9."
                + base64.urlsafe_b64encode(json.dumps({"sub": name}).encode()).decode().rstrip("=")
                + "."
                + secrets.token_urlsafe(32)
            )
            obj["data"] = {
                "token": base64.b64encode(token.encode()).decode(),
                "ca.crt": base64.b64encode(state["cluster"]["ca_crt"].encode()).decode(),
                "namespace": base64.b64encode(ns.encode()).decode(),
            }
        action = "created" if verb == "create" or key not in objects else "configured"
        if kind in ("PersistentVolume", "PersistentVolumeClaim"):
            obj = volume_object(state, doc, key, objects.get(key))
        objects[key] = obj
        out.append(f"{kind.lower()}/{name} {action}\n")
    return "".join(out)


# ---- PersistentVolumes and their claims --------------------------------------------
#
# As the PV controller makes them: a new PV is Available; a claim naming a PV
# (spec.volumeName) that is Available binds it (both Bound, the PV's claimRef set); a
# deleted claim leaves its PV Released (reclaim policy Retain); a Bound PV is
# deleted only once its claim is gone (the pv-protection finalizer: it waits).

VOLUME_KINDS = {
    "pv": "PersistentVolume",
    "persistentvolume": "PersistentVolume",
    "persistentvolumes": "PersistentVolume",
    "pvc": "PersistentVolumeClaim",
    "persistentvolumeclaim": "PersistentVolumeClaim",
    "persistentvolumeclaims": "PersistentVolumeClaim",
}


def volume_object(
    state: dict[str, Any], doc: dict[str, Any], key: str, before: dict[str, Any] | None
) -> dict[str, Any]:
    kind, meta = doc["kind"], doc.get("metadata") or {}
    if before is not None and kind == "PersistentVolume":
        if before["spec"].get("nfs") != (doc.get("spec") or {}).get("nfs"):
            raise Fail(
                f'The PersistentVolume "{meta.get("name")}" is invalid: '
                "spec.persistentvolumesource: Forbidden: spec.persistentvolumesource is "
                "immutable after creation"
            )
        return before
    obj = {
        "apiVersion": "v1",
        "kind": kind,
        "metadata": {"name": meta.get("name", ""), "created": time.time()},
        "created": time.time(),
        "type": "",
        "data": {},
        "spec": dict(doc.get("spec") or {}),
        "status": {"phase": "Available" if kind == "PersistentVolume" else "Pending"},
    }
    if kind == "PersistentVolumeClaim":
        ns = meta.get("namespace") or "default"
        obj["metadata"]["namespace"] = ns
        pv = state["objects"].get(f"PersistentVolume//{obj['spec'].get('volumeName', '')}")
        if pv is not None and pv["status"]["phase"] == "Available":
            pv["status"]["phase"] = obj["status"]["phase"] = "Bound"
            pv["spec"]["claimRef"] = {"kind": kind, "namespace": ns, "name": meta.get("name")}
    return obj


def _volume_key(kind: str, name: str, args: list[str]) -> str:
    ns = "" if kind == "PersistentVolume" else ns_of(args)
    return f"{kind}/{ns}/{name}"


def get_volumes(state: dict[str, Any], kind: str, names: list[str], args: list[str]) -> str:
    objects = state.get("objects", {})
    ns = "" if kind == "PersistentVolume" else ns_of(args)
    found = [o for k, o in sorted(objects.items()) if k.startswith(f"{kind}/{ns}/")]
    if names:
        found = [o for o in found if o["metadata"]["name"] in names]
        if not found:
            plural = "persistentvolumes" if kind == "PersistentVolume" else "persistentvolumeclaims"
            raise Fail(f'Error from server (NotFound): {plural} "{names[0]}" not found')
    items = [{k: o[k] for k in ("apiVersion", "kind", "metadata", "spec", "status")} for o in found]
    rows = [[o["metadata"]["name"], o["status"]["phase"], age(o["created"])] for o in found]
    return output(args, items, bool(names), (["NAME", "STATUS", "AGE"], rows))


def delete_volumes(state: dict[str, Any], kind: str, names: list[str], args: list[str]) -> str:
    objects = state.setdefault("objects", {})
    out = []
    for name in names:
        key = _volume_key(kind, name, args)
        obj = objects.get(key)
        if obj is None:
            if flag(args, "--ignore-not-found"):
                continue
            raise Fail(f'Error from server (NotFound): {kind.lower()}s "{name}" not found')
        if kind == "PersistentVolume" and obj["status"]["phase"] == "Bound":
            # pv-protection: the deletion waits for the claim; we refuse instead of waiting.
            raise Fail(f'persistentvolume "{name}" is Bound: its claim must go first')
        del objects[key]
        if kind == "PersistentVolumeClaim":
            pv = objects.get(f"PersistentVolume//{obj['spec'].get('volumeName', '')}")
            if pv is not None and pv["status"]["phase"] == "Bound":
                pv["status"]["phase"] = "Released"
        out.append(f'{kind.lower()} "{name}" deleted\n')
    return "".join(out)


def main(argv: list[str]) -> int:
    tools = {"kubeadm": kubeadm, "kubectl": kubectl, "etcdctl": etcdctl}
    if len(argv) < 2 or argv[1] not in tools:
        sys.stderr.write("usage: k8s_standin.py kubeadm|kubectl|etcdctl ARGS...\n")
        return 2
    tool, args = argv[1], argv[2:]
    code = 0
    try:
        text = tools[tool](args)
        sys.stdout.write(text)
    except Fail as exc:
        sys.stderr.write(str(exc) + "\n")
        code = exc.code
    finally:
        sys.stdout.flush()
    record(tool, args, code)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
