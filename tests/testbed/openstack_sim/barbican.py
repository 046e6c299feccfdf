"""A minimal Barbican (key manager v1): what Tacker 16.0.0 asks of it for Kubernetes VIMs.

Tacker's Kubernetes VIM driver (``tacker/nfvo/drivers/vim/kubernetes_driver.py``)
encrypts a VIM's bearer token and CA with a fresh Fernet key and, with ``[k8s_vim]
use_barbican`` (the default, and the only way it registers one), stores that key in
Barbican through ``tacker/keymgr/barbican_key_manager.py`` (python-barbicanclient with
a Keystone session from ``[keystone_authtoken]``):

* the endpoint from the catalog: ``service_type=key-manager``, ``service_name=barbican``,
  ``interface=internal``; then version discovery on it (``GET /key-manager``, the
  newest version's ``id`` makes the base URL ``.../key-manager/v1/``);
* ``POST v1/secrets/`` with ``payload`` (the key, base64), ``payload_content_type``
  ``application/octet-stream``, ``payload_content_encoding`` ``base64`` and
  ``secret_type`` ``opaque``; the answer's ``secret_ref`` ends in the secret's UUID;
* reading a VIM back (``tacker/vnfm/vim_client.py``): ``GET v1/secrets/{id}`` (its
  ``content_types``), then ``GET v1/secrets/{id}/payload`` (raw bytes);
* deleting a VIM: ``DELETE v1/secrets/{id}`` (a 404 is ignored).

Left out: containers, orders, ACLs, consumers, quotas, secret metadata, expiration,
projects (every token sees every secret), and encryption at rest (payloads are held in
memory as given).
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

__all__ = ["PREFIX", "KeyManager"]

PREFIX = "/key-manager"


@dataclass
class _Secret:
    payload: bytes
    content_type: str
    secret_type: str
    name: str | None
    created: str


def _error(status: int, title: str, description: str) -> web.Response:
    return web.json_response(
        {"code": status, "title": title, "description": description}, status=status
    )


class KeyManager:
    """Barbican's secrets API in memory, under :data:`PREFIX` of the simulator.

    Arguments:
        base_url: the simulator's URL, read when a reference is made (it is known only
            once the simulator listens).
    """

    def __init__(self, base_url: Callable[[], str]) -> None:
        self._base_url = base_url
        self.secrets: dict[str, _Secret] = {}

    @property
    def endpoint(self) -> str:
        return f"{self._base_url()}{PREFIX}"

    def add_routes(self, router: web.UrlDispatcher) -> None:
        router.add_get(PREFIX, self._versions)
        router.add_get(PREFIX + "/", self._versions)
        router.add_post(PREFIX + "/v1/secrets", self._create)
        router.add_post(PREFIX + "/v1/secrets/", self._create)  # barbicanclient's POST
        router.add_get(PREFIX + "/v1/secrets/{id}", self._show)
        router.add_get(PREFIX + "/v1/secrets/{id}/payload", self._payload)
        router.add_delete(PREFIX + "/v1/secrets/{id}", self._delete)

    def state(self) -> list[dict[str, Any]]:
        """The secrets held (ids and types; never payloads)."""
        return [
            {"id": sid, "secret_type": s.secret_type, "content_type": s.content_type}
            for sid, s in self.secrets.items()
        ]

    async def _versions(self, request: web.Request) -> web.Response:
        version = {
            "id": "v1",
            "status": "stable",
            "links": [{"rel": "self", "href": f"{self.endpoint}/v1/"}],
            "media-types": [
                {
                    "base": "application/json",
                    "type": "application/vnd.openstack.key-manager-v1+json",
                }
            ],
        }
        return web.json_response({"versions": {"values": [version]}}, status=300)

    async def _create(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "Bad Request", "Malformed JSON")
        if not isinstance(body, dict):
            return _error(400, "Bad Request", "Malformed JSON")
        payload = body.get("payload")
        content_type = body.get("payload_content_type")
        if not isinstance(payload, str) or not payload or not isinstance(content_type, str):
            return _error(400, "Bad Request", "payload and payload_content_type are required")
        if body.get("payload_content_encoding") == "base64":
            try:
                raw = base64.b64decode(payload, validate=True)
            except (binascii.Error, ValueError):
                return _error(400, "Bad Request", "payload is not base64")
        elif content_type.startswith("text/plain"):
            raw = payload.encode()
        else:
            return _error(400, "Bad Request", f"{content_type} needs payload_content_encoding")
        sid = str(uuid.uuid4())
        self.secrets[sid] = _Secret(
            payload=raw,
            content_type=content_type,
            secret_type=str(body.get("secret_type") or "opaque"),
            name=body.get("name"),
            created=dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f"),
        )
        return web.json_response({"secret_ref": self._ref(sid)}, status=201)

    def _ref(self, sid: str) -> str:
        return f"{self.endpoint}/v1/secrets/{sid}"

    def _find(self, request: web.Request) -> tuple[str, _Secret | None]:
        sid = request.match_info["id"]
        return sid, self.secrets.get(sid)

    async def _show(self, request: web.Request) -> web.Response:
        sid, secret = self._find(request)
        if secret is None:
            return _error(404, "Not Found", "Secret not found.")
        return web.json_response(
            {
                "secret_ref": self._ref(sid),
                "name": secret.name,
                "status": "ACTIVE",
                "secret_type": secret.secret_type,
                "content_types": {"default": secret.content_type},
                "created": secret.created,
                "updated": secret.created,
                "expiration": None,
                "algorithm": None,
                "bit_length": None,
                "mode": None,
                "creator_id": None,
            }
        )

    async def _payload(self, request: web.Request) -> web.Response:
        _, secret = self._find(request)
        if secret is None:
            return _error(404, "Not Found", "Secret not found.")
        accept = request.headers.get("Accept", "*/*")
        if accept not in ("*/*", secret.content_type):
            return _error(406, "Not Acceptable", f"the secret is {secret.content_type}")
        return web.Response(body=secret.payload, content_type=secret.content_type)

    async def _delete(self, request: web.Request) -> web.Response:
        sid, secret = self._find(request)
        if secret is None:
            return _error(404, "Not Found", "Secret not found.")
        del self.secrets[sid]
        return web.Response(status=204)
