"""The simulator's Barbican answers Tacker 16.0.0's own key manager, as Tacker runs it for a
Kubernetes VIM: store the Fernet key, read it back in a new client, delete it.

Tacker's ``BarbicanKeyManager`` (python-barbicanclient with a Keystone session, in Tacker's
venv) is run unchanged against the simulator; a subprocess, since it lives there.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator

import pytest

from tests.testbed.openstack_sim.process import SimProcess
from tests.testbed.tacker_bed import tacker_venv

pytestmark = pytest.mark.tacker

_KEY_MANAGER_ROUND_TRIP = """
import json, sys
import tacker.context  # registers the options the key manager reads
from castellan.common.credentials import keystone_password
from barbicanclient import exceptions
from tacker.keymgr.barbican_key_manager import BarbicanKeyManager

url, user, password, project, domain, key = sys.argv[1:]
ctx = keystone_password.KeystonePassword(
    password=password, auth_url=url, username=user, user_domain_name=domain,
    project_name=project, project_domain_name=domain)
secret_id = BarbicanKeyManager(url).store(ctx, key.encode())
reader = BarbicanKeyManager(url)
payload = reader.get(ctx, secret_id).payload
reader.delete(ctx, secret_id)
try:
    reader.get(ctx, secret_id).payload
    gone = False
except exceptions.HTTPClientError as e:  # the payload is read lazily, past get()
    gone = e.status_code == 404
print(json.dumps({"id": secret_id, "payload": payload.decode(), "gone": gone}))
"""


@pytest.fixture
def own_sim() -> Iterator[SimProcess]:
    """A simulator of the test's own: the tier's shared one holds that no call of the session
    failed, and this test's last read is a 404 on purpose."""
    proc = SimProcess()
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def test_tackers_key_manager_stores_reads_and_deletes_a_key(own_sim: SimProcess) -> None:
    sim = own_sim
    c = sim.config
    key = "Zm9vYmFyLWZlcm5ldC1rZXktZm9yLWEtdmlt"
    out = subprocess.run(
        [
            str(tacker_venv() / "bin" / "python"),
            "-c",
            _KEY_MANAGER_ROUND_TRIP,
            sim.auth_url,
            c.username,
            c.password,
            c.project_name,
            c.domain,
            key,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["payload"] == key and result["gone"]
    assert result["id"] not in [s["id"] for s in sim.control.state()["secrets"]]
    calls = [(c["method"], c["path"], c["status"]) for c in sim.control.calls()]
    secret = f"/key-manager/v1/secrets/{result['id']}"
    assert ("POST", "/key-manager/v1/secrets/", 201) in calls
    assert ("GET", f"{secret}/payload", 200) in calls
    assert ("DELETE", secret, 204) in calls
    assert ("GET", secret, 404) in calls
