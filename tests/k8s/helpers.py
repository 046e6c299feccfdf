"""Helpers of the ``k8s`` tier: SSH to the hosts, kubectl as JSON, the install script's env."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import shlex
import ssl
import time
import urllib.request
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.utils import CryptographyDeprecationWarning

from subscriber.config import ClusterSettings, HookSettings, SshSettings
from subscriber.service import Service
from subscriber.ssh import CommandResult, SshPool, SshTarget
from tests import REPO
from tests.cluster_fakes import FakeOpenStack, FakeTacker, cluster_service
from tests.conftest import callback_url, wait_settled
from tests.factories import op_occ
from tests.testbed import testhosts
from tests.testbed.testhosts import TestBed, TestHost

__all__ = [
    "SCRIPT",
    "SCRIPTS",
    "SCRIPT_ENV",
    "api_get",
    "ca_hash",
    "kubectl_json",
    "root",
    "run",
    "ssh_settings",
    "wait_for",
]

SCRIPTS = REPO / "handlers" / "toolkit" / "node"  # node-side files
SCRIPT = "/tmp/install_k8s_cluster.sh"
SCRIPT_ENV = testhosts.SCRIPT_ENV
T = TypeVar("T")


def ssh_settings(bed: TestBed, command_timeout: float = 180.0, **more: Any) -> SshSettings:
    """The SSH settings that reach the hosts as root (their key, their known hosts)."""
    return SshSettings(
        known_hosts=bed.known_hosts,
        client_keys=(bed.client_key,),
        key_dir=bed.client_key.parent,  # the parameters name the bed's key
        connect_timeout=5.0,
        command_timeout=command_timeout,
        **more,
    )


async def instantiate_and_stop(svc: Service, inst: str, occ: str) -> float:
    """Send ``svc`` the INSTANTIATE COMPLETED notification of ``inst`` (op-occ ``occ``),
    see its job done within ten minutes, and stop ``svc``; the seconds the job took."""
    try:
        t0 = time.monotonic()
        body = op_occ(instance=inst, op_occ_id=occ, operation="INSTANTIATE", state="COMPLETED")
        async with aiohttp.ClientSession() as http, http.post(callback_url(svc), json=body) as r:
            assert r.status == 204
        (event,) = await wait_settled(svc, 1, timeout=600)
        elapsed = time.monotonic() - t0
        job, steps = await svc.store.jobs.resume_state(event.id)
        assert event.status == "done", (job, [(s.name, s.status, s.error) for s in steps])
        return elapsed
    finally:
        await svc.stop()


@contextlib.asynccontextmanager
async def hooked_cluster(
    hosts: TestBed,
    tmp_path: Path,
    tacker: FakeTacker,
    openstack: FakeOpenStack,
    cluster: ClusterSettings,
    token: str,
) -> AsyncIterator[tuple[Service, SshPool]]:
    """serve's Service with the real cluster handlers and the hooks on (``token``), on a
    SQLite file, and an SSH pool to the hosts for the test's own checks; both stopped at
    the end."""
    svc = await cluster_service(
        f"sqlite+aiosqlite:///{tmp_path / 'lccn.db'}",
        tacker,
        openstack,
        cluster,
        ssh=ssh_settings(hosts),
        update={"hooks": HookSettings(token=token)},
    )
    pool = SshPool(ssh_settings(hosts))
    await pool.start()
    try:
        yield svc, pool
    finally:
        await pool.stop()
        await svc.stop()


async def hook_answer(
    http: aiohttp.ClientSession,
    svc: Service,
    token: str,
    inst: str,
    occ: str,
    point: str,
    server: str,
) -> dict[str, Any]:
    """Ask serve's drain hook about ``server`` at ``point`` of op-occ ``occ`` as Tacker's
    hook script does (POST, then GET until it settles); returns the final answer."""
    url = f"http://127.0.0.1:{svc.port}{svc.settings.hooks.path}"
    auth = {"Authorization": f"Bearer {token}"}
    request = {"vnfInstanceId": inst, "vnfLcmOpOccId": occ, "point": point, "servers": [server]}
    async with http.post(url, json=request, headers=auth) as r:
        assert r.status == 202
    async with asyncio.timeout(300):
        while True:
            async with http.get(f"{url}/{occ}/{point}", headers=auth) as r:
                answer: dict[str, Any] = await r.json()
            if answer["status"] in ("done", "failed"):
                return answer
            await asyncio.sleep(0.5)


def root(host: TestHost) -> SshTarget:
    return SshTarget(host=host.address)


async def run(
    pool: SshPool,
    host: TestHost,
    command: str,
    *,
    timeout: float = 120.0,
    env: dict[str, str] | None = None,
    secrets: list[str] | None = None,
    check: bool = True,
) -> CommandResult:
    """``command`` as root on ``host``; raises on a non-zero exit unless ``check`` is off."""
    result = await pool.run(
        root(host), command, command_timeout=timeout, env=env, secrets=secrets or []
    )
    return result.check() if check else result


async def kubectl_json(pool: SshPool, master: TestHost, args: str) -> Any:
    """``kubectl <args> -o json`` on the master with the admin kubeconfig."""
    result = await run(
        pool, master, f"kubectl --kubeconfig /etc/kubernetes/admin.conf {args} -o json"
    )
    return json.loads(result.stdout)


async def wait_for(
    probe: Callable[[], Awaitable[T | None]], timeout: float, what: str, interval: float = 1.0
) -> T:
    """Call ``probe`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while True:
        last = await probe()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:g} s (last: {last!r})")
        await asyncio.sleep(interval)


def ca_hash(pem: str) -> str:
    """kubeadm's --discovery-token-ca-cert-hash: SHA-256 of the CA's SubjectPublicKeyInfo."""
    with warnings.catch_warnings():
        # kubeadm 1.20's CA has serial number 0, which cryptography warns about.
        warnings.simplefilter("ignore", CryptographyDeprecationWarning)
        cert = x509.load_pem_x509_certificate(pem.encode())
    spki = cert.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return hashlib.sha256(spki).hexdigest()


def api_get(endpoint: str, path: str, *, ca_pem: str, token: str | None) -> tuple[int, Any]:
    """GET ``endpoint + path`` verifying the server with ``ca_pem``; (status, JSON body)."""
    context = ssl.create_default_context(cadata=ca_pem)
    request = urllib.request.Request(endpoint + path, headers={"Accept": "application/json"})
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, context=context, timeout=15) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def quote(*words: str) -> str:
    return " ".join(shlex.quote(w) for w in words)
