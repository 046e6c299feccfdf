"""The storage server's node-side scripts run for real (root, a loop device, a private
mount namespace): the format guard (``blkid -p``: a blank device is formatted, a device
with a filesystem is only mounted, one with a partition table is refused), the mount
checks, and the exports file written once and applied with ``exportfs -ra``.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

from handlers.toolkit import storage
from schemas.cluster_params import NfsServerSetup


@pytest.fixture
def device(loop_device: str) -> str:
    return loop_device


def volume(*steps: str) -> subprocess.CompletedProcess[str]:
    """Run shell lines in one private mount namespace (mounts vanish with it)."""
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "bash", "-c", "\n".join(steps)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def setup_line(dev: str, mount_to: Path) -> str:
    return f"bash -c {shlex.quote(storage._VOLUME)} volume {dev} {shlex.quote(str(mount_to))}"


def test_a_blank_volume_is_formatted_once_and_its_data_survives(
    device: str, tmp_path: Path
) -> None:
    mnt = tmp_path / "volume"
    first = volume(
        setup_line(device, mnt),
        f"echo kept > {mnt}/data",
        setup_line(device, mnt),  # mounted already: nothing happens
    )
    assert first.returncode == 0, first.stderr
    assert first.stdout.split() == ["formatted+mounted", "mounted-already"]
    fstype = subprocess.run(
        ["blkid", "-o", "value", "-s", "TYPE", device], capture_output=True, text=True
    ).stdout.strip()
    assert fstype == "ext4"
    # A rebuilt server (a new namespace): the filesystem is found and mounted, not formatted.
    second = volume(setup_line(device, mnt), f"cat {mnt}/data")
    assert second.returncode == 0, second.stderr
    assert second.stdout.split() == ["mounted", "ext4", "kept"]


def test_a_device_with_a_partition_table_is_never_formatted(device: str, tmp_path: Path) -> None:
    # An MBR with one Linux partition (2048 + 4096 sectors), written by hand.
    entry = bytes([0, 0, 0, 0, 0x83, 0, 0, 0]) + (2048).to_bytes(4, "little")
    entry += (4096).to_bytes(4, "little")
    with open(device, "r+b") as fh:
        fh.seek(446)
        fh.write(entry + bytes(48) + b"\x55\xaa")
    done = volume(setup_line(device, tmp_path / "volume"))
    assert done.returncode == 3
    assert "partition table or another signature" in done.stderr
    label = subprocess.run(
        ["blkid", "-p", "-o", "value", "-s", "PTTYPE", device], capture_output=True, text=True
    ).stdout.strip()
    assert label == "dos"


def test_another_device_on_the_mount_point_and_a_missing_device_are_refused(
    device: str, tmp_path: Path
) -> None:
    mnt = tmp_path / "volume"
    mnt.mkdir()
    done = volume(f"mount -t tmpfs tmpfs {mnt}", setup_line(device, mnt))
    assert done.returncode == 3 and f"{mnt} already has tmpfs mounted" in done.stderr
    missing = volume(setup_line("/dev/lccn-no-such-device", mnt))
    assert missing.returncode == 3 and "is not a block device" in missing.stderr


def test_exports_written_once_dirs_owned_by_the_squashed_user_and_applied(
    tmp_path: Path,
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "exportfs.log"
    (bin_dir / "exportfs").write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
    (bin_dir / "exportfs").chmod(0o755)
    exports = tmp_path / "exports.d" / "lccn.exports"
    dirs = [tmp_path / "volume/nfs/pv1", tmp_path / "volume/nfs/pv2"]
    setups = [NfsServerSetup(export_dir=str(d), export_to="10.9.0.0/24") for d in dirs]
    text = storage.exports_text(setups)
    command = [
        "bash",
        "-c",
        storage._EXPORTS,
        "exports",
        str(exports),
        *(str(d) for d in dirs),
    ]
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    runs = [
        subprocess.run(command, input=text, capture_output=True, text=True, env=env, timeout=60)
        for _ in range(2)
    ]
    assert [r.stdout.split() for r in runs] == [["changed", "applied"], ["unchanged", "applied"]]
    assert exports.read_text() == text
    assert f"{dirs[0]} 10.9.0.0/24(rw,sync,no_subtree_check,insecure,all_squash)" in text
    assert all((d.stat().st_uid, d.stat().st_gid) == (65534, 65534) for d in dirs)
    assert log.read_text().split("\n")[:2] == ["-ra", "-ra"]
