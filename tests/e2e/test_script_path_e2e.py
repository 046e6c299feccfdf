"""``script_path`` end to end: the real Tacker 16.0.0 instantiates, then scales out, a copy of
the sample package that carries a second install script, and ``additionalParams`` name
that one in ``script_path``. ``serve`` (a subprocess) reads it from the package Tacker
holds and runs it on every node instead of its own.

The package's script is ours plus one visible step, just before it marks the node
installed: it writes a marker file naming the node's role and the options it was given
(their letters only, so no secret goes to disk), and on a master it labels its node. The
test then finds every node's marker (Tacker's argv: ``-m -i -p -a`` on the master,
``-w -i -t -s`` on the workers), the master's label in ``kubectl get nodes``, and the
script itself, byte for byte, in every node's /tmp. Only OpenStack (the simulator) and
kubeadm/kubectl (the stand-ins) are not real.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from tests import REPO
from tests.e2e.day2 import Loop
from tests.e2e.test_day2_e2e import loop
from tests.testbed import tacker_bed as tb

__all__ = ["loop"]  # the fixture, shared with test_day2_e2e

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600), pytest.mark.usefixtures("fresh_cluster")]

SCRIPT_PATH = "Scripts/site_install_k8s_cluster.sh"
MARKER = "/var/lib/lccn-subscriber/install-script-marker"
LABEL = "lccn-e2e/install-script"
OURS = (REPO / "handlers/toolkit/node/install_k8s_cluster.sh").read_text()
# The package's own step: the role and the option letters it was run with, and the label.
STEP = r"""
site_marker() {
    local opts
    opts="$(printf '%s\n' "$@" | grep -E '^-[a-z]$' | tr '\n' ' ')"
    mkdir -p "$(dirname MARKER)"
    printf '%s %s\n' "$ROLE" "${opts% }" >MARKER
    if [ "$ROLE" != worker ]; then
        kubectl --kubeconfig /etc/kubernetes/admin.conf label --overwrite node "$NODE_NAME" \
            LABEL=site-package >&2
    fi
}
site_marker "$@"
""".replace("MARKER", MARKER).replace("LABEL", LABEL)
SITE_SCRIPT = OURS.replace('phase "done" mark_done\n', STEP + 'phase "done" mark_done\n', 1)


@pytest.fixture(scope="module")
def site_vnfd(bed: tb.BedState) -> str:
    """The sample package plus ``SITE_SCRIPT`` at ``SCRIPT_PATH``, onboarded: its vnfdId."""
    assert SITE_SCRIPT != OURS
    return tb.build_and_onboard(bed, extra={SCRIPT_PATH: SITE_SCRIPT})


def private(hosts: Any, loop: Loop, address: str, path: str) -> Path:
    directory, name = path.rsplit("/", 1)
    return Path(hosts.private_dir(loop.host(address), directory)) / name


def assert_site_script_ran(hosts: Any, loop: Loop, step: dict[str, Any]) -> dict[str, str]:
    """``upload-scripts`` says the package's script went on the nodes, and every node shows
    it ran; the markers by node name."""
    digest = hashlib.sha256(SITE_SCRIPT.encode()).hexdigest()
    assert step["status"] == "done"
    assert {k: step["result"][k] for k in ("source", "path", "sha256")} == {
        "source": "package",
        "path": SCRIPT_PATH,
        "sha256": digest,
    }
    markers = {}
    for name, member in loop.members().items():
        uploaded = private(hosts, loop, member.address, "/tmp/install_k8s_cluster.sh")
        assert uploaded.read_text() == SITE_SCRIPT, name
        markers[name] = private(hosts, loop, member.address, MARKER).read_text().strip()
    return markers


def test_the_packages_script_path_script_builds_the_cluster(
    hosts: Any, loop: Loop, site_vnfd: str
) -> None:
    shown = loop.instantiate(site_vnfd, "simple", script_path=SCRIPT_PATH)
    markers = assert_site_script_ran(hosts, loop, Loop.steps(shown)["upload-scripts"])
    members = loop.members()
    masters = [m for m in members.values() if m.role == "master"]
    # Tacker's drivers' argv, as the package's script saw it.
    assert markers == {
        n: ("main-master -m -i -p -a" if m.role == "master" else "worker -w -i -t -s")
        for n, m in members.items()
    }
    nodes = loop.cluster_nodes(masters)
    assert set(nodes) == set(members)
    labelled = {n for n, node in nodes.items() if node["metadata"]["labels"].get(LABEL)}
    assert labelled == {m.name for m in masters}
    assert nodes[masters[0].name]["metadata"]["labels"][LABEL] == "site-package"

    # SCALE_OUT: the new worker gets the package's script too (read from Tacker again).
    before = set(members)
    scaled = loop.handled(loop.scale("SCALE_OUT")["id"])
    markers = assert_site_script_ran(hosts, loop, Loop.steps(scaled)["upload-scripts"])
    [new] = set(loop.members()) - before
    assert markers[new] == "worker -w -i -t -s"
    assert set(loop.cluster_nodes(masters)) == set(loop.members())
    print(f"script_path end to end: {json.dumps(markers, sort_keys=True)}")
