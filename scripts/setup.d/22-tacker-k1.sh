#!/usr/bin/env bash
# Tacker 16.0.0's own v1 Kubernetes management driver ("K1"), registered in Tacker's venv.
#
# K1 is the class KubernetesMgmtDriver of samples/mgmt_driver/kubernetes/kubernetes_mgmt.py
# in Tacker's sdist (21-tacker-sdist.sh keeps it). Tacker loads v1 management drivers by
# entry point (group `tacker.tacker.mgmt.drivers`, named in `[tacker]
# vnflcm_mgmt_driver`), and the sample is no module of the installed `tacker`. So this
# step builds, in the cache, a tiny wheel `lccn-tacker-k1` that holds:
#
# * K1 byte for byte as the sdist has it (a VNF package naming it must carry the same
#   bytes: Tacker compares the two files' SHA-256 before it runs a driver), at
#   lccn_tacker_k1/samples/mgmt_driver/kubernetes/kubernetes_mgmt.py;
# * the sdist's create_admin_token.yaml beside it: K1 uploads it from
#   `<its module dir>/../../../samples/mgmt_driver/kubernetes/`, which is that same
#   directory in this layout;
# * the entry point `mgmt-drivers-kubernetes` (the name must be K1's get_type()).
#
# and installs it (no dependencies: Tacker's venv has paramiko, eventlet and heatclient)
# into Tacker's venv. Tacker itself is not changed; no file of Tacker's is in this
# repository. A K1 bed (tests/testbed/tacker_bed.py, start(k1=True)) names the driver in
# its tacker.conf; tests/k8s/test_tacker_driver.py runs it there.
#
# Idempotent: an installed module whose bytes are the sdist's is checked in well under a
# second; otherwise the wheel is rebuilt and reinstalled. Runs after 21-tacker-sdist.sh.
set -euo pipefail

TACKER_VERSION=16.0.0
CACHE_ROOT="${LCCN_TACKER_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/lccn-subscriber/tacker-$TACKER_VERSION}"
VENV="$CACHE_ROOT/venv"
SDIST="$CACHE_ROOT/sdist/tacker-$TACKER_VERSION.tar.gz"
K1_DIR="$CACHE_ROOT/k1"
WHEEL="$K1_DIR/lccn_tacker_k1-$TACKER_VERSION-py3-none-any.whl"

mkdir -p "$K1_DIR"
exec 9>"$K1_DIR/build.lock"
flock 9

if [ ! -x "$VENV/bin/python" ] || [ ! -f "$SDIST" ]; then
    echo "22-tacker-k1: Tacker's venv or sdist missing: run 20-tacker.sh and 21-tacker-sdist.sh" >&2
    exit 1
fi

start=$(date +%s)
# One Python program both checks and builds: it reads K1 out of the sdist and compares it
# with the installed module (exit 0: nothing to do), or writes the wheel (exit 3).
set +e
"$VENV/bin/python" - "$SDIST" "$WHEEL" "$TACKER_VERSION" <<'EOF'
import base64, hashlib, importlib.util, sys, tarfile, zipfile

sdist, wheel, version = sys.argv[1:4]
sample = f"tacker-{version}/samples/mgmt_driver/kubernetes"
module = "lccn_tacker_k1.samples.mgmt_driver.kubernetes.kubernetes_mgmt"
with tarfile.open(sdist) as archive:
    driver = archive.extractfile(f"{sample}/kubernetes_mgmt.py").read()
    token = archive.extractfile(f"{sample}/create_admin_token.yaml").read()

spec = importlib.util.find_spec(module) if importlib.util.find_spec("lccn_tacker_k1") else None
if spec is not None and spec.origin and open(spec.origin, "rb").read() == driver:
    sys.exit(0)

base = "lccn_tacker_k1/samples/mgmt_driver/kubernetes"
dist = f"lccn_tacker_k1-{version}.dist-info"
files = {
    "lccn_tacker_k1/__init__.py": b'"""Tacker\'s v1 Kubernetes mgmt driver (its sdist\'s sample), packaged for its entry point."""\n',
    "lccn_tacker_k1/samples/__init__.py": b"",
    "lccn_tacker_k1/samples/mgmt_driver/__init__.py": b"",
    f"{base}/__init__.py": b"",
    f"{base}/kubernetes_mgmt.py": driver,
    f"{base}/create_admin_token.yaml": token,
    f"{dist}/METADATA": (
        "Metadata-Version: 2.1\nName: lccn-tacker-k1\n"
        f"Version: {version}\n"
        "Summary: Tacker's samples/mgmt_driver/kubernetes/kubernetes_mgmt.py (unchanged), "
        "registered as mgmt-drivers-kubernetes\nLicense: Apache-2.0\n"
    ).encode(),
    f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: lccn-subscriber 22-tacker-k1.sh\n"
    b"Root-Is-Purelib: true\nTag: py3-none-any\n",
    f"{dist}/entry_points.txt": (
        "[tacker.tacker.mgmt.drivers]\n"
        f"mgmt-drivers-kubernetes = {module}:KubernetesMgmtDriver\n"
    ).encode(),
}
record = []
for name, data in files.items():
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    record.append(f"{name},sha256={digest},{len(data)}")
record.append(f"{dist}/RECORD,,")
files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()
with zipfile.ZipFile(wheel + ".tmp", "w", zipfile.ZIP_DEFLATED) as out:
    for name, data in files.items():
        out.writestr(name, data)
sys.exit(3)
EOF
rc=$?
set -e
if [ "$rc" -eq 0 ]; then
    echo "tacker $TACKER_VERSION's K1 already installed in $VENV"
    exit 0
fi
[ "$rc" -eq 3 ] || exit "$rc"
mv "$WHEEL.tmp" "$WHEEL"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps --no-index \
    --force-reinstall "$WHEEL"
"$VENV/bin/python" -c "
from importlib.metadata import entry_points
[ep] = entry_points(group='tacker.tacker.mgmt.drivers', name='mgmt-drivers-kubernetes')
assert ep.load().__name__ == 'KubernetesMgmtDriver'
"
echo "tacker $TACKER_VERSION's K1 installed in $VENV in $(( $(date +%s) - start )) s"
