"""Cinder volumes of the simulated OpenStack: what ``OS::Cinder::Volume`` stands for.

What is simulated
    * A volume is a record with an id, a size and its attachments; Heat shows the
      attachments on the volume resource (``attributes.attachments``, and
      ``attachments_list`` as newer Heat names it): ``[{"server_id", "device",
      "attachment_id", "volume_id"}]``, the list Tacker's driver reads the device from.
    * A volume is attached by ``OS::Cinder::VolumeAttachment`` (``instance_uuid``,
      ``volume_id``, ``mountpoint``) or by the server's ``block_device_mapping_v2``
      (``volume_id``, ``device_name``), as Tacker's sample HOT does; a deleted
      server or attachment detaches it, a rebuilt server (a healed VNFC) attaches it
      again: the volume and its data outlive the server.
    * With :class:`LoopDevices` (``SimConfig.loop_volumes``, needs root and
      ``losetup``) each volume is a sparse file of ``LCCN_SIM_VOLUME_MB`` MiB (64 by
      default, whatever the requested size) behind a real loop device, and the
      attachment's ``device`` is that ``/dev/loopN``: the block device the storage
      server's test host sees (the hosts share ``/dev``). Without it the device is
      the requested name (``/dev/vdb``) and nothing backs it.

What is left out
    The Cinder API itself (only Heat shows volumes), volume types, snapshots, images,
    multi-attach, backups, quotas, encryption; the size is not honoured by the backing
    file; the device name a real hypervisor picks (``/dev/vdb``) is not the loop
    device's name.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path
from typing import Any

__all__ = ["LoopDevices", "VolumeRegistry"]


class LoopDevices:
    """Sparse files behind loop devices, one per volume; :meth:`close` detaches them all."""

    def __init__(self, size_mb: int | None = None) -> None:
        self.size_mb = size_mb or int(os.environ.get("LCCN_SIM_VOLUME_MB", "64"))
        self.root = Path(tempfile.mkdtemp(prefix="lccn-sim-volumes-"))
        self.devices: dict[str, str] = {}  # volume id -> /dev/loopN

    def create(self, volume_id: str) -> str:
        backing = self.root / f"{volume_id}.img"
        with backing.open("wb") as fh:
            fh.truncate(self.size_mb * 1024 * 1024)
        device = subprocess.run(
            ["losetup", "--find", "--show", str(backing)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        self.devices[volume_id] = device
        return device

    def release(self, volume_id: str) -> None:
        device = self.devices.pop(volume_id, None)
        if device:
            # A mount inside a test host keeps the device busy: autoclear detaches it
            # once the last user lets go.
            subprocess.run(["losetup", "--detach", device], check=False, capture_output=True)
        (self.root / f"{volume_id}.img").unlink(missing_ok=True)

    def close(self) -> None:
        for volume_id in list(self.devices):
            self.release(volume_id)
        shutil.rmtree(self.root, ignore_errors=True)


class VolumeRegistry:
    """The cloud's volumes and their attachments (see the module's docstring)."""

    def __init__(self, loop: LoopDevices | None = None) -> None:
        self.loop = loop
        self.volumes: dict[str, dict[str, Any]] = {}

    def create(self, name: str, size: Any) -> dict[str, Any]:
        volume_id = str(uuid.uuid4())
        volume: dict[str, Any] = {
            "id": volume_id,
            "name": name,
            "size": int(size or 1),
            "status": "available",
            "attachments": [],
            "backing_device": self.loop.create(volume_id) if self.loop else None,
        }
        self.volumes[volume_id] = volume
        return volume

    def attributes(self, volume: dict[str, Any]) -> dict[str, Any]:
        """The volume resource's attributes (the lists are shared: they follow attachments)."""
        return {
            "size": volume["size"],
            "status": volume["status"],
            "display_name": volume["name"],
            "attachments": volume["attachments"],
            "attachments_list": volume["attachments"],
        }

    def attach(self, volume_id: str, server_id: str, requested: str | None) -> dict[str, Any]:
        volume = self.volumes.get(volume_id)
        if volume is None:
            raise KeyError(volume_id)
        name = (requested or "vdb").removeprefix("/dev/")
        attachment = {
            "id": str(uuid.uuid4()),
            "attachment_id": str(uuid.uuid4()),
            "server_id": server_id,
            "volume_id": volume_id,
            "device": volume["backing_device"] or f"/dev/{name}",
        }
        volume["attachments"].append(attachment)
        volume["status"] = "in-use"
        return attachment

    def detach(self, *, server_id: str | None = None, attachment_id: str | None = None) -> None:
        for volume in self.volumes.values():
            kept = [
                a
                for a in volume["attachments"]
                if a["server_id"] != server_id and a["attachment_id"] != attachment_id
            ]
            volume["attachments"][:] = kept
            volume["status"] = "in-use" if kept else "available"

    def delete(self, volume_id: str) -> None:
        if self.volumes.pop(volume_id, None) is not None and self.loop is not None:
            self.loop.release(volume_id)

    def close(self) -> None:
        if self.loop is not None:
            self.loop.close()
