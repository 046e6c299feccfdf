"""The storage server and its NFS persistent volumes (``storage_server``,
``pv_registration_params``; seed 004, TACKER.md §1.2 and §1.6).

* **The storage server** is the VNFC with a CP named ``storage_server.ssh_cp_name``
  (Tacker's driver finds it the same way); we log in with ``storage_server``'s
  own user and password. Each ``cinder_volume_setup_params`` entry names a Cinder
  volume resource of its stack; the device is the first attachment's ``device``
  in Heat (Tacker's ``attachments[0].device``). The volume is formatted ext4
  **only when it holds nothing** (``blkid -p`` finds no filesystem and no
  partition table: a rebuilt server gets its old volume back, data and all) and
  mounted on ``mount_to`` unless it already is; a directory with another device
  mounted on it fails the step.
* **The exports** are Tacker's lines, ``<export_dir> <export_to>(rw,sync,
  no_subtree_check,insecure,all_squash)`` (or the options ``export_to`` gives, from
  an allowed set; ``no_root_squash`` only with ``cluster.nfs_allow_no_root_squash``),
  in a file of their own,
  ``/etc/exports.d/lccn-subscriber.exports`` (replaced only when it differs), and
  ``exportfs -ra`` applies them. The export directories are created (owned by
  the squashed user, 65534, so that clients can write); ``nfs-kernel-server`` is
  installed when ``exportfs`` is missing.
* **The NFS client** (``nfs-common``) on every node, unless ``mount.nfs`` is there.
* **The PVs**: each manifest (``pv_manifest_file_path``, read from the VNF package
  in Tacker) must be one ``PersistentVolume`` with an ``nfs`` source; its
  ``spec.nfs.server`` becomes the fixed IP of ``nfs_server_cp`` on the storage
  server, it is applied through a master (stdin, ``kubectl apply -f -``) and
  waited for until ``Available`` (bounded); a PV that does not get there is
  deleted and the step fails naming it and its phase.
* **Heal of the storage server**: refused while one of its PVs is ``Bound``
  (:func:`bound`); otherwise the PVs are deleted before the VM goes, and
  registered again once it is rebuilt.

The storage password is sent only as the SSH login (and sudo's stdin); no step
result names a password.
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from handlers.toolkit.shell import NodeShell
from handlers.toolkit.topology import VnfcStacks, ip_address_of
from schemas.cluster_params import (
    PARAM_KEY,
    ApiVersion,
    NfsServerSetup,
    StorageServerParams,
)
from subscriber.errors import DiscoveryError, PermanentStepError
from subscriber.kernel.ports import ClusterNode, CommandResult, OpenStackLookups, SshTarget

__all__ = [
    "EXPORTS_FILE",
    "EXPORT_OPTIONS",
    "NFS_CLIENT",
    "PersistentVolume",
    "StorageServer",
    "apply_exports",
    "bound",
    "delete_pvs",
    "exports_text",
    "find_server",
    "install_nfs_client",
    "pv_phases",
    "read_manifest",
    "register_pv",
    "set_up_volume",
    "storage_run",
]

EXPORTS_FILE = "/etc/exports.d/lccn-subscriber.exports"
EXPORT_OPTIONS = "rw,sync,no_subtree_check,insecure,all_squash"  # Tacker's
NFS_CLIENT = "nfs-common"
_DEVICE = re.compile(r"/dev/[A-Za-z0-9_.:/-]+")  # what Heat reports as an attachment's device
_SQUASHED = "65534"  # nobody/nogroup: the user all_squash maps clients to

# $1 device, $2 mount point. Prints one of: "mounted-already", "mounted <fstype>",
# "formatted+mounted". Exit 3: refused (a message on stderr).
_VOLUME = r"""set -eu
dev=$1 dir=$2
[ -b "$dev" ] || { echo "$dev is not a block device" >&2; exit 3; }
mkdir -p "$dir"
real=$(readlink -f "$dev")
if mountpoint -q "$dir"; then
  src=$(findmnt -rn -o SOURCE --mountpoint "$dir" | head -n1)
  if [ "$(readlink -f "$src")" = "$real" ]; then echo mounted-already; exit 0; fi
  echo "$dir already has $src mounted, not $dev" >&2; exit 3
fi
set +e
probe=$(blkid -p -o export "$dev" 2>/dev/null)
rc=$?
set -e
fstype=$(printf '%s\n' "$probe" | sed -n 's/^TYPE=//p')
if [ "$rc" -eq 0 ] && [ -z "$fstype" ]; then
  echo "$dev holds a partition table or another signature, no filesystem: not formatting it" >&2
  exit 3
fi
if [ "$rc" -eq 2 ]; then
  mkfs.ext4 -q -F "$dev"
  mount "$dev" "$dir"
  echo formatted+mounted
  exit 0
fi
if [ "$rc" -ne 0 ]; then echo "blkid could not probe $dev (exit $rc)" >&2; exit 3; fi
mount -t "$fstype" "$dev" "$dir"
echo "mounted $fstype"
"""

# $1 exports file; stdin: its content; then each further argument is an export
# directory to create. Prints "changed"/"unchanged", then "applied".
_EXPORTS = r"""set -eu
path=$1; shift
for d in "$@"; do
  if [ ! -d "$d" ]; then mkdir -p "$d"; chown 65534:65534 "$d"; fi
done
mkdir -p "$(dirname "$path")"
tmp=$(mktemp "$(dirname "$path")/.lccn.XXXXXX")
trap 'rm -f "$tmp"' EXIT
cat > "$tmp"
chmod 644 "$tmp"
if [ -f "$path" ] && cmp -s "$tmp" "$path"; then
  echo unchanged
else
  mv -f "$tmp" "$path"
  echo changed
fi
if ! command -v exportfs >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  apt-get install -y -q nfs-kernel-server >/dev/null
fi
if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
  systemctl enable --now nfs-kernel-server >/dev/null 2>&1 || true
fi
exportfs -ra
echo applied
"""

_CLIENT = r"""set -eu
if command -v mount.nfs >/dev/null 2>&1 || [ -x /sbin/mount.nfs ] \
   || [ -x /usr/sbin/mount.nfs ]; then
  echo present
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >/dev/null
apt-get install -y -q nfs-common >/dev/null
echo installed
"""


@dataclass(frozen=True, slots=True)
class StorageServer:
    """The storage VNFC as found now (its VM may have been rebuilt: new ids, same CPs)."""

    vnfc_id: str
    server_id: str | None
    stack_id: str
    ssh_ip: str
    nic_ip: str

    def as_json(self) -> dict[str, Any]:
        return {
            "vnfcId": self.vnfc_id,
            "serverId": self.server_id,
            "stackId": self.stack_id,
            "sshIp": self.ssh_ip,
            "nicIp": self.nic_ip,
        }


@dataclass(frozen=True, slots=True)
class PersistentVolume:
    """One PV manifest with its NFS server set: its name and the JSON to apply."""

    name: str
    path: str  # the manifest's path in the package
    export: str  # spec.nfs.path
    server: str  # spec.nfs.server as applied
    manifest: str  # JSON

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "manifest": self.path, "path": self.export}


# ------------------------------------------------------------- discovery


def _fixed(addresses: Any, what: str) -> str:
    if not addresses.fixed_ips:
        raise DiscoveryError(f"{what} has no fixed IP in Heat")
    return ip_address_of(addresses.fixed_ips[0], what)


async def find_server(
    instance: Mapping[str, Any],
    storage: StorageServerParams,
    openstack: OpenStackLookups,
    api: ApiVersion = "v2",
) -> StorageServer:
    """The storage VNFC (the one with a CP named ``storage.ssh_cp_name``), its addresses.

    Raises:
        DiscoveryError: no such VNFC, or it has no stack or address (permanent).
    """
    info = instance.get("instantiatedVnfInfo") or {}
    vnfcs = [
        v
        for v in info.get("vnfcResourceInfo") or ()
        if any(cp.get("cpdId") == storage.ssh_cp_name for cp in v.get("vnfcCpInfo") or ())
    ]
    if not vnfcs:
        raise DiscoveryError(
            f"VNF instance {instance.get('id', '')} has no storage server VNFC "
            f"(no VNFC with the CP {storage.ssh_cp_name})"
        )
    vnfc = vnfcs[0]
    vnfc_id = str(vnfc.get("id", ""))
    stack_id = await VnfcStacks(instance, openstack, api).of(vnfc)
    ssh = await openstack.port_addresses(stack_id, storage.ssh_cp_name)
    nic_cp = storage.nic_cp_name or storage.ssh_cp_name
    nic = ssh if nic_cp == storage.ssh_cp_name else await openstack.port_addresses(stack_id, nic_cp)
    return StorageServer(
        vnfc_id=vnfc_id,
        server_id=(vnfc.get("computeResource") or {}).get("resourceId"),
        stack_id=str(stack_id),
        ssh_ip=ip_address_of(
            ssh.floating_ip, f"{storage.ssh_cp_name} of the storage server (floating IP)"
        )
        if ssh.floating_ip
        else _fixed(ssh, f"{storage.ssh_cp_name} of the storage server"),
        nic_ip=_fixed(nic, f"{nic_cp} of the storage server"),
    )


async def nfs_server_ip(server: StorageServer, cp_name: str, openstack: OpenStackLookups) -> str:
    """The fixed IP of the storage server's CP ``cp_name`` (a PV's ``nfs_server_cp``)."""
    return _fixed(
        await openstack.port_addresses(server.stack_id, cp_name),
        f"nfs_server_cp {cp_name} of the storage server",
    )


async def volume_device(
    server: StorageServer, volume_resource_id: str, openstack: OpenStackLookups
) -> str:
    """The device of the volume resource's first attachment (Tacker's way).

    Raises:
        PermanentStepError: the volume is not attached.
    """
    devices = await openstack.volume_devices(server.stack_id, volume_resource_id)
    if not devices:
        raise PermanentStepError(
            f"the Cinder volume {volume_resource_id} of the storage server is not attached "
            "(no attachments in Heat)"
        )
    if not _DEVICE.fullmatch(devices[0]) or "/../" in devices[0] + "/":
        raise DiscoveryError(
            f"the Cinder volume {volume_resource_id} of the storage server: the device Heat "
            "reports is not a /dev path"
        )
    return devices[0]


# ------------------------------------------------------------ on the server


def _target(storage: StorageServerParams, server: StorageServer) -> SshTarget:
    return SshTarget(
        host=server.ssh_ip,
        username=storage.username,
        password=storage.password,
        origin=f"{PARAM_KEY}.storage_server",
    )


async def storage_run(
    shell: NodeShell,
    storage: StorageServerParams,
    server: StorageServer,
    command: str,
    *,
    input: str | None = None,
    timeout: float | None = None,  # noqa: ASYNC109 - the remote command's limit
) -> CommandResult:
    """Run ``command`` as root on the storage server with its own login."""
    return await shell.ssh.run(
        _target(storage, server),
        command,
        sudo=True,
        command_timeout=timeout or shell.settings.kubectl_timeout,
        input=input,
    )


def _refused(result: CommandResult, what: str, step: str | None) -> None:
    if result.exit_status == 3:
        raise PermanentStepError(
            f"{what}: {result.redacted(result.stderr.strip()) or 'refused'}", step=step
        )
    result.check(step=step)


async def set_up_volume(
    shell: NodeShell,
    storage: StorageServerParams,
    server: StorageServer,
    device: str,
    mount_to: str,
    *,
    step: str | None = None,
) -> str:
    """Format (only a blank device) and mount ``device`` on ``mount_to``; what was done.

    Raises:
        PermanentStepError: not a block device, another device on ``mount_to``, or
            a device with a signature that is not a filesystem;
        CommandFailed: anything else failed on the server.
    """
    command = f"bash -c {shlex.quote(_VOLUME)} volume {shlex.quote(device)} {shlex.quote(mount_to)}"
    result = await storage_run(shell, storage, server, command, timeout=300.0)
    _refused(result, f"storage server {server.ssh_ip}, volume {device} on {mount_to}", step)
    return result.stdout.strip().splitlines()[-1]


def exports_text(setups: Sequence[NfsServerSetup], *, allow_no_root_squash: bool = False) -> str:
    """The exports file: Tacker's line per ``nfs_server_setup_params`` entry (its own
    options when ``export_to`` gives them, else Tacker's).

    Each part was checked by the schema (a path, a client, known options); each line is
    checked again here, so that no value can end a line or add an export.

    Raises:
        PermanentStepError: ``no_root_squash`` is asked for and the operator does not
            allow it (``cluster.nfs_allow_no_root_squash``).
    """
    lines = ["# lccn-subscriber: storage_server.nfs_server_setup_params"]
    for index, setup in enumerate(setups):
        where = f"{PARAM_KEY}.storage_server.nfs_server_setup_params.{index}.export_to"
        options = setup.options or tuple(EXPORT_OPTIONS.split(","))
        if "no_root_squash" in options and not allow_no_root_squash:
            raise PermanentStepError(
                f"{where}: no_root_squash is not allowed (cluster.nfs_allow_no_root_squash)"
            )
        line = f"{setup.export_dir} {setup.client}({','.join(options)})"
        if not line.isprintable() or len(line.split()) != 2 or line.count("(") != 1:
            raise PermanentStepError(f"{where}: does not make one exports line")
        lines.append(line)
    return "\n".join(lines) + "\n"


async def apply_exports(
    shell: NodeShell,
    storage: StorageServerParams,
    server: StorageServer,
    *,
    step: str | None = None,
) -> bool:
    """Create the export directories, write the exports file, ``exportfs -ra``.

    Returns:
        Whether the exports file changed.
    """
    dirs = " ".join(shlex.quote(s.export_dir) for s in storage.nfs_server_setup_params)
    command = f"bash -c {shlex.quote(_EXPORTS)} exports {shlex.quote(EXPORTS_FILE)} {dirs}"
    result = await storage_run(
        shell,
        storage,
        server,
        command,
        input=exports_text(
            storage.nfs_server_setup_params,
            allow_no_root_squash=shell.settings.nfs_allow_no_root_squash,
        ),
        timeout=shell.settings.install_timeout,
    )
    out = result.check(step=step).stdout.split()
    return "changed" in out


async def install_nfs_client(
    shell: NodeShell, node: ClusterNode, *, step: str | None = None
) -> str:
    """``nfs-common`` on ``node`` unless ``mount.nfs`` is there: "present" or "installed"."""
    command = f"bash -c {shlex.quote(_CLIENT)}"
    result = await shell.run(node, command, timeout=shell.settings.install_timeout)
    return result.check(step=step).stdout.strip().splitlines()[-1]


# ------------------------------------------------------------------ the PVs


MAX_YAML_NODES = 10_000  # a PersistentVolume has a few dozen


class _Refused(yaml.YAMLError):
    """A manifest the plain loader does not take (its message says why)."""


class _PlainLoader(yaml.SafeLoader):
    """``SafeLoader`` without anchors and aliases, and with a node budget.

    An alias makes one node count many times once the document is used (``json.dumps``
    expands every reference: 372 bytes of nested aliases became 814 KB), and a PV
    manifest has no use for one; the budget bounds what the rest can build.
    """

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._nodes = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise _Refused(
                f"YAML anchors and aliases are not accepted (line {event.start_mark.line + 1})"
            )
        self._nodes += 1
        if self._nodes > MAX_YAML_NODES:
            raise _Refused(f"more than {MAX_YAML_NODES} YAML nodes")
        return super().compose_node(parent, index)


def read_manifest(text: bytes, path: str, server_ip: str, *, step: str | None) -> PersistentVolume:
    """The PV of the manifest at ``path`` with ``spec.nfs.server`` set to ``server_ip``.

    Raises:
        PermanentStepError: not YAML, YAML with anchors or aliases or more than
            :data:`MAX_YAML_NODES` nodes, not exactly one PersistentVolume with a name
            and an ``nfs`` source.
    """
    what = f"pv_manifest_file_path {path}"
    try:
        docs = [d for d in yaml.load_all(text, Loader=_PlainLoader) if d is not None]
    except _Refused as exc:
        raise PermanentStepError(f"{what}: {exc}", step=step) from None
    except yaml.YAMLError:
        raise PermanentStepError(f"{what} is not YAML", step=step) from None
    if len(docs) != 1 or not isinstance(docs[0], dict):
        raise PermanentStepError(f"{what} must hold one PersistentVolume", step=step)
    doc: dict[str, Any] = docs[0]
    name = (doc.get("metadata") or {}).get("name")
    nfs = (doc.get("spec") or {}).get("nfs")
    if doc.get("kind") != "PersistentVolume" or not name or not isinstance(nfs, dict):
        raise PermanentStepError(
            f"{what} must be a PersistentVolume with metadata.name and spec.nfs", step=step
        )
    if not nfs.get("path"):
        raise PermanentStepError(f"{what} has no spec.nfs.path", step=step)
    nfs["server"] = server_ip
    return PersistentVolume(
        name=str(name),
        path=path,
        export=str(nfs["path"]),
        server=server_ip,
        manifest=json.dumps(doc, sort_keys=True),
    )


async def pv_phases(
    shell: NodeShell, via: ClusterNode, *, step: str | None = None
) -> dict[str, dict[str, Any]]:
    """Every PV of the cluster: name -> ``{"phase", "server", "claim"}``."""
    result = await shell.run(via, shell.kubectl("get pv -o json"))
    items = json.loads(result.check(step=step).stdout or "{}").get("items") or []
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        claim = (item.get("spec") or {}).get("claimRef") or {}
        out[str(item["metadata"]["name"])] = {
            "phase": (item.get("status") or {}).get("phase"),
            "server": ((item.get("spec") or {}).get("nfs") or {}).get("server"),
            "claim": f"{claim.get('namespace')}/{claim.get('name')}" if claim else None,
        }
    return out


def bound(phases: Mapping[str, Mapping[str, Any]], names: Sequence[str]) -> list[str]:
    """Those of ``names`` that are ``Bound``, each with its claim (for the refusal)."""
    return [
        f"{n} (claimed by {phases[n].get('claim')})"
        for n in names
        if n in phases and phases[n].get("phase") == "Bound"
    ]


async def _delete(shell: NodeShell, via: ClusterNode, name: str, *, step: str | None) -> None:
    command = shell.kubectl(f"delete pv {shlex.quote(name)} --ignore-not-found --wait=false")
    (await shell.run(via, command)).check(step=step)


async def delete_pvs(
    shell: NodeShell,
    via: ClusterNode,
    names: Sequence[str],
    *,
    wait: float,
    step: str | None = None,
) -> list[str]:
    """Delete those of ``names`` that exist and wait (up to ``wait`` s) until they are gone.

    Returns:
        The names deleted.

    Raises:
        PermanentStepError: one is still there after ``wait`` seconds.
    """
    present = [n for n in names if n in await pv_phases(shell, via, step=step)]
    for name in present:
        await _delete(shell, via, name, step=step)
    deadline = time.monotonic() + wait
    while present:
        left = [n for n in present if n in await pv_phases(shell, via, step=step)]
        if not left:
            break
        if time.monotonic() > deadline:
            raise PermanentStepError(
                f"PersistentVolumes {', '.join(left)} are still there {wait:.0f} s after "
                "their deletion",
                step=step,
            )
        await asyncio.sleep(1.0)
    return present


async def register_pv(
    shell: NodeShell,
    via: ClusterNode,
    pv: PersistentVolume,
    *,
    wait: float,
    step: str | None = None,
) -> str:
    """Apply ``pv`` through ``via`` and wait until it is ``Available``; what was done.

    A PV already there with the same server is left alone while ``Available`` or
    ``Bound``; one with another server (a storage server with a new address) is
    replaced when unbound.

    Raises:
        PermanentStepError: it is bound with another server, or it did not become
            ``Available`` within ``wait`` seconds (it is deleted first).
    """
    known = (await pv_phases(shell, via, step=step)).get(pv.name)
    if known is not None and known.get("server") == pv.server:
        if known.get("phase") in ("Available", "Bound"):
            return f"already {known['phase']}"
        # Released or Failed: its claim is gone; registered anew it becomes Available.
        await delete_pvs(shell, via, [pv.name], wait=wait, step=step)
    elif known is not None:
        if known.get("phase") == "Bound":
            raise PermanentStepError(
                f"PersistentVolume {pv.name} is Bound (claimed by {known.get('claim')}) with "
                f"the NFS server {known.get('server')}, not {pv.server}: release it and replay",
                step=step,
            )
        await delete_pvs(shell, via, [pv.name], wait=wait, step=step)
    (await shell.run(via, shell.kubectl("apply -f -"), input=pv.manifest)).check(step=step)
    deadline = time.monotonic() + wait
    phase: str | None = None
    while True:
        phase = ((await pv_phases(shell, via, step=step)).get(pv.name) or {}).get("phase")
        if phase in ("Available", "Bound"):
            return "registered"
        if time.monotonic() > deadline:
            break
        await asyncio.sleep(min(2.0, max(0.2, wait / 20)))
    await _delete(shell, via, pv.name, step=step)
    raise PermanentStepError(
        f"PersistentVolume {pv.name} ({pv.path}) is {phase or 'missing'}, not Available, "
        f"{wait:.0f} s after it was applied: deleted it",
        step=step,
    )
