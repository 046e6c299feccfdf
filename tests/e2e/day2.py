"""The day-2 full loop's tools: one VNF instance driven through the real Tacker, watched
through ``serve`` (a subprocess) and its store, and :meth:`Loop.check_agreement`, the one
check every day-2 test makes after each operation.

Four views of one cluster must agree:

* Tacker's VNFCs (``GET vnf_instances/{id}``: ``instantiatedVnfInfo.vnfcResourceInfo``),
  their addresses read from the simulator's own state (server -> port), not through
  the product's Heat lookups;
* the cluster's Node list as ``kubectl get nodes`` on a master reports it (over SSH,
  the stand-in kubectl, or the real one on the ``k8s`` tier's hosts);
* every node's ``/etc/hosts``;
* our inventory (the store's ``cluster_nodes`` table).

A VM that Tacker deletes or rebuilds is a test host whose private files are wiped
(:func:`testhosts.wipe_host`); a deleted one is also cut off the network
(:meth:`Loop.cut_off`), so nothing can lean on it.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.cluster_fakes import k8s_params
from tests.testbed import testhosts
from tests.testbed.openstack_sim.process import SimProcess
from tests.testbed.tacker_api import (
    NETWORK_ID,
    CallbackRecorder,
    TackerClient,
    ext_virtual_links,
    unique_name,
    wait_for,
)
from tests.testbed.tacker_serve import ServeProcess

__all__ = ["ADMIN_CONF", "Loop", "Member", "kubeadm_calls", "node_name"]

ADMIN_CONF = "/etc/kubernetes/admin.conf"
ETCD_TLS = (
    "--endpoints=https://127.0.0.1:2379 --cacert=/etc/kubernetes/pki/etcd/ca.crt "
    "--cert=/etc/kubernetes/pki/etcd/server.crt --key=/etc/kubernetes/pki/etcd/server.key"
)
ROLE_OF_VDU = {"masterNode": "master", "workerNode": "worker"}
SCALE_ASPECT = "workerNode_scale"
FINISHED = ("done", "failed")


def node_name(role: str, address: str) -> str:
    return f"{role}{address.rsplit('.', 1)[1]}"


#: Flavours with three masters behind a VIP (v1's podaffinity is complex's HA too).
HA_FLAVOURS = ("complex", "podaffinity")


@dataclass(frozen=True, slots=True)
class Member:
    """One node as Tacker's VNFCs say it should be."""

    name: str
    role: str
    vnfc_id: str
    address: str


class Loop:
    """One VNF instance of the sample package, its ``serve`` and the test hosts."""

    def __init__(
        self,
        tacker: TackerClient,
        sim: SimProcess,
        hosts: Any,
        serve: ServeProcess,
        recorder: CallbackRecorder,
    ) -> None:
        self.tacker, self.sim, self.hosts, self.serve = tacker, sim, hosts, serve
        self.recorder = recorder
        self.inst = ""
        self.instantiated = False
        self.cut: set[str] = set()

    # -- Tacker -----------------------------------------------------------------

    #: the instance names' prefix
    prefix = "day2"

    def params(self, **values: Any) -> dict[str, Any]:
        """The instantiate request's ``additionalParams`` (the API's form)."""
        return k8s_params(**values)

    def placement(self) -> dict[str, Any]:
        """Where the instantiate request puts the VNF: its VIM and external links."""
        return {
            "vimConnectionInfo": self.sim.vim_connection_info(),
            "extVirtualLinks": ext_virtual_links(NETWORK_ID),
        }

    def instantiate(self, vnfd_id: str, flavour: str, **extra: Any) -> dict[str, Any]:
        """Create and INSTANTIATE; returns serve's COMPLETED event (its job done)."""
        self.inst = self.tacker.create(vnfd_id, unique_name(f"{self.prefix}-{flavour}"))
        params = self.params(
            master_user="root",
            worker_user=self.hosts.user,
            key=str(self.hosts.client_key),
            password=self.hosts.password,
            ha=flavour in HA_FLAVOURS,
        )
        params["k8s_cluster_installation_param"].update(extra)
        body = {"flavourId": flavour, **self.placement(), "additionalParams": params}
        occ = self.op("instantiate", body)
        self.instantiated = True
        return self.handled(occ["id"])

    def op(self, task: str, body: dict[str, Any]) -> dict[str, Any]:
        """Run an LCM task through Tacker to COMPLETED; returns the op-occ."""
        occ = self.tacker.run_op(self.inst, task, body)
        assert occ["operationState"] == "COMPLETED", occ.get("error")
        return occ

    def scale(self, kind: str, steps: int = 1) -> dict[str, Any]:
        """SCALE_OUT / SCALE_IN of the worker aspect (one worker per step)."""
        return self.op("scale", {"type": kind, "aspectId": SCALE_ASPECT, "numberOfSteps": steps})

    def heal_vnfc(self, vnfc_id: str) -> dict[str, Any]:
        """HEAL one VNFC (the request names its vnfcInfo, not its vnfcResourceInfo)."""
        info = self.tacker.show(self.inst)["instantiatedVnfInfo"]["vnfcInfo"]
        [target] = [i["id"] for i in info if i["vnfcResourceInfoId"] == vnfc_id]
        return self.op("heal", {"vnfcInstanceId": [target]})

    def vnfcs(self) -> list[dict[str, Any]]:
        """``vnfcResourceInfo`` in Tacker's order (newest first within a VDU)."""
        info = self.tacker.show(self.inst).get("instantiatedVnfInfo") or {}
        return list(info.get("vnfcResourceInfo") or [])

    def affected(self, occ_id: str, change: str) -> list[str]:
        """The VNFC ids of the COMPLETED notification's ``affectedVnfcs`` of ``change``."""
        sent = self.recorder.wait(vnfLcmOpOccId=occ_id, operationState="COMPLETED")
        return [a["id"] for a in sent.get("affectedVnfcs") or () if a["changeType"] == change]

    def terminate(self) -> None:
        """Best effort, for teardown: TERMINATE and delete the instance."""
        if not self.inst:
            return
        if self.instantiated:
            self.tacker.run_op(self.inst, "terminate", {"terminationType": "FORCEFUL"})
            self.instantiated = False
        self.tacker.delete(self.inst)

    def members(self) -> dict[str, Member]:
        """What Tacker's VNFCs say the cluster is, by node name."""
        address = {
            p["device_id"]: p["fixed_ips"][0]["ip_address"]
            for p in self.sim.control.state()["ports"]
            if p.get("device_id")
        }
        out = {}
        for vnfc in self.vnfcs():
            role = ROLE_OF_VDU[vnfc["vduId"]]
            ip = address[vnfc["computeResource"]["resourceId"]]
            out[node_name(role, ip)] = Member(node_name(role, ip), role, vnfc["id"], ip)
        return out

    # -- serve ------------------------------------------------------------------

    def event_of(self, occ_id: str, state: str = "COMPLETED") -> int | None:
        rows = self.serve.rows(
            "SELECT id FROM events WHERE vnf_lcm_op_occ_id = ? AND operation_state = ?",
            occ_id,
            state,
        )
        return int(rows[0][0]) if rows else None

    def handled(
        self, occ_id: str, *, want: str = "done", jobs_after: int = 0, timeout: float = 240.0
    ) -> dict[str, Any]:
        """serve's COMPLETED event of ``occ_id`` once its job finished (``events show``);
        it must have finished as ``want``. ``jobs_after``: wait for a job beyond that many
        (a replay's)."""

        def finished() -> int | None:
            proc = self.serve.proc
            assert proc is not None and proc.poll() is None, self.serve.log.read_text()[-4000:]
            event = self.event_of(occ_id)
            if event is None:
                return None
            [(status,)] = self.serve.rows("SELECT status FROM events WHERE id = ?", event)
            [(jobs,)] = self.serve.rows("SELECT count(*) FROM jobs WHERE event_id = ?", event)
            return event if status in FINISHED and jobs > jobs_after else None

        event_id = wait_for(finished, timeout=timeout, interval=0.3, what=f"{occ_id} handled")
        shown = self.serve.event(event_id)
        if shown["status"] != want:
            jobs = [(j["handler"], j["errorClass"], j["lastError"]) for j in shown["jobs"]]
            raise AssertionError(f"event {event_id} is {shown['status']}, not {want}: {jobs}")
        return shown

    @staticmethod
    def steps(shown: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """The last job's steps by name, from ``events show``."""
        return {s["name"]: s for s in shown["jobs"][-1]["steps"]}

    def inventory(self) -> dict[str, Member]:
        rows = self.serve.rows(
            "SELECT node_name, role, vnfc_id, nic_ip FROM cluster_nodes WHERE vnf_instance_id = ?",
            self.inst,
        )
        return {r[0]: Member(*r) for r in rows}

    # -- the hosts --------------------------------------------------------------

    def host(self, address: str) -> Any:
        return next(h for h in self.hosts.hosts if h.address == address)

    def ssh(self, address: str, command: str, stdin: str | None = None) -> str:
        """``command`` as root on a test host, with the test client's own ssh (``stdin``:
        its input)."""
        out = subprocess.run(
            [
                "ssh",
                "-i",
                str(self.hosts.client_key),
                "-o",
                f"UserKnownHostsFile={self.hosts.known_hosts}",
                "-o",
                "StrictHostKeyChecking=yes",
                "-o",
                "BatchMode=yes",
                "-o",
                "ConnectTimeout=5",
                f"root@{address}",
                command,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            **({"stdin": subprocess.DEVNULL} if stdin is None else {"input": stdin}),
        )
        assert out.returncode == 0, f"{address}: {command}: {out.stderr}"
        return out.stdout

    def cluster_nodes(self, masters: list[Member]) -> dict[str, dict[str, Any]]:
        """``kubectl get nodes -o json`` on the first master that answers."""
        errors = []
        for master in masters:
            try:
                out = self.ssh(
                    master.address, f"kubectl --kubeconfig {ADMIN_CONF} get nodes -o json"
                )
            except AssertionError as exc:
                errors.append(str(exc))
                continue
            return {n["metadata"]["name"]: n for n in json.loads(out)["items"]}
        raise AssertionError(f"no master answered kubectl get nodes: {errors}")

    def etcd_members(self, masters: list[Member]) -> dict[str, str]:
        """etcd's members, id (hex) -> name: the stand-in's state, or (real mode) what
        ``etcdctl member list`` on the first master that answers says."""
        if self.hosts.kubernetes != "real":
            return {f"{m['ID']:x}": m["name"] for m in self.hosts.state()["etcd"].values()}
        errors = []
        for master in masters:
            try:
                command = f"ETCDCTL_API=3 etcdctl {ETCD_TLS} member list -w json"
                out = self.ssh(master.address, command)
            except AssertionError as exc:
                errors.append(str(exc))
                continue
            return {f"{m['ID']:x}": m.get("name", "") for m in json.loads(out)["members"]}
        raise AssertionError(f"no master answered etcdctl member list: {errors}")

    def etc_hosts(self, address: str) -> tuple[dict[str, str], dict[str, str]]:
        """(the whole file's name -> address of the subnet's lines, our block's)."""
        text = (Path(self.hosts.root) / "hosts" / self.host(address).name / "hosts").read_text()
        names: dict[str, str] = {}
        block: dict[str, str] = {}
        inside = False
        for line in text.splitlines():
            if line == "# lccn-subscriber nodes begin":
                inside = True
                continue
            if line == "# lccn-subscriber nodes end":
                inside = False
                continue
            fields = line.split()
            if len(fields) >= 2 and fields[0].startswith("10."):
                names[fields[1]] = fields[0]
                if inside:
                    block[fields[1]] = fields[0]
        return names, block

    def vm_broken(self, address: str) -> None:
        """The VM's disk is lost (it is about to be rebuilt): its private files are gone."""
        testhosts.wipe_host(self.hosts, self.host(address))

    def haproxy_backends(self, address: str) -> dict[str, str]:
        """name -> address of the ``server`` lines of the host's haproxy.cfg."""
        fs = Path(self.hosts.root) / "hosts" / self.host(address).name / "fs"
        [cfg] = fs.rglob("haproxy.cfg")
        out = {}
        for line in cfg.read_text().splitlines():
            fields = line.split()
            if fields[:1] == ["server"] and len(fields) >= 3:
                out[fields[1]] = fields[2].rsplit(":", 1)[0]
        return out

    def joining(self, address: str) -> bool:
        """Whether a stand-in ``kubeadm join`` runs on the host now (a process in its
        network namespace)."""
        netns = os.readlink(f"/proc/{self.host(address).pid}/ns/net")
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                argv = (proc / "cmdline").read_bytes().split(b"\0")
                if b"kubeadm" in argv and b"join" in argv and os.readlink(proc / "ns/net") == netns:
                    return True
            except OSError:  # gone meanwhile
                continue
        return False

    def vm_gone(self, address: str) -> None:
        """Tacker deleted this VM: its files are gone and nobody reaches it any more."""
        testhosts.wipe_host(self.hosts, self.host(address))
        self.cut_off(address)

    def cut_off(self, address: str) -> None:
        subprocess.run(
            ["ip", "-n", self.host(address).namespace, "link", "set", "eth0", "down"], check=True
        )
        self.cut.add(address)

    def reconnect(self, address: str) -> None:
        subprocess.run(
            ["ip", "-n", self.host(address).namespace, "link", "set", "eth0", "up"], check=True
        )
        self.cut.discard(address)

        def answers() -> bool:
            try:
                socket.create_connection((address, 22), timeout=1).close()
            except OSError:
                return False
            return True

        wait_for(answers, timeout=20, what=f"{address} reachable again")

    # -- the one check ----------------------------------------------------------

    def check_agreement(self) -> dict[str, Member]:
        """Tacker's VNFCs, the cluster's nodes, every node's /etc/hosts and our inventory
        name the same nodes (same roles, addresses and VNFC ids), every node Ready; with
        several masters, etcd's members and each master's haproxy backends are the
        masters. Returns the nodes."""
        members = self.members()
        want = {name: m.address for name, m in members.items()}
        masters = sorted((m for m in members.values() if m.role == "master"), key=lambda m: m.name)
        nodes = self.cluster_nodes(masters)
        assert set(nodes) == set(members), ("cluster", sorted(nodes), sorted(members))
        for name, node in nodes.items():
            ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"]
            assert ready == "True", (name, node["status"])
            internal = [
                a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP"
            ]
            assert internal == [members[name].address], (name, internal)
            plane = "node-role.kubernetes.io/control-plane" in node["metadata"]["labels"]
            assert plane == (members[name].role == "master"), (name, node["metadata"]["labels"])
        for m in members.values():
            names, block = self.etc_hosts(m.address)
            assert block == want, ("/etc/hosts block", m.name, block, want)
            own = self.host(m.address).name  # the test host's own line stays
            assert set(names) - {own} <= set(want), ("/etc/hosts", m.name, names)
        if len(masters) > 1:  # HA: etcd's members and every haproxy's backends too
            etcd = sorted(self.etcd_members(masters).values())
            assert etcd == sorted(m.name for m in masters), ("etcd", etcd)
            backends = {m.name: m.address for m in masters}
            for m in masters:
                assert self.haproxy_backends(m.address) == backends, ("haproxy", m.name)
        inventory = self.inventory()
        assert inventory == members, ("inventory", inventory, members)
        return members


def kubeadm_calls(hosts: Any, verb: str, host: str, *, after: float = 0.0) -> list[dict[str, Any]]:
    """Successful stand-in ``kubeadm <verb>`` calls (not phases) on ``host`` since ``after``."""
    return [
        c
        for c in hosts.calls()
        if c["tool"] == "kubeadm"
        and c["argv"][:1] == [verb]
        and c["argv"][1:2] != ["phase"]
        and c["host"] == host
        and c["rc"] == 0
        and float(c["t"]) >= after
    ]
