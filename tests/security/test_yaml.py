"""A PV manifest from a VNF package is parsed without anchors and aliases, within a node budget.

Before, ``yaml.safe_load_all`` expanded aliases into shared objects and ``json.dumps``
wrote every reference out: a 372-byte manifest became 814 KB (and each further level
multiplies it by nine).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from handlers.toolkit import storage
from subscriber.errors import PermanentStepError

REPO = Path(__file__).resolve().parents[2]
PV = REPO / "scripts/vnf_package/kubernetes_cluster/Files/kubernetes/nfs-pv1.yaml"

BOMB = b"""apiVersion: v1
kind: PersistentVolume
metadata:
  name: nfs-pv1
  annotations:
    a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]
    b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
    c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
    d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
    e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
spec:
  nfs: {server: 0.0.0.0, path: /srv/pv1}
"""


def test_a_yaml_alias_bomb_is_refused_before_it_expands() -> None:
    started = time.monotonic()
    with pytest.raises(PermanentStepError) as info:
        storage.read_manifest(BOMB, "Files/kubernetes/nfs-pv1.yaml", "10.0.0.9", step="pvs")
    assert time.monotonic() - started < 0.5
    message = str(info.value)
    assert message.startswith("pv_manifest_file_path Files/kubernetes/nfs-pv1.yaml: ")
    assert "anchors and aliases are not accepted (line 6)" in message and "\n" not in message


def test_an_anchor_alone_is_refused_too() -> None:
    text = PV.read_bytes().replace(b"  name: nfs-pv1", b"  name: &n nfs-pv1")
    with pytest.raises(PermanentStepError, match="anchors and aliases"):
        storage.read_manifest(text, "pv.yaml", "10.0.0.9", step=None)


def test_a_manifest_past_the_node_budget_is_refused() -> None:
    items = b"".join(b"    - x\n" for _ in range(storage.MAX_YAML_NODES))
    text = PV.read_bytes() + b"  mountOptions:\n" + items
    with pytest.raises(PermanentStepError, match=f"more than {storage.MAX_YAML_NODES} YAML nodes"):
        storage.read_manifest(text, "pv.yaml", "10.0.0.9", step=None)


def test_the_sample_packages_manifest_still_reads() -> None:
    pv = storage.read_manifest(PV.read_bytes(), "pv.yaml", "10.0.0.9", step=None)
    assert (pv.name, pv.export, pv.server) == ("nfs-pv1", "/srv/volume/nfs/pv1", "10.0.0.9")
    assert len(pv.manifest) < 1024
