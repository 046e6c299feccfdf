#!/usr/bin/env python3
"""Build a sample VNF package (a CSAR zip) with a fresh vnfdId.

    python3 scripts/build_vnf_package.py [--package NAME] [-o out.zip] [--vnfd-id UUID]
                                         [--sol001-types DIR]

Packages (``--package``, sources in ``scripts/vnf_package/NAME/``):

* ``kubernetes_cluster`` (the default): the Kubernetes cluster VNF (VNF-A), VMs on
  OpenStack that lccn-subscriber configures; flavours ``simple`` and ``complex``.
* ``cnf_deployment``: a small CNF (VNF-B), one Deployment of two replicas that
  Tacker's v2 Kubernetes infra driver deploys on such a cluster (instantiate with
  ``additionalParams["lcm-kubernetes-def-files"] = ["Files/kubernetes/deployment.yaml"]``).

``@VNFD_ID@`` in the sources is replaced by the vnfdId, and ``Hash: @SHA256@`` in
``TOSCA.meta`` by the SHA-256 of the artifact its entry names. Tacker keeps the vnfdId
of a failed onboarding taken, so every build gets a new one unless ``--vnfd-id`` says
otherwise.

The VNFD imports ETSI GS NFV-SOL 001's type definitions
(``etsi_nfv_sol001_common_types.yaml``, ``etsi_nfv_sol001_vnfd_types.yaml``, v2.6.1).
They are ETSI's files, not this project's, so they are not kept here: the build takes
them from ``--sol001-types DIR``, ``$LCCN_SOL001_TYPES_DIR``, or an installed Tacker
(the test bed's cached venv, or the ``tacker`` package importable by this Python;
Tacker ships them with its test data).

Prints one JSON line: ``{"vnfdId": ..., "path": ...}``.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import re
import sys
import uuid
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PACKAGES = HERE / "vnf_package"
DEFAULT_PACKAGE = "kubernetes_cluster"
SOL001_FILES = ("etsi_nfv_sol001_common_types.yaml", "etsi_nfv_sol001_vnfd_types.yaml")
_TACKER_DATA = "tacker/tests/unit/vnfm/infra_drivers/openstack/data/etsi_nfv"


def _candidate_dirs(explicit: str | None) -> list[Path]:
    dirs: list[Path] = []
    if explicit:
        dirs.append(Path(explicit))
    if os.environ.get("LCCN_SOL001_TYPES_DIR"):
        dirs.append(Path(os.environ["LCCN_SOL001_TYPES_DIR"]))
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    tacker_home = os.environ.get("LCCN_TACKER_HOME", str(cache / "lccn-subscriber/tacker-16.0.0"))
    dirs += [
        Path(p) for p in glob.glob(f"{tacker_home}/venv/lib/python3*/site-packages/{_TACKER_DATA}")
    ]
    for entry in sys.path:
        dirs.append(Path(entry) / _TACKER_DATA)
    return dirs


def find_sol001_types(explicit: str | None = None) -> Path:
    """The directory holding both SOL001 type files. Raises FileNotFoundError."""
    for d in _candidate_dirs(explicit):
        if all((d / f).is_file() for f in SOL001_FILES):
            return d
    raise FileNotFoundError(
        "ETSI SOL001 type definitions not found: pass --sol001-types DIR (a directory with "
        + " and ".join(SOL001_FILES)
        + ") or install Tacker (bash scripts/setup.d/20-tacker.sh)"
    )


def package_names() -> list[str]:
    """The packages under ``scripts/vnf_package/``."""
    return sorted(p.name for p in PACKAGES.iterdir() if (p / "TOSCA-Metadata").is_dir())


def _artifact_hashes(meta: str, files: dict[str, str]) -> str:
    """``Hash: @SHA256@`` of each TOSCA.meta artifact entry -> the SHA-256 of its file."""

    def entry(match: re.Match[str]) -> str:
        block = match.group(0)
        if "@SHA256@" not in block:
            return block
        name = re.search(r"^Name: *(\S+)", block, re.MULTILINE)
        if name is None or name.group(1) not in files:
            raise ValueError(f"TOSCA.meta: no packaged file for the entry {block!r}")
        digest = hashlib.sha256(files[name.group(1)].encode()).hexdigest()
        return block.replace("@SHA256@", digest)

    return re.sub(r"(?:^[^\n]+\n?)+", entry, meta, flags=re.MULTILINE)


def build_package(
    output: Path,
    *,
    vnfd_id: str | None = None,
    sol001_types: str | None = None,
    package: str = DEFAULT_PACKAGE,
) -> tuple[Path, str]:
    """Write the CSAR zip of ``package``; returns (path, vnfdId)."""
    sources = PACKAGES / package
    if package not in package_names():
        raise FileNotFoundError(f"no VNF package {package!r} in {PACKAGES}")
    vnfd_id = vnfd_id or str(uuid.uuid4())
    types_dir = find_sol001_types(sol001_types)
    files = {
        str(path.relative_to(sources)): path.read_text().replace("@VNFD_ID@", vnfd_id)
        for path in sorted(sources.rglob("*"))
        if path.is_file()
    }
    meta = "TOSCA-Metadata/TOSCA.meta"
    files[meta] = _artifact_hashes(files[meta], files)
    output.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(output, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, text in files.items():
            zf.writestr(name, text)
        for name in SOL001_FILES:
            zf.write(types_dir / name, f"Definitions/{name}")
    return output, vnfd_id


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--package", default=DEFAULT_PACKAGE, choices=package_names(), help="which package"
    )
    p.add_argument("-o", "--output", help="zip to write (default: dist/<package>.zip)")
    p.add_argument("--vnfd-id", help="vnfdId to use (default: a fresh UUID)")
    p.add_argument("--sol001-types", help="directory with the ETSI SOL001 type files")
    args = p.parse_args()
    default = "lccn_k8s_cluster.zip" if args.package == DEFAULT_PACKAGE else f"{args.package}.zip"
    out = Path(args.output or HERE.parent / "dist" / default)
    path, vnfd_id = build_package(
        out, vnfd_id=args.vnfd_id, sol001_types=args.sol001_types, package=args.package
    )
    print(json.dumps({"vnfdId": vnfd_id, "path": str(path)}))


if __name__ == "__main__":
    main()
