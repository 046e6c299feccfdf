"""The simulator's Cinder volumes (fast): ``OS::Cinder::Volume``, its attachment by
``OS::Cinder::VolumeAttachment`` or a server's ``block_device_mapping_v2``, the device
Heat shows, a healed server that gets the same volume back, and the loop device behind it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.testbed.openstack_sim.heat import AddressPool, HeatEngine
from tests.testbed.openstack_sim.volumes import LoopDevices, VolumeRegistry

STORAGE_HOT = """
heat_template_version: 2013-05-23
resources:
  storage_server_volume:
    type: OS::Cinder::Volume
    properties: {size: 1}
  storage_server_CP:
    type: OS::Neutron::Port
    properties: {network: net0}
  storage_server:
    type: OS::Nova::Server
    properties:
      flavor: m1.small
      image: img
      block_device_mapping_v2:
        - device_name: vdb
          volume_id: { get_resource: storage_server_volume }
          boot_index: -1
      networks:
        - port: { get_resource: storage_server_CP }
  extra_volume:
    type: OS::Cinder::Volume
    properties: {size: 1}
  extra_attachment:
    type: OS::Cinder::VolumeAttachment
    properties:
      instance_uuid: { get_resource: storage_server }
      volume_id: { get_resource: extra_volume }
      mountpoint: /dev/vdc
"""


def engine(volumes: VolumeRegistry | None = None) -> HeatEngine:
    return HeatEngine(
        server_pool=AddressPool.parse("servers", "10.77.0.11-10.77.0.20"),
        vip_pool=AddressPool.parse("vips", "10.77.0.200"),
        floating_pool=AddressPool.parse("floating", "192.0.2.100"),
        compute_hosts=["compute-0"],
        volumes=volumes,
    )


def test_storage_volume_attached_by_mapping_and_attachment_and_kept_over_a_heal() -> None:
    heat = engine()
    stack = heat.create_stack("vnf-storage", STORAGE_HOT, None, None)
    assert stack.status == "CREATE_COMPLETE", stack.status_reason
    server = stack.resources["storage_server"].physical_id
    volume = stack.resources["storage_server_volume"]
    attached = volume.attributes["attachments"]
    assert [(a["server_id"], a["device"]) for a in attached] == [(server, "/dev/vdb")]
    assert volume.attributes["attachments_list"] == attached
    extra = stack.resources["extra_volume"].attributes["attachments"]
    assert [(a["server_id"], a["device"]) for a in extra] == [(server, "/dev/vdc")]
    assert heat.servers[server]["os-extended-volumes:volumes_attached"] == [
        {"id": volume.physical_id}
    ]

    # Heal: the server is rebuilt, the volume stays and is attached to the new server.
    heat.mark_unhealthy(stack, "storage_server", True, "test")
    heat.update_stack(stack, template=None, files=None, params=None, existing=True)
    rebuilt = stack.resources["storage_server"].physical_id
    assert rebuilt != server
    assert stack.resources["storage_server_volume"].physical_id == volume.physical_id
    devices = [(a["server_id"], a["device"]) for a in volume.attributes["attachments"]]
    assert devices == [(rebuilt, "/dev/vdb")]

    heat.delete_stack(stack)
    assert heat.volumes.volumes == {}


def test_loop_devices_back_the_volumes_and_go_with_them() -> None:
    loop = LoopDevices(size_mb=8)
    heat = engine(VolumeRegistry(loop))
    try:
        stack = heat.create_stack("vnf-loop", STORAGE_HOT, None, None)
        assert stack.status == "CREATE_COMPLETE", stack.status_reason
        device = stack.resources["storage_server_volume"].attributes["attachments"][0]["device"]
        assert device.startswith("/dev/loop") and Path(device).is_block_device()
        listed = subprocess.run(
            ["losetup", "--list", "--noheadings", "--output", "NAME,BACK-FILE", device],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        assert str(loop.root) in listed
        assert len(set(loop.devices.values())) == 2  # one per volume
        heat.delete_stack(stack)
        assert loop.devices == {}
        assert list(loop.root.iterdir()) == []
    finally:
        heat.volumes.close()
    assert not loop.root.exists()
