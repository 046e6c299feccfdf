#!/usr/bin/env python3
"""Build the sample Kubernetes-cluster VNF package (a CSAR zip) with a fresh vnfdId.

    python3 scripts/build_vnf_package.py [-o out.zip] [--vnfd-id UUID] [--sol001-types DIR]

The sources are in ``scripts/vnf_package/kubernetes_cluster/``; ``@VNFD_ID@`` in them
is replaced by the vnfdId. Tacker keeps the vnfdId of a failed onboarding taken, so
every build gets a new one unless ``--vnfd-id`` says otherwise.

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
import json
import os
import sys
import uuid
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCES = HERE / "vnf_package" / "kubernetes_cluster"
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


def build_package(
    output: Path, *, vnfd_id: str | None = None, sol001_types: str | None = None
) -> tuple[Path, str]:
    """Write the CSAR zip; returns (path, vnfdId)."""
    vnfd_id = vnfd_id or str(uuid.uuid4())
    types_dir = find_sol001_types(sol001_types)
    output.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(output, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(SOURCES.rglob("*")):
            if path.is_file():
                text = path.read_text().replace("@VNFD_ID@", vnfd_id)
                zf.writestr(str(path.relative_to(SOURCES)), text)
        for name in SOL001_FILES:
            zf.write(types_dir / name, f"Definitions/{name}")
    return output, vnfd_id


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("-o", "--output", help="zip to write (default: dist/lccn_k8s_cluster.zip)")
    p.add_argument("--vnfd-id", help="vnfdId to use (default: a fresh UUID)")
    p.add_argument("--sol001-types", help="directory with the ETSI SOL001 type files")
    args = p.parse_args()
    out = Path(args.output or HERE.parent / "dist" / "lccn_k8s_cluster.zip")
    path, vnfd_id = build_package(out, vnfd_id=args.vnfd_id, sol001_types=args.sol001_types)
    print(json.dumps({"vnfdId": vnfd_id, "path": str(path)}))


if __name__ == "__main__":
    main()
