#!/usr/bin/env python3
"""Demo: the whole job. The real Tacker 16.0.0 instantiates our Kubernetes-cluster VNF,
``lccn-subscriber serve`` builds the cluster on the VMs over SSH and writes its access
back into the VNF instance, and a client reaches the cluster through what Tacker holds.

    bash scripts/test.sh        # once, the README's test command: installs the parts
    sudo .venv/bin/python scripts/demo.py [--flavour simple|complex] [--scale] [--heal]
                                             [--keep] [--no-hooks] [--api v1|v2] [--cnf]

What is real and what is simulated (the tests' beds, see docs/contributing.md):

- the VMs are sshd hosts in network namespaces (root needed); with the default
  ``--kubernetes real`` they run the real kubeadm, kube-apiserver, etcd, kubectl
  built by ``scripts/setup.d/40-k8s.sh`` (only the kubelet is a stand-in process);
  ``--kubernetes standin`` uses the stand-in tools (faster, no API server to reach);
- OpenStack is the simulator (``tests/testbed/openstack_sim``): its servers get the hosts'
  addresses, so what Tacker's Heat stack creates is what ``serve`` reaches;
- Tacker and ``serve`` are the real programs, ``serve`` a subprocess configured by a
  TOML file the demo writes (printed with ``--show-config``), as an operator would.

Tacker's hooks are on by default (``--no-hooks``: today's notification-driven path): the
package's ``lccn_hook.py`` asks ``serve`` to run each operation's cluster job and waits
for it, so Tacker reports an op-occ COMPLETED only once the cluster is, with the
``vimConnectionInfo`` entry already in the instance (docs/guide/hooks.md). After each
operation the demo prints Tacker's op-occ state next to serve's job.

Steps: start everything on free loopback ports; INSTANTIATE (``events watch`` shows
each step of the cluster job live: step, node, duration); print the
``vimConnectionInfo`` entry Tacker now holds (token masked) and the cluster's nodes
read through it; with ``--scale``, SCALE_OUT by one worker and the nodes again; with
``--heal``, one worker's VM is broken (its disk wiped) and Tacker HEALs its VNFC: Tacker
rebuilds the server on the same port, ``serve`` deletes the old Node and the rebuilt VM
joins again (a younger node of the same name); TERMINATE, and ``serve`` forgets the
cluster. ``--keep`` waits for Ctrl-C before stopping everything.

``--api v1`` drives Tacker's VNF LCM v1 API instead, as seed 000's user does: the v1
package (BaseHOT, LCM operation user data), an OpenStack VIM registered first, the
seed's parameters (``aspect_id``), and ``serve`` reading the instance through v1. There
are no management-driver scripts in v1, so no hooks: ``serve`` acts on COMPLETED. With
the real Kubernetes, ``serve`` registers the cluster as Tacker's Kubernetes VIM; the demo
shows the instance's entry as seed 000 shows it (the VIM and its URL), the VIM's regions
(the cluster's namespaces, which Tacker read from the API server with the token), and the
nodes on the master; TERMINATE deletes the VIM. ``--cnf`` (with ``--api v1``) then has
Tacker's v1 Kubernetes infra driver deploy the sample CNF (VNF-B) through that VIM,
shows its Deployment on the master, and terminates and deletes VNF-B before VNF-A's
TERMINATE (docs/demo.md: what v1 needs for it).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import secrets
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.testbed import cnf, tacker_bed, testhosts  # noqa: E402
from tests.testbed.cluster_vnf import k8s_params, v1_params  # noqa: E402
from tests.testbed.openstack_sim.process import SimProcess  # noqa: E402
from tests.testbed.tacker_api import (  # noqa: E402
    NETWORK_ID,
    CallbackRecorder,
    TackerClient,
    ext_virtual_links,
    terminate_and_delete,
    unique_name,
    wait_for,
)
from tests.testbed.tacker_v1 import (  # noqa: E402
    V1Tacker,
    v1_ext_virtual_links,
    v1_vim_connection_info,
)

K8S_VIM = "ETSINFV.KUBERNETES.V_1"
SCALE_ASPECT = {"v1": "worker_instance", "v2": "workerNode_scale"}  # the packages' aspects
OPEN = ("pending", "running", "retry")  # an event whose job is yet to settle


class DemoError(Exception):
    """A one-line reason the demo cannot go on."""


def say(text: str = "") -> None:
    print(text, flush=True)


def elapsed(t0: float) -> str:
    return f"{time.monotonic() - t0:.1f} s"


def exe() -> list[str]:
    found = Path(sys.executable).with_name("lccn-subscriber")
    return [str(found)] if found.exists() else [sys.executable, "-m", "subscriber.cli"]


def preflight(kubernetes: str) -> None:
    problems = []
    if os.geteuid() != 0:
        problems.append("run as root (the VMs are network namespaces)")
    if not Path(testhosts.SSHD).exists():
        problems.append("sshd missing: bash scripts/setup.d/10-sshd.sh")
    if not tacker_bed.is_installed():
        problems.append("Tacker missing: bash scripts/setup.d/20-tacker.sh")
    if kubernetes == "real" and (why := testhosts.k8s_missing()) is not None:
        problems.append(f"{why} (or --kubernetes standin)")
    if problems:
        raise DemoError("; ".join(problems))


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return json.dumps(str(value))


def write_config(path: Path, sections: dict[str, dict[str, Any]]) -> None:
    lines: list[str] = []
    for name, values in sections.items():
        plain = {k: v for k, v in values.items() if not isinstance(v, dict)}
        lines.append(f"[{name}]")
        lines += [f"{k} = {toml_value(v)}" for k, v in plain.items()]
        for k, sub in values.items():
            if isinstance(sub, dict):
                lines.append(f"\n[{name}.{k}]")
                lines += [f"{kk} = {toml_value(vv)}" for kk, vv in sub.items()]
        lines.append("")
    path.write_text("\n".join(lines))
    path.chmod(0o600)  # it holds the simulated cloud's password


class Serve:
    """``lccn-subscriber serve --config F`` and its live ``events watch``."""

    def __init__(self, config: Path, db_url: str, port: int, log: Path) -> None:
        self.config, self.db_url, self.port, self.log = config, db_url, port, log
        self.proc: subprocess.Popen[bytes] | None = None
        self.watcher: subprocess.Popen[str] | None = None

    def start(self) -> None:
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [*exe(), "serve", "--config", str(self.config)],
                cwd=REPO,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )

        def ready() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise DemoError(f"serve exited: {self.log.read_text()[-2000:]}")
            try:
                status, _, _ = tacker_bed.request(
                    "GET", f"http://127.0.0.1:{self.port}/readyz", timeout=2
                )
            except OSError:
                return False
            return status == 200

        wait_for(ready, timeout=60, what="serve to be ready (store, Tacker subscription)")

    def watch(self) -> None:
        """``events watch`` in the background, its lines indented under ours."""
        self.watcher = subprocess.Popen(
            [*exe(), "events", "watch", "--all", "--database", self.db_url],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        out = self.watcher.stdout
        assert out is not None

        watching = threading.Event()

        def pump() -> None:
            for line in out:
                if " watching events" in line:
                    watching.set()
                else:
                    say(f"    | {line.rstrip()}")

        threading.Thread(target=pump, name="watch", daemon=True).start()
        if not watching.wait(60):
            raise DemoError("lccn-subscriber events watch did not start")

    def events(self) -> list[dict[str, Any]]:
        out = subprocess.run(
            [*exe(), "events", "list", "--format", "json", "--database", self.db_url],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return json.loads(out.stdout)  # type: ignore[no-any-return]

    def handled(self, occ: str, final: str, timeout: float = 600.0) -> list[dict[str, Any]]:
        """The op-occ's events once its ``final`` transition is stored and none of them is
        still waiting or running (a hook's job, or the one COMPLETED started)."""

        def settled() -> list[dict[str, Any]] | None:
            mine = [e for e in self.events() if e["vnfLcmOpOccId"] == occ]
            if not any(e["operationState"] == final for e in mine):
                return None
            return None if any(e["status"] in OPEN for e in mine) else mine

        events: list[dict[str, Any]] = wait_for(
            settled, timeout=timeout, interval=0.5, what="the job"
        )
        for event in events:
            if event["status"] == "failed":
                raise DemoError(
                    f"serve's job for {occ} failed: {event.get('statusDetail')} "
                    f"(lccn-subscriber events show {event['id']} --database {self.db_url})"
                )
        return events

    def stop(self) -> None:
        for proc in (self.watcher, self.proc):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(20)
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(10)


def side_by_side(tacker: TackerClient, serve: Serve, occ: dict[str, Any], t0: float) -> None:
    """Tacker's op-occ state next to serve's jobs for it (raises if either failed)."""
    state = occ["operationState"]
    lines = [f"  Tacker: {occ['operation']} {state} ({elapsed(t0)} after the request)"]
    try:
        events = serve.handled(occ["id"], state)
    except DemoError:
        say(lines[0])
        raise
    lines += [
        f"  serve:  {event['operationState']} (from {event['source']}): job"
        f" {event['status']} (event {event['id']})"
        for event in events
        if event["operationState"] == state and event["status"] in ("done", "failed")
    ]
    say("\n".join(lines))  # in one write: the live step lines never fall between
    if state != "COMPLETED":
        raise DemoError(
            f"Tacker's {occ['operation']} ended {occ['operationState']}: {occ.get('error')}"
        )


def masked(token: str) -> str:
    return f"{token[:6]}...({len(token)} chars)" if token else "(none)"


def show_entry(entry: dict[str, Any]) -> None:
    access, iface = entry.get("accessInfo") or {}, entry.get("interfaceInfo") or {}
    ca = iface.get("ssl_ca_cert") or ""
    say(f"    vimType      {entry.get('vimType')}")
    say(f"    endpoint     {iface.get('endpoint')}")
    say(f"    ssl_ca_cert  {ca.splitlines()[0] if ca else '(none)'} ... ({len(ca)} bytes)")
    say(f"    bearer_token {masked(access.get('bearer_token', ''))}")


def nodes_through(entry: dict[str, Any], tmp: Path, kubernetes: str) -> None:
    """``kubectl get nodes`` with nothing but the entry: its endpoint, CA and token."""
    if kubernetes != "real":
        say("    (stand-in tools: there is no API server to ask; --kubernetes real has one)")
        return
    iface, access = entry["interfaceInfo"], entry["accessInfo"]
    ca = base64.b64encode(iface["ssl_ca_cert"].encode()).decode()
    kubeconfig = tmp / "kubeconfig"
    kubeconfig.touch(mode=0o600)
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "vnf",
                        "cluster": {
                            "server": iface["endpoint"],
                            "certificate-authority-data": ca,
                        },
                    }
                ],
                "users": [{"name": "tacker", "user": {"token": access["bearer_token"]}}],
                "contexts": [{"name": "vnf", "context": {"cluster": "vnf", "user": "tacker"}}],
                "current-context": "vnf",
            }
        )
    )
    kubectl = testhosts.k8s_bin_dir() / "kubectl"
    out = subprocess.run(
        [str(kubectl), "--kubeconfig", str(kubeconfig), "get", "nodes", "-o", "wide"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    for line in (out.stdout or out.stderr).splitlines():
        say(f"    {line}")


def k8s_entry(recorder: CallbackRecorder, inst: str, since: int) -> dict[str, Any]:
    """The entry as Tacker took it: our PATCH's MODIFY_INFO result (Tacker's GET of the
    instance leaves the token out)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for r in recorder.received[since:]:
            b = r["body"]
            if (
                b.get("vnfInstanceId") == inst
                and b.get("operation") == "MODIFY_INFO"
                and b.get("operationState") == "COMPLETED"
            ):
                vci = (b.get("changedInfo") or {}).get("vimConnectionInfo") or {}
                for entry in vci.values():
                    if entry.get("vimType") == K8S_VIM:
                        return entry  # type: ignore[no-any-return]
        time.sleep(0.3)
    raise DemoError("Tacker reported no vimConnectionInfo change from serve")


def kubernetes_vims(tacker_url: str) -> dict[str, dict[str, Any]]:
    """Tacker's Kubernetes VIMs by name (``GET /v1.0/vims``)."""
    status, _, body = tacker_bed.request("GET", f"{tacker_url}/v1.0/vims")
    if status != 200:
        raise DemoError(f"GET /v1.0/vims answered {status}")
    return {v["name"]: v for v in body["vims"] if v["type"] == "kubernetes"}


def show_v1_entry(tacker: TackerClient, inst: str) -> None:
    """The instance's Kubernetes entry as seed 000's ``vnflcm show`` has it, and its VIM:
    Tacker's VIM driver read the regions (the cluster's namespaces) from the API server."""
    entries = [
        e for e in tacker.show(inst).get("vimConnectionInfo") or () if e["vimType"] == "kubernetes"
    ]
    if not entries:
        raise DemoError("serve wrote no Kubernetes entry into the instance")
    entry = entries[-1]
    say(f"    vimType      {entry['vimType']}")
    say(f"    vimId        {entry.get('vimId')}")
    say(f"    authUrl      {(entry.get('accessInfo') or {}).get('authUrl')}")
    vim = next(
        (v for v in kubernetes_vims(tacker.url).values() if v["id"] == entry.get("vimId")), None
    )
    if vim is None:  # tacker.register_vim off (the stand-in tools have no API server)
        say("    (no VIM registered: with the stand-in tools Tacker could not reach one)")
        return
    regions = ", ".join(sorted(vim["placement_attr"]["regions"]))
    key = vim["auth_cred"].get("key_type")
    say(f"\n  Tacker's Kubernetes VIM {vim['name']}: {vim['status']} (token key: {key})")
    say(f"    regions (the cluster's namespaces, read by Tacker with the token): {regions}")


def kubectl_on_master(hosts: Any, *argv: str) -> None:
    """``kubectl ARGV`` with the first master's admin.conf, from its network (a v1
    instance's entry names a VIM, whose token Tacker keeps encrypted); its output shown."""
    master = hosts.hosts[0]
    admin = hosts.private_dir(master, "/etc/kubernetes") / "admin.conf"
    kubectl = str(testhosts.k8s_bin_dir() / "kubectl")
    out = testhosts.inside(master, kubectl, "--kubeconfig", str(admin), *argv, net_only=True)
    for line in (out.stdout or out.stderr).splitlines():
        say(f"    {line}")


def nodes_on_master(hosts: Any, kubernetes: str) -> None:
    """``kubectl get nodes`` on the master (the real Kubernetes only)."""
    if kubernetes != "real":
        say("    (stand-in tools: there is no API server to ask; --kubernetes real has one)")
        return
    kubectl_on_master(hosts, "get", "nodes", "-o", "wide")


def cnf_job(serve: Serve, occ: dict[str, Any]) -> None:
    """serve's job for a VNF-B op-occ: the same subscription brings VNF-B's notifications,
    and the cluster handlers end done at the parameters step (a CNF, not a cluster)."""
    for event in serve.handled(occ["id"], occ["operationState"], timeout=60):
        if event["operationState"] == occ["operationState"]:
            detail = f" ({event['statusDetail'][:90]})" if event.get("statusDetail") else ""
            say(f"  serve:  {event['operationState']}: job {event['status']}{detail}")


def cnf_through_v1(
    tacker: V1Tacker, bed: tacker_bed.BedState, hosts: Any, serve: Serve, inst: str
) -> None:
    """VNF-B, the sample CNF, deployed by Tacker's v1 Kubernetes infra driver on the
    cluster of ``inst`` (VNF-A) through the Kubernetes VIM serve registered for it, as a
    v1 user would (``vimConnectionInfo: [{vimId, vimType: kubernetes}]``); its Deployment
    shown on the master; then TERMINATE and DELETE of VNF-B, leaving VNF-A as it was."""
    entries = [
        e for e in tacker.show(inst).get("vimConnectionInfo") or () if e["vimType"] == "kubernetes"
    ]
    if not entries or not entries[-1].get("vimId"):
        raise DemoError("VNF-A's instance names no Kubernetes VIM to deploy the CNF on")
    vim_id = entries[-1]["vimId"]
    with phase(f"CNF (VNF-B) on VNF-A's cluster, through v1 and Kubernetes VIM {vim_id}"):
        vnfd_b = cnf.build_and_onboard(bed, api="v1")
        b = tacker.create(vnfd_b, unique_name("demo-v1-cnf"))
        say(f"  sample CNF package (v1 copy) onboarded (vnfdId {vnfd_b}); VNF-B is instance {b}")
        try:
            t0 = time.monotonic()
            occ = tacker.run_op(b, "instantiate", cnf.v1_instantiate_request(vim_id))
            say(f"  Tacker: VNF-B {occ['operation']} {occ['operationState']} ({elapsed(t0)})")
            if occ["operationState"] != "COMPLETED":
                raise DemoError(f"VNF-B's INSTANTIATE ended {occ['operationState']}: {occ}")
            cnf_job(serve, occ)
            pods = [
                r["computeResource"]["resourceId"]
                for r in tacker.show(b)["instantiatedVnfInfo"].get("vnfcResourceInfo") or ()
            ]
            say(f"  VNF-B's VNFCs (Tacker's vnfcResourceInfo): {', '.join(sorted(pods))}")
            say("  its Deployment, on the master:")
            kubectl_on_master(hosts, "get", "deployment", cnf.DEPLOYMENT, "-n", cnf.NAMESPACE)
            t0 = time.monotonic()
            occ = tacker.run_op(b, "terminate", {"terminationType": "FORCEFUL"})
            say(f"  Tacker: VNF-B {occ['operation']} {occ['operationState']} ({elapsed(t0)})")
            if occ["operationState"] != "COMPLETED":
                raise DemoError(f"VNF-B's TERMINATE ended {occ['operationState']}: {occ}")
            cnf_job(serve, occ)
        except BaseException:
            terminate_and_delete(tacker, b)
            raise
        tacker.delete(b)
        status, _, _ = tacker.call("GET", f"{tacker.lcm}/vnf_instances/{b}")
        say(f"  VNF-B deleted (GET answers {status}); its Deployment now:")
        kubectl_on_master(hosts, "get", "deployment", cnf.DEPLOYMENT, "-n", cnf.NAMESPACE)


@contextlib.contextmanager
def phase(title: str) -> Iterator[None]:
    t0 = time.monotonic()
    say(f"\n== {title}")
    yield
    say(f"   ({title}: {elapsed(t0)})")


def workers(tacker: TackerClient, inst: str) -> list[dict[str, Any]]:
    """The worker VNFCs' ``vnfcResourceInfo``, in Tacker's order."""
    info = tacker.show(inst)["instantiatedVnfInfo"]
    return [r for r in info["vnfcResourceInfo"] if r["vduId"] == "workerNode"]


def heal_a_worker(
    tacker: TackerClient, sim: SimProcess, hosts: Any, inst: str, serve: Serve, first: set[str]
) -> None:
    """Break one worker's VM (its disk is lost) and HEAL its VNFC, as an operator would:
    one of the ``first`` (INSTANTIATE's), not the one SCALE_OUT just added."""
    info = tacker.show(inst)["instantiatedVnfInfo"]
    worker = next(r for r in workers(tacker, inst) if r["id"] in first)
    if isinstance(tacker, V1Tacker):  # v1 heals a vnfcResourceInfo id (and keeps it)
        vnfc_info = worker["id"]
    else:
        [vnfc_info] = [i["id"] for i in info["vnfcInfo"] if i["vnfcResourceInfoId"] == worker["id"]]
    server = worker["computeResource"]["resourceId"]
    [address] = [
        p["fixed_ips"][0]["ip_address"]
        for p in sim.control.state()["ports"]
        if p.get("device_id") == server
    ]
    host = next(h for h in hosts.hosts if h.address == address)
    with phase(f"HEAL of worker VNFC {worker['id']} ({address}, its VM broken)"):
        testhosts.wipe_host(hosts, host)
        t0 = time.monotonic()
        occ = tacker.run_op(inst, "heal", {"vnfcInstanceId": [vnfc_info]})
        side_by_side(tacker, serve, occ, t0)


def run(args: argparse.Namespace, stack: contextlib.ExitStack) -> None:
    preflight(args.kubernetes)
    masters = 3 if args.flavour == "complex" else 1
    count = masters + 2 + (1 if args.scale else 0)
    tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="lccn-demo-")))

    with phase("starting the parts"):
        hosts = testhosts.create(count, password=True, kubernetes=args.kubernetes)
        stack.callback(testhosts.destroy, hosts)
        addresses = ", ".join(h.address for h in hosts.hosts)
        say(f"  VMs (sshd hosts)   {addresses}  ({args.kubernetes} kubeadm)")
        sim = SimProcess(
            server_pool=",".join(h.address for h in hosts.hosts), vip_pool=hosts.unused_address
        )
        sim.start()
        stack.callback(sim.stop)
        say(f"  OpenStack (sim)    {sim.auth_url}")
        bed: tacker_bed.BedState | None = None
        v1 = args.api == "v1"
        if args.tacker_url:  # a Tacker already running with the package onboarded
            tacker_url, vnfd_id = args.tacker_url, args.vnfd_id
        elif args.bed_state:  # a bed already running (tacker_bed start --onboard)
            bed = tacker_bed.BedState(**json.loads(Path(args.bed_state).read_text()))
            if not bed.vnfd_id:
                raise DemoError(f"{args.bed_state}: the bed has no package onboarded")
            tacker_url, vnfd_id = bed.url, bed.vnfd_id
        else:
            bed = tacker_bed.start(owner_pid=os.getpid())
            stack.callback(tacker_bed.stop, bed)
            tacker_url, vnfd_id = bed.url, "" if v1 else tacker_bed.build_and_onboard(bed)
        if v1:  # the v1 package (seed 000's format), onboarded beside the v2 one
            assert bed is not None
            vnfd_id = tacker_bed.build_and_onboard(bed, "kubernetes_cluster_v1")
        package = "v1 package (seed 000)" if v1 else "sample package"
        say(f"  Tacker 16.0.0      {tacker_url}  ({package} onboarded, vnfdId {vnfd_id})")
        recorder = CallbackRecorder()
        recorder.start()
        stack.callback(recorder.stop)
        tacker: TackerClient = V1Tacker(tacker_url) if v1 else TackerClient(tacker_url)
        if not v1:  # v1's entry has no token to find in the notifications
            stack.callback(tacker.unsubscribe, tacker.subscribe(recorder.url))
        openstack_vim = ""
        if v1:  # v1 runs an instance on a registered VIM, as seed 000's `openstack vim list`
            assert bed is not None and isinstance(tacker, V1Tacker)
            openstack_vim = tacker.register_openstack_vim(
                bed, sim.auth_url, sim.openstack_settings(), unique_name("demo-openstack")
            )
            stack.callback(tacker.call, "DELETE", f"/v1.0/vims/{openstack_vim}")
            say(f"  OpenStack VIM      {openstack_vim}  (registered in Tacker)")

        # Hooks: the bed's conductor runs lccn_hook.py with the configuration written below
        # (a v2 management-driver script: v1 has none).
        hooks = bed is not None and not args.no_hooks and not v1
        hook_token = secrets.token_urlsafe(24)
        port = tacker_bed.free_port()
        db_url = f"sqlite+aiosqlite:///{tmp / 'lccn.db'}"
        c = sim.config
        config = tmp / "lccn.toml"
        write_config(
            config,
            {
                "http": {"host": "127.0.0.1", "port": port},
                "database": {"url": db_url},
                "tacker": {
                    "endpoint": tacker_url,
                    "noauth_user_id": tacker_bed.USER_ID,
                    "noauth_project_id": tacker_bed.PROJECT_ID,
                    "subscribe_on_start": True,
                    "api_version": args.api,
                    # Tacker's Kubernetes VIM driver reads the API server, which the
                    # stand-in tools do not run (v1 registers the VIM by default).
                    **({"register_vim": False} if args.kubernetes != "real" else {}),
                },
                "openstack": sim.openstack_settings(),
                "ssh": hosts.ssh_section(),
                "cluster": {
                    "handlers": "on",
                    "token_wait_timeout": 60.0,
                    "install_timeout": 600.0,
                    "script_env": testhosts.SCRIPT_ENV
                    if args.kubernetes == "real"
                    else {"K8S_SKIP_PHASES": "packages,cni"},
                    # Nothing can exec into a stand-in kubelet's pods: etcdctl on the master.
                    "etcdctl_via": "host",
                },
                "hooks": {"token": hook_token} if hooks else {},
            },
        )
        if args.show_config:
            say("  serve's configuration (lccn.toml, password masked):")
            for line in config.read_text().splitlines():
                shown = line.replace(c.password, "***") if c.password else line
                shown = shown.replace(hook_token, "***")
                say(f"    {shown}")
        serve = Serve(config, db_url, port, tmp / "serve.log")
        serve.start()
        stack.callback(serve.stop)
        stack.callback(tacker.unsubscribe_all, f"http://127.0.0.1:{port}/lccn/notifications")
        say(f"  lccn-subscriber    http://127.0.0.1:{port}/lccn/notifications  (subscribed)")
        if hooks and bed is not None:
            token_file = tmp / "hook-token"
            token_file.touch(mode=0o600)
            token_file.write_text(hook_token)
            bed.hook_config.write_text(
                json.dumps(
                    {
                        "url": f"http://127.0.0.1:{port}/lccn/hooks",
                        "token_file": str(token_file),
                        "timeout": 900,
                        "poll_interval": 0.5,
                    }
                )
            )
            stack.callback(bed.hook_config.unlink, missing_ok=True)
            say(f"  Tacker's hooks     http://127.0.0.1:{port}/lccn/hooks  (lccn_hook.py)")
        else:
            why = " (v1 has no management-driver scripts)" if v1 else ""
            say(f"  Tacker's hooks     off{why}: serve acts on COMPLETED and writes back after it")
        serve.watch()

    inst = tacker.create(vnfd_id, unique_name(f"demo-{args.api}-{args.flavour}"))
    nodes_login: dict[str, Any] = {
        "master_user": "root",
        "worker_user": hosts.user or "root",
        "key": str(hosts.client_key),
        "password": hosts.password,
        "ha": args.flavour == "complex",
    }
    placement: dict[str, Any]
    if v1:
        placement = {
            "vimConnectionInfo": v1_vim_connection_info(openstack_vim),
            "extVirtualLinks": v1_ext_virtual_links(NETWORK_ID),
        }
        params = v1_params(**nodes_login)
    else:
        placement = {
            "vimConnectionInfo": sim.vim_connection_info(),
            "extVirtualLinks": ext_virtual_links(NETWORK_ID),
        }
        params = k8s_params(**nodes_login)
    with phase(f"INSTANTIATE ({args.flavour} flavour) of VNF instance {inst} (API {args.api})"):
        since = len(recorder.received)
        t0 = time.monotonic()
        occ = tacker.run_op(
            inst,
            "instantiate",
            {"flavourId": args.flavour, **placement, "additionalParams": params},
        )
        side_by_side(tacker, serve, occ, t0)
        entry: dict[str, Any] = {}
        if v1:
            pass  # the entry names a VIM: shown below
        elif hooks and bed is not None:  # handed back in the operation; the API hides the token
            entry = (tacker_bed.stored_vim_connection_info(bed, inst) or {})["k8s"]
        else:
            entry = k8s_entry(recorder, inst, since)

    first_workers = {r["id"] for r in workers(tacker, inst)}

    def nodes() -> None:
        if v1:
            nodes_on_master(hosts, args.kubernetes)
        else:
            nodes_through(entry, tmp, args.kubernetes)

    if v1:
        say("\n  vimConnectionInfo entry Tacker now holds (written back by serve, as seed 000):")
        show_v1_entry(tacker, inst)
        say("\n  the cluster's nodes, on the master:")
    else:
        how = "handed back inside the INSTANTIATE" if hooks else "written back by serve"
        say(f"\n  vimConnectionInfo entry Tacker now holds ({how}):")
        show_entry(entry)
        say("\n  the cluster's nodes, through that entry alone:")
    nodes()

    if args.scale:
        with phase("SCALE_OUT by one worker"):
            t0 = time.monotonic()
            occ = tacker.run_op(
                inst, "scale", {"type": "SCALE_OUT", "aspectId": SCALE_ASPECT[args.api]}
            )
            side_by_side(tacker, serve, occ, t0)
        nodes()

    if args.heal:
        heal_a_worker(tacker, sim, hosts, inst, serve, first_workers)
        nodes()

    if args.cnf:
        assert bed is not None and isinstance(tacker, V1Tacker)
        cnf_through_v1(tacker, bed, hosts, serve, inst)

    if args.keep:
        say("\nrunning; Ctrl-C goes on to TERMINATE and stops everything")
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)

    with phase("TERMINATE"):
        t0 = time.monotonic()
        occ = tacker.run_op(inst, "terminate", {"terminationType": "FORCEFUL"})
        side_by_side(tacker, serve, occ, t0)
        left = tacker.show(inst).get("vimConnectionInfo")
        if v1:  # v1 keeps the OpenStack VIM the instance ran on; ours is gone
            kept = [e for e in left or () if e.get("vimType") == "kubernetes"]
            gone = f"kubernetes_vim_{inst}" not in kubernetes_vims(tacker.url)
            say(f"  Tacker's Kubernetes entries now: {kept or '[]'}; its VIM deleted: {gone}")
        else:
            say(f"  Tacker's vimConnectionInfo now: {left or '{}'}; serve forgot the cluster")
        tacker.delete(inst)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--flavour", choices=("simple", "complex"), default="simple")
    p.add_argument(
        "--api", choices=("v2", "v1"), default="v2", help="Tacker's VNF LCM API to drive"
    )
    p.add_argument("--kubernetes", choices=("real", "standin"), default="real")
    p.add_argument("--scale", action="store_true", help="also SCALE_OUT by one worker")
    p.add_argument("--heal", action="store_true", help="also HEAL one worker's VNFC")
    p.add_argument(
        "--cnf",
        action="store_true",
        help="with --api v1: also deploy the sample CNF (VNF-B) on the cluster through v1",
    )
    p.add_argument("--show-config", action="store_true", help="print serve's TOML file")
    p.add_argument("--keep", action="store_true", help="wait for Ctrl-C before TERMINATE")
    p.add_argument(
        "--no-hooks",
        action="store_true",
        help="without Tacker's hooks: serve acts on COMPLETED (always so with --tacker-url)",
    )
    p.add_argument(
        "--bed-state",
        help="use this running bed (tests.testbed.tacker_bed start --state-file F --onboard)",
    )
    p.add_argument("--tacker-url", help="use this running Tacker (no hooks) ...")
    p.add_argument("--vnfd-id", help="... where the sample package is onboarded as this vnfdId")
    args = p.parse_args()
    if bool(args.tacker_url) != bool(args.vnfd_id):
        p.error("--tacker-url and --vnfd-id go together")
    if args.tacker_url and args.bed_state:
        p.error("--tacker-url and --bed-state exclude each other")
    if args.cnf and (args.api != "v1" or args.kubernetes != "real"):
        p.error("--cnf goes with --api v1 and the real Kubernetes")
    if args.tacker_url and args.api == "v1":
        p.error("--api v1 onboards the v1 package into a bed: use --bed-state or neither")
    t0 = time.monotonic()
    try:
        with contextlib.ExitStack() as stack:
            run(args, stack)
            say("\nstopping ...")
    except DemoError as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return 1
    say(f"demo done in {elapsed(t0)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
