#!/usr/bin/python3
"""A kubelet stand-in for the ``k8s`` tier's SSH test hosts (no container runtime here).

Runs with the system ``/usr/bin/python3`` on a test host (the host's private /root
hides any other Python) and uses only the standard library, the host's ``kubectl``
(to read kubeadm's YAML as JSON) and ``openssl`` (the node's key and CSR). It is
installed on the host's PATH as ``kubelet`` and started by the ``systemctl`` shim
(``tests/testbed/systemctl_shim.sh``) when kubeadm runs ``systemctl restart
kubelet``. ``systemctl restart`` (SIGHUP) leaves the static pods running for the
next instance to adopt, as containers outlive a kubelet restart; ``systemctl stop``
(SIGTERM, which ``kubeadm reset`` sends before it would remove the containers
through a runtime this host does not have) stops them too.

What it does, as far as kubeadm, the control plane and ``kubectl`` can tell:

* runs the static-pod manifests of ``staticPodPath`` (``/etc/kubernetes/manifests``:
  etcd, kube-apiserver, kube-controller-manager, kube-scheduler) as host processes,
  the first container's ``command`` + ``args`` with its ``env``; restarts a process
  that exits (with a back-off) or whose manifest changes, stops one whose manifest
  goes; on stop, stops them all, the API server before etcd (without etcd the API
  server ignores SIGTERM). Output goes to ``/tmp/kubelet-standin/<pod>.log``, the
  stand-in's own to ``kubelet.log`` there;
* answers ``GET /healthz`` on ``healthzBindAddress:healthzPort`` (127.0.0.1:10248);
* the kubelet's TLS bootstrap: with ``bootstrap-kubelet.conf`` (kubeadm join) it
  makes an ECDSA key and a CSR for ``system:node:<name>``, waits until the
  controller-manager approves and signs it, writes
  ``/var/lib/kubelet/pki/kubelet-client-current.pem`` and ``kubelet.conf``; with
  kubeadm init's ``kubelet.conf`` it stores that client certificate the same way;
* registers its Node (labels and taints from ``kubeadm-flags.env``, InternalIP,
  capacity of the machine, Ready) and keeps it Ready: renews its Lease in
  ``kube-node-lease`` and refreshes the Node's conditions every 10 s. A Node deleted
  under it is not registered again (as the kubelet, which registers at start only);
* posts a mirror pod per static pod (``<pod>-<node>``, with the manifest's
  annotations, which kubeadm reads to find etcd and the API server endpoints);
* every second, marks the pods bound to its node Running and Ready (one running,
  ready status per container) and completes the deletion of those being deleted
  (``gracePeriodSeconds: 0``), so ``kubectl drain`` and Deployments finish.

What it does not do: run containers or pull images (a pod's containers do not
exist; a static pod's command runs on the host, hostNetwork or not), pod networking
(no CNI: pod IPs are taken from the node's podCIDR but nothing answers on them),
volumes, probes, resource limits, logs/exec/port-forward (nothing listens on
10250), Jobs reaching completion (their pods stay Running), certificate rotation,
eviction, node status beyond Ready. A mirror pod's status says Running as soon as
its manifest is read, whether or not the process is up.

Usage (normally through the shims)::

    kubelet [--version]
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import hashlib
import http.client
import http.server
import ipaddress
import json
import os
import re
import shlex
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from typing import Any

VERSION = os.environ.get("LCCN_KUBELET_VERSION", "v1.20.2")
KUBECTL = os.environ.get("LCCN_KUBECTL", "kubectl")
KUBECONFIG = "/etc/kubernetes/kubelet.conf"
BOOTSTRAP_KUBECONFIG = "/etc/kubernetes/bootstrap-kubelet.conf"
KUBELET_DIR = "/var/lib/kubelet"
CONFIG = f"{KUBELET_DIR}/config.yaml"
FLAGS_ENV = f"{KUBELET_DIR}/kubeadm-flags.env"
PKI = f"{KUBELET_DIR}/pki"
CLIENT_PEM = f"{PKI}/kubelet-client-current.pem"
# Where the systemctl shim finds the running stand-in.
PIDFILE = os.environ.get("LCCN_KUBELET_PIDFILE", f"{KUBELET_DIR}/standin.pid")
LOG_DIR = os.environ.get("LCCN_KUBELET_LOG_DIR", "/tmp/kubelet-standin")
# Where the static pods' processes are recorded (survives a restart of the stand-in).
POD_STATE = f"{KUBELET_DIR}/standin-pods"
# Stop order: the API server's clients, then the API server, which must go before
# etcd (without etcd it ignores SIGTERM); etcd last.
STOP_ORDER = ("kube-scheduler", "kube-controller-manager", "kube-apiserver")
HEARTBEAT = 10.0
LEASE_SECONDS = 40

_stop = threading.Event()
# Set by SIGHUP: exit and leave the static pods running (systemctl restart kubelet).
_keep_pods = threading.Event()


def log(message: str) -> None:
    stamp = datetime.datetime.now().strftime("%H:%M:%S.%f")[:-3]
    print(f"{stamp} kubelet-standin: {message}", file=sys.stderr, flush=True)


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# ----------------------------------------------------------------------- reading kubeadm's files


def _kubectl_json(path: str, *args: str) -> dict[str, Any]:
    """``kubectl ARGS -o json`` (no server) on the file ``path``, its JSON answer."""
    proc = subprocess.run(
        [KUBECTL, *args, "-o", "json"], capture_output=True, text=True, timeout=30, check=False
    )
    if proc.returncode != 0:
        raise ValueError(f"cannot read {path}: {proc.stderr.strip()}")
    data: dict[str, Any] = json.loads(proc.stdout)
    return data


def yaml_to_json(path: str) -> dict[str, Any]:
    """A YAML object (a manifest) as JSON, converted by ``kubectl`` without a server."""
    return _kubectl_json(path, "annotate", "--local", "-f", path, "lccn.standin/read=1")


def read_kubeconfig(path: str) -> dict[str, Any]:
    """The kubeconfig's current cluster and user, files inlined (``kubectl config view``)."""
    config = _kubectl_json(path, "config", "view", "--raw", "--flatten", "--kubeconfig", path)
    context_name = config.get("current-context")
    context = next(c["context"] for c in config["contexts"] if c["name"] == context_name)
    cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
    user = next(u["user"] for u in config["users"] if u["name"] == context["user"])
    return {"cluster": cluster, "user": user}


def kubelet_config() -> dict[str, str]:
    """The few KubeletConfiguration fields used here (top-level scalars of config.yaml)."""
    out = {
        "staticPodPath": "/etc/kubernetes/manifests",
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": "10248",
    }
    with contextlib.suppress(OSError), open(CONFIG) as f:
        for line in f:
            match = re.match(r"^(\w+):\s*(.*?)\s*$", line)
            if match and match.group(1) in out and match.group(2):
                out[match.group(1)] = match.group(2).strip("'\"")
    return out


def kubeadm_flags() -> dict[str, str]:
    """``--name=value`` flags of ``KUBELET_KUBEADM_ARGS`` in kubeadm-flags.env."""
    flags: dict[str, str] = {}
    with contextlib.suppress(OSError), open(FLAGS_ENV) as f:
        for line in f:
            if line.startswith("KUBELET_KUBEADM_ARGS="):
                value = line.split("=", 1)[1].strip().strip('"')
                for word in shlex.split(value):
                    name, _, val = word.lstrip("-").partition("=")
                    flags[name] = val
    return flags


# ------------------------------------------------------------------------------- static pods


def proc_start_time(pid: int) -> str | None:
    """The process's start time (field 22 of /proc/PID/stat), None when gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] == "Z" else fields[19]


class StaticPod:
    """One static-pod manifest run as a host process.

    The process runs in a session of its own and is recorded in
    ``POD_STATE/<manifest>.json`` (pid, start time, manifest digest), so it outlives a
    restart of the stand-in, which adopts it, like containers outlive a kubelet.
    """

    def __init__(self, path: str, digest: str, pod: dict[str, Any]) -> None:
        self.path = path
        self.digest = digest
        self.name = str(pod.get("metadata", {}).get("name") or os.path.basename(path))
        self.pod = pod
        container = (pod.get("spec", {}).get("containers") or [{}])[0]
        self.argv = [*(container.get("command") or []), *(container.get("args") or [])]
        self.env = {
            e["name"]: str(e.get("value", "")) for e in container.get("env") or [] if "name" in e
        }
        self.proc: subprocess.Popen[bytes] | None = None  # ours to reap
        self.pid = 0
        self.started_at: str | None = None
        self.failures = 0
        self.next_start = 0.0
        self.adopt()

    @property
    def state_file(self) -> str:
        return os.path.join(POD_STATE, f"{os.path.basename(self.path)}.json")

    def adopt(self) -> None:
        """Take over the process an earlier stand-in started for this same manifest."""
        try:
            with open(self.state_file) as f:
                state = json.load(f)
        except (OSError, ValueError):
            return
        pid, started_at = int(state.get("pid", 0)), state.get("startTime")
        if state.get("digest") != self.digest:
            self.pid, self.started_at = pid, started_at
            log(f"{self.name}: manifest changed since pid {pid} started")
            self.stop()
        elif pid and proc_start_time(pid) == started_at:
            self.pid, self.started_at = pid, started_at
            log(f"{self.name}: adopted pid {pid}")

    def alive(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            return False
        return bool(self.pid) and proc_start_time(self.pid) == self.started_at

    def start(self) -> None:
        if not self.argv:
            log(f"{self.name}: no command in {self.path}")
            self.next_start = time.monotonic() + 30
            return
        os.makedirs(LOG_DIR, exist_ok=True)
        with open(os.path.join(LOG_DIR, f"{self.name}.log"), "ab") as out:
            try:
                self.proc = subprocess.Popen(
                    self.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=out,
                    env={**os.environ, **self.env},
                    start_new_session=True,  # survives a restart of the stand-in
                )
            except OSError as exc:
                log(f"{self.name}: cannot start {self.argv[0]}: {exc}")
                self.failed()
                return
        self.pid = self.proc.pid
        self.started_at = proc_start_time(self.pid)
        state = {"pid": self.pid, "startTime": self.started_at, "digest": self.digest}
        write_atomic(self.state_file, json.dumps(state).encode(), 0o644)
        log(f"{self.name}: started pid {self.pid}")

    def failed(self) -> None:
        self.proc, self.pid, self.started_at = None, 0, None
        with contextlib.suppress(OSError):
            os.unlink(self.state_file)
        self.failures += 1
        self.next_start = time.monotonic() + min(10.0, 0.5 * 2**self.failures)

    def check(self) -> None:
        if not self.pid:
            if time.monotonic() >= self.next_start:
                self.start()
            return
        if not self.alive():
            code = self.proc.returncode if self.proc is not None else "?"
            log(f"{self.name}: exited with {code}; restarting")
            self.failed()

    def stop(self, grace: float = 15.0) -> None:
        if self.pid and self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGTERM)
            deadline = time.monotonic() + grace
            while self.alive() and time.monotonic() < deadline:
                time.sleep(0.1)
            if self.alive():
                log(f"{self.name}: no exit {grace:g} s after SIGTERM; SIGKILL")
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, signal.SIGKILL)
                while self.alive() and time.monotonic() < deadline + 10:
                    time.sleep(0.1)
            log(f"{self.name}: stopped")
        self.proc, self.pid, self.started_at = None, 0, None
        with contextlib.suppress(OSError):
            os.unlink(self.state_file)


def stop_rank(pod: StaticPod) -> int:
    """Stop order: the API server's clients, the API server, anything else, etcd last."""
    command = os.path.basename(pod.argv[0]) if pod.argv else ""
    if command in STOP_ORDER:
        return STOP_ORDER.index(command)
    return 99 if command == "etcd" else len(STOP_ORDER)


class StaticPods(threading.Thread):
    """Keeps one process per manifest of the static-pod directory."""

    def __init__(self, directory: str) -> None:
        super().__init__(name="static-pods", daemon=True)
        self.directory = directory
        self.pods: dict[str, StaticPod] = {}
        self.lock = threading.Lock()

    def scan(self) -> None:
        seen: dict[str, str] = {}
        with contextlib.suppress(FileNotFoundError):
            for entry in sorted(os.listdir(self.directory)):
                if entry.startswith(".") or not entry.endswith((".yaml", ".yml", ".json")):
                    continue
                path = os.path.join(self.directory, entry)
                with contextlib.suppress(OSError), open(path, "rb") as f:
                    seen[path] = hashlib.sha256(f.read()).hexdigest()
        for path in [p for p in self.pods if seen.get(p) != self.pods[p].digest]:
            log(f"manifest {path} changed or removed")
            self.pods.pop(path).stop()
        for path, digest in seen.items():
            if path in self.pods:
                continue
            try:
                pod = StaticPod(path, digest, yaml_to_json(path))
            except (ValueError, OSError, subprocess.TimeoutExpired) as exc:
                log(str(exc))  # a manifest being written: read it again next round
                continue
            self.pods[path] = pod

    def stop_orphans(self) -> None:
        """Stop what an earlier stand-in ran for manifests that are gone since."""
        with contextlib.suppress(FileNotFoundError):
            for entry in os.listdir(POD_STATE):
                manifest = os.path.join(self.directory, entry.removesuffix(".json"))
                if entry.endswith(".json") and not os.path.exists(manifest):
                    orphan = StaticPod(manifest, "", {"metadata": {"name": entry}})
                    orphan.stop()  # adopted with a digest mismatch: stopped if it runs

    def run(self) -> None:
        with self.lock:
            self.stop_orphans()
        while not _stop.is_set():
            with self.lock:
                if _stop.is_set():
                    break
                self.scan()
                for pod in self.pods.values():
                    pod.check()
            _stop.wait(1.0)

    def snapshot(self) -> list[StaticPod]:
        """The current static pods (for their mirror pods)."""
        with self.lock:
            return list(self.pods.values())

    def stop_all(self) -> None:
        """Stop every static pod, in :func:`stop_rank` order."""
        with self.lock:
            for pod in sorted(self.pods.values(), key=stop_rank):
                pod.stop()
            self.pods.clear()


# ----------------------------------------------------------------------------- health server


class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        ok = self.path.split("?")[0] in ("/healthz", "/healthz/")
        body = b"ok" if ok else b"not found"
        self.send_response(200 if ok else 404)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def serve_health(address: str, port: int) -> http.server.ThreadingHTTPServer:
    deadline = time.monotonic() + 30
    while True:
        try:
            server = http.server.ThreadingHTTPServer((address, port), Health)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)  # the previous instance is still letting go of the port
    threading.Thread(target=server.serve_forever, name="healthz", daemon=True).start()
    return server


# ---------------------------------------------------------------------------- API server client


class ApiError(Exception):
    def __init__(self, status: int, body: Any) -> None:
        super().__init__(f"HTTP {status}: {str(body)[:300]}")
        self.status = status
        self.body = body


class Api:
    """JSON over HTTPS to the API server with a kubeconfig's CA and credentials."""

    def __init__(self, kubeconfig: dict[str, Any], workdir: str) -> None:
        cluster, user = kubeconfig["cluster"], kubeconfig["user"]
        url = urllib.parse.urlsplit(cluster["server"])
        self.host, self.port = url.hostname or "", url.port or 443
        self.context = ssl.create_default_context(
            cadata=base64.b64decode(cluster["certificate-authority-data"]).decode()
        )
        self.headers = {"Accept": "application/json"}
        if user.get("token"):
            self.headers["Authorization"] = f"Bearer {user['token']}"
        if user.get("client-certificate-data"):
            fd, pem = tempfile.mkstemp(dir=workdir, prefix="client-", suffix=".pem")
            with os.fdopen(fd, "wb") as f:
                f.write(base64.b64decode(user["client-certificate-data"]))
                f.write(b"\n")
                f.write(base64.b64decode(user["client-key-data"]))
            try:
                self.context.load_cert_chain(pem)
            finally:
                os.unlink(pem)

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Any:
        conn = http.client.HTTPSConnection(self.host, self.port, context=self.context, timeout=15)
        try:
            headers = dict(self.headers)
            data = None
            if body is not None:
                data = json.dumps(body).encode()
                headers["Content-Type"] = content_type
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
        finally:
            conn.close()
        try:
            parsed = json.loads(raw) if raw else {}
        except ValueError:
            parsed = raw.decode(errors="replace")
        if resp.status >= 300:
            raise ApiError(resp.status, parsed)
        return parsed


# ---------------------------------------------------------------------------------- the node


def node_ip(flags: dict[str, str]) -> str:
    if flags.get("node-ip"):
        return flags["node-ip"]
    out = subprocess.run(
        ["ip", "-o", "-4", "addr", "show", "scope", "global"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    for line in out.splitlines():
        match = re.search(r"inet (\d+\.\d+\.\d+\.\d+)/", line)
        if match:
            return match.group(1)
    return socket.gethostbyname(socket.gethostname())


def write_atomic(path: str, data: bytes, mode: int = 0o600) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def store_client_pem(cert_pem: bytes, key_pem: bytes) -> None:
    """kubelet-client-<time>.pem and the kubelet-client-current.pem link, as the kubelet."""
    stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H-%M-%S")
    name = f"kubelet-client-{stamp}.pem"
    write_atomic(os.path.join(PKI, name), cert_pem.rstrip(b"\n") + b"\n" + key_pem)
    link = CLIENT_PEM + ".tmp"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(link)
    os.symlink(os.path.join(PKI, name), link)
    os.replace(link, CLIENT_PEM)


def write_kubelet_conf(server: str, ca_data: str) -> None:
    """kubelet.conf pointing at kubelet-client-current.pem (JSON is valid kubeconfig YAML)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "default-cluster",
                "cluster": {"server": server, "certificate-authority-data": ca_data},
            }
        ],
        "contexts": [
            {
                "name": "default-context",
                "context": {
                    "cluster": "default-cluster",
                    "namespace": "default",
                    "user": "default-auth",
                },
            }
        ],
        "current-context": "default-context",
        "preferences": {},
        "users": [
            {
                "name": "default-auth",
                "user": {"client-certificate": CLIENT_PEM, "client-key": CLIENT_PEM},
            }
        ],
    }
    write_atomic(KUBECONFIG, json.dumps(config, indent=2).encode())


def tls_bootstrap(bootstrap: dict[str, Any], name: str, workdir: str) -> None:
    """CSR with the bootstrap token -> signed client certificate -> kubelet.conf."""
    key_file = os.path.join(workdir, "bootstrap.key")
    csr_file = os.path.join(workdir, "bootstrap.csr")
    subprocess.run(
        ["openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", key_file],
        check=True,
        capture_output=True,
    )
    subprocess.run(
        [
            "openssl",
            "req",
            "-new",
            "-key",
            key_file,
            "-subj",
            f"/O=system:nodes/CN=system:node:{name}",
            "-out",
            csr_file,
        ],
        check=True,
        capture_output=True,
    )
    with open(csr_file, "rb") as f:
        request = base64.b64encode(f.read()).decode()
    with open(key_file, "rb") as f:
        key_pem = f.read()
    api = Api(bootstrap, workdir)
    csr = api.call(
        "POST",
        "/apis/certificates.k8s.io/v1/certificatesigningrequests",
        {
            "apiVersion": "certificates.k8s.io/v1",
            "kind": "CertificateSigningRequest",
            "metadata": {"generateName": "csr-"},
            "spec": {
                "request": request,
                "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
                "usages": ["digital signature", "key encipherment", "client auth"],
            },
        },
    )
    csr_name = csr["metadata"]["name"]
    log(f"TLS bootstrap: CSR {csr_name} for system:node:{name} sent")
    deadline = time.monotonic() + 300
    while not _stop.is_set():
        csr = api.call("GET", f"/apis/certificates.k8s.io/v1/certificatesigningrequests/{csr_name}")
        cert = csr.get("status", {}).get("certificate")
        if cert:
            break
        for condition in csr.get("status", {}).get("conditions") or []:
            if condition.get("type") in ("Denied", "Failed"):
                raise RuntimeError(f"CSR {csr_name} {condition['type']}: {condition}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"CSR {csr_name} not signed in 300 s")
        _stop.wait(0.5)
    else:
        return
    store_client_pem(base64.b64decode(cert), key_pem)
    write_kubelet_conf(
        bootstrap["cluster"]["server"], bootstrap["cluster"]["certificate-authority-data"]
    )
    os.unlink(key_file)
    os.unlink(csr_file)
    log(f"TLS bootstrap: {KUBECONFIG} written")


class Node(threading.Thread):
    """Credentials, Node registration, heartbeats and the pods bound to the node."""

    def __init__(self, bootstrap: dict[str, Any] | None, workdir: str, static: StaticPods) -> None:
        super().__init__(name="node", daemon=True)
        self.bootstrap = bootstrap
        self.static = static
        self.workdir = workdir
        self.flags = kubeadm_flags()
        self.name = (self.flags.get("hostname-override") or socket.gethostname()).lower()
        self.ip = node_ip(self.flags)
        self.api: Api | None = None
        self.node_uid = ""
        self.pod_cidr = ""
        self.started = now()
        self.deleted = False
        self.ips: dict[str, str] = {}

    # credentials

    def credentials(self) -> Api:
        while not _stop.is_set():
            try:
                if os.path.exists(KUBECONFIG):
                    config = read_kubeconfig(KUBECONFIG)
                    user = config["user"]
                    if user.get("client-certificate-data") and not os.path.exists(CLIENT_PEM):
                        # kubeadm init's kubelet.conf embeds the node's certificate: keep
                        # it where the kubelet does (kubeadm's kubelet-finalize looks there).
                        store_client_pem(
                            base64.b64decode(user["client-certificate-data"]),
                            base64.b64decode(user["client-key-data"]),
                        )
                    return Api(config, self.workdir)
                if self.bootstrap is not None:
                    tls_bootstrap(self.bootstrap, self.name, self.workdir)
                    continue
            except (OSError, ValueError, KeyError, StopIteration, ApiError, RuntimeError) as exc:
                log(f"credentials: {exc}")
            except subprocess.CalledProcessError as exc:
                log(f"credentials: {exc}: {exc.stderr!r}")
            _stop.wait(1.0)
        raise SystemExit(0)

    # registration and status

    def node_object(self) -> dict[str, Any]:
        labels = {
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "beta.kubernetes.io/os": "linux",
            "beta.kubernetes.io/arch": "amd64",
        }
        for item in filter(None, self.flags.get("node-labels", "").split(",")):
            key, _, value = item.partition("=")
            labels[key] = value
        taints = []
        for item in filter(None, self.flags.get("register-with-taints", "").split(",")):
            key_value, _, effect = item.partition(":")
            key, _, value = key_value.partition("=")
            taints.append(
                {"key": key, "value": value, "effect": effect}
                if value
                else {"key": key, "effect": effect}
            )
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": labels,
                "annotations": {"volumes.kubernetes.io/controller-managed-attach-detach": "true"},
            },
            "spec": {"taints": taints} if taints else {},
            "status": self.status(),
        }

    def status(self) -> dict[str, Any]:
        stamp = now()
        memory_kib = 0
        with contextlib.suppress(OSError, ValueError, IndexError), open("/proc/meminfo") as f:
            memory_kib = int(f.readline().split()[1])
        capacity = {
            "cpu": str(os.cpu_count() or 1),
            "memory": f"{memory_kib}Ki",
            "pods": "110",
            "ephemeral-storage": "10Gi",
        }

        def condition(kind: str, status: str, reason: str, message: str) -> dict[str, str]:
            return {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": stamp,
                "lastTransitionTime": self.started,
            }

        return {
            "capacity": capacity,
            "allocatable": capacity,
            "conditions": [
                condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "stand-in"),
                condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "stand-in"),
                condition("PIDPressure", "False", "KubeletHasSufficientPID", "stand-in"),
                condition(
                    "Ready", "True", "KubeletReady", "kubelet stand-in is posting ready status"
                ),
            ],
            "addresses": [
                {"type": "InternalIP", "address": self.ip},
                {"type": "Hostname", "address": self.name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": hashlib.md5(self.name.encode()).hexdigest(),
                "systemUUID": hashlib.md5(self.ip.encode()).hexdigest(),
                "bootID": hashlib.md5(self.started.encode()).hexdigest(),
                "kernelVersion": os.uname().release,
                "osImage": "lccn test host",
                "containerRuntimeVersion": "standin://0.1.0",
                "kubeletVersion": VERSION,
                "kubeProxyVersion": VERSION,
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        }

    def register(self, api: Api) -> None:
        while not _stop.is_set():
            try:
                node = api.call("POST", "/api/v1/nodes", self.node_object())
                log(f"node {self.name} registered")
                break
            except ApiError as exc:
                if exc.status == 409:
                    node = api.call("GET", f"/api/v1/nodes/{self.name}")
                    log(f"node {self.name} exists: taking it over")
                    break
                log(f"registering node {self.name}: {exc}")
            except OSError as exc:
                log(f"registering node {self.name}: {exc}")  # API server not up yet
            _stop.wait(1.0)
        else:
            return
        self.node_uid = node["metadata"]["uid"]
        self.pod_cidr = node.get("spec", {}).get("podCIDR", "")

    def heartbeat(self, api: Api) -> None:
        path = f"/api/v1/nodes/{self.name}/status"
        try:
            node = api.call(
                "PATCH", path, {"status": self.status()}, "application/strategic-merge-patch+json"
            )
            self.pod_cidr = node.get("spec", {}).get("podCIDR", "") or self.pod_cidr
        except ApiError as exc:
            if exc.status == 404:
                if not self.deleted:
                    log(f"node {self.name} was deleted; not registering it again")
                self.deleted = True
                return
            raise
        self.deleted = False
        lease_path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{self.name}"
        try:
            lease = api.call("GET", lease_path)
            lease["spec"]["renewTime"] = micro_now()
            lease["spec"]["holderIdentity"] = self.name
            api.call("PUT", lease_path, lease)
        except ApiError as exc:
            if exc.status != 404:
                raise
            api.call(
                "POST",
                "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
                {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {
                        "name": self.name,
                        "namespace": "kube-node-lease",
                        "ownerReferences": [
                            {
                                "apiVersion": "v1",
                                "kind": "Node",
                                "name": self.name,
                                "uid": self.node_uid,
                            }
                        ],
                    },
                    "spec": {
                        "holderIdentity": self.name,
                        "leaseDurationSeconds": LEASE_SECONDS,
                        "renewTime": micro_now(),
                    },
                },
            )

    # pods

    def pod_ip(self, pod: dict[str, Any]) -> str:
        if pod.get("spec", {}).get("hostNetwork"):
            return self.ip
        uid = pod["metadata"]["uid"]
        if uid not in self.ips and self.pod_cidr:
            network = ipaddress.ip_network(self.pod_cidr, strict=False)
            taken = set(self.ips.values())
            for offset in range(2, min(network.num_addresses - 1, 4096)):
                candidate = str(network.network_address + offset)
                if candidate not in taken:
                    self.ips[uid] = candidate
                    break
        return self.ips.get(uid, self.ip)

    def mirror_pod(self, static: StaticPod) -> dict[str, Any]:
        """The API's copy of a static pod, as the kubelet posts it (kubeadm reads them)."""
        pod = json.loads(json.dumps(static.pod))
        meta = pod.setdefault("metadata", {})
        config_hash = static.digest[:32]
        annotations = {
            k: v for k, v in (meta.get("annotations") or {}).items() if not k.startswith("lccn.")
        }
        annotations |= {
            "kubernetes.io/config.hash": config_hash,
            "kubernetes.io/config.mirror": config_hash,
            "kubernetes.io/config.seen": now(),
            "kubernetes.io/config.source": "file",
        }
        meta.pop("creationTimestamp", None)
        meta |= {
            "name": f"{static.name}-{self.name}",
            "namespace": meta.get("namespace") or "default",
            "annotations": annotations,
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "name": self.name,
                    "uid": self.node_uid,
                    "controller": True,
                }
            ],
        }
        pod["spec"]["nodeName"] = self.name
        pod.pop("status", None)
        return pod

    def sync_mirror_pods(self, api: Api, pods: list[dict[str, Any]]) -> None:
        """One mirror pod per static pod; mirrors of gone or changed manifests deleted."""
        wanted = {f"{p.name}-{self.name}": p for p in self.static.snapshot()}
        have: dict[str, dict[str, Any]] = {}
        for pod in pods:
            meta = pod["metadata"]
            mirror = (meta.get("annotations") or {}).get("kubernetes.io/config.mirror")
            if mirror is None or meta.get("deletionTimestamp"):
                continue
            static = wanted.get(meta["name"])
            if static is not None and mirror == static.digest[:32]:
                have[meta["name"]] = pod
                continue
            with contextlib.suppress(ApiError):
                self.delete_pod(api, pod)
        for name, static in wanted.items():
            if name in have:
                continue
            namespace = static.pod.get("metadata", {}).get("namespace") or "default"
            try:
                api.call("POST", f"/api/v1/namespaces/{namespace}/pods", self.mirror_pod(static))
                log(f"mirror pod {namespace}/{name} created")
            except ApiError as exc:
                if exc.status != 409:
                    log(f"mirror pod {namespace}/{name}: {exc}")

    def delete_pod(self, api: Api, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        api.call(
            "DELETE",
            f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
            {
                "apiVersion": "v1",
                "kind": "DeleteOptions",
                "gracePeriodSeconds": 0,
                "preconditions": {"uid": meta["uid"]},
            },
        )
        self.ips.pop(meta["uid"], None)
        log(f"pod {meta['namespace']}/{meta['name']} deleted")

    def sync_pods(self, api: Api) -> None:
        selector = urllib.parse.quote(f"spec.nodeName={self.name}")
        pods = api.call("GET", f"/api/v1/pods?fieldSelector={selector}").get("items", [])
        if self.node_uid:
            self.sync_mirror_pods(api, pods)
        for pod in pods:
            meta = pod["metadata"]
            path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
            try:
                if meta.get("deletionTimestamp"):
                    self.delete_pod(api, pod)
                elif not self.running(pod):
                    api.call(
                        "PATCH",
                        path + "/status",
                        {"status": self.pod_status(pod)},
                        "application/strategic-merge-patch+json",
                    )
                    log(f"pod {meta['namespace']}/{meta['name']} running")
            except ApiError as exc:
                if exc.status not in (404, 409):
                    log(f"pod {meta['namespace']}/{meta['name']}: {exc}")

    @staticmethod
    def running(pod: dict[str, Any]) -> bool:
        status = pod.get("status", {})
        if status.get("phase") in ("Succeeded", "Failed"):
            return True
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in status.get("conditions") or []
        )
        return status.get("phase") == "Running" and ready

    def pod_status(self, pod: dict[str, Any]) -> dict[str, Any]:
        stamp = now()
        ip = self.pod_ip(pod)
        uid = pod["metadata"]["uid"]
        conditions = [
            {"type": kind, "status": "True", "lastProbeTime": None, "lastTransitionTime": stamp}
            for kind in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
        ]

        def container(c: dict[str, Any]) -> dict[str, Any]:
            return {
                "name": c["name"],
                "image": c.get("image", ""),
                "imageID": "",
                "containerID": f"standin://{uid}-{c['name']}",
                "ready": True,
                "started": True,
                "restartCount": 0,
                "state": {"running": {"startedAt": stamp}},
            }

        spec = pod.get("spec", {})
        return {
            "phase": "Running",
            "conditions": conditions,
            "hostIP": self.ip,
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "startTime": stamp,
            "containerStatuses": [container(c) for c in spec.get("containers") or []],
            "initContainerStatuses": [
                {
                    **container(c),
                    "ready": True,
                    "started": False,
                    "state": {"terminated": {"exitCode": 0, "reason": "Completed"}},
                }
                for c in spec.get("initContainers") or []
            ],
        }

    def run(self) -> None:
        try:
            api = self.credentials()
            self.api = api
            self.register(api)
            last_beat = 0.0
            while not _stop.is_set():
                try:
                    if time.monotonic() - last_beat >= HEARTBEAT:
                        self.heartbeat(api)
                        last_beat = time.monotonic()
                    if not self.deleted:
                        self.sync_pods(api)
                except (ApiError, OSError, KeyError, ValueError) as exc:
                    log(f"sync: {exc}")
                _stop.wait(1.0)
        except SystemExit:
            pass
        except Exception as exc:  # the thread must not die silently: the node would go NotReady
            log(f"node agent failed: {exc!r}")
            os.kill(os.getpid(), signal.SIGTERM)


def main(argv: list[str]) -> int:
    if "--version" in argv:
        print(f"Kubernetes {VERSION}")
        return 0
    log(f"starting (pid {os.getpid()}, argv {argv})")
    os.makedirs(KUBELET_DIR, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="kubelet-standin-", dir=KUBELET_DIR)
    # kubeadm join removes bootstrap-kubelet.conf once its kubelet-start phase ends: read it now.
    bootstrap = None
    if os.path.exists(BOOTSTRAP_KUBECONFIG) and not os.path.exists(KUBECONFIG):
        try:
            bootstrap = read_kubeconfig(BOOTSTRAP_KUBECONFIG)
        except (ValueError, StopIteration, KeyError) as exc:
            log(f"bootstrap kubeconfig: {exc}")
    write_atomic(PIDFILE, f"{os.getpid()}\n".encode(), 0o644)
    config = kubelet_config()
    signal.signal(signal.SIGTERM, lambda *_: _stop.set())
    signal.signal(signal.SIGINT, lambda *_: _stop.set())
    signal.signal(signal.SIGHUP, lambda *_: (_keep_pods.set(), _stop.set()))
    health = serve_health(config["healthzBindAddress"], int(config["healthzPort"]))
    pods = StaticPods(config["staticPodPath"])
    pods.start()
    node = Node(bootstrap, workdir, pods)
    node.start()
    while not _stop.wait(1.0):
        pass
    log("stopping")
    health.shutdown()
    health.server_close()
    if _keep_pods.is_set():
        with pods.lock:  # the current round ends; no later one starts anything
            log(f"leaving the static pods running: {sorted(p.name for p in pods.pods.values())}")
    else:
        pods.stop_all()
    with contextlib.suppress(OSError):
        for entry in os.listdir(workdir):
            os.unlink(os.path.join(workdir, entry))
        os.rmdir(workdir)
    with contextlib.suppress(OSError), open(PIDFILE) as f:
        if f.read().strip() == str(os.getpid()):
            os.unlink(PIDFILE)
    log("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
