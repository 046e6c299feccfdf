"""The service's own OpenAPI document: the callback Tacker POSTs to, and health.

Built from the same pydantic models that parse the notifications, so the
document cannot drift from what the service accepts: required fields,
non-empty identifiers (``id``, ``vnfInstanceId``, ``vnfLcmOpOccId``: an empty
one is refused with 400), enum values, and ``extra`` fields kept. Served at
``GET /lccn/openapi.json``.
"""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter

from schemas.hooks import HOOK_POINTS, HookRequest
from schemas.notifications import Notification
from schemas.problem import PROBLEM_CONTENT_TYPE, ProblemDetails

__all__ = ["OPENAPI_PATH", "openapi_document"]

OPENAPI_PATH = "/lccn/openapi.json"
_REF = "#/components/schemas/{model}"
# What the model validator of identifier notifications adds: one of the two link members.
_LINKS_RULE = {"anyOf": [{"required": ["_links"]}, {"required": ["links"]}]}


def _problem(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {
            PROBLEM_CONTENT_TYPE: {"schema": {"$ref": _REF.format(model="ProblemDetails")}}
        },
    }


def _hook_paths(path: str, schemas: dict[str, Any]) -> dict[str, Any]:
    """The management-driver hooks' two routes (see ``subscriber/ingest/hooks.py``)."""
    schemas["HookRequest"] = HookRequest.model_json_schema(ref_template=_REF)
    schemas["HookAnswer"] = {
        "type": "object",
        "required": ["vnfLcmOpOccId", "point", "status", "nodes"],
        "properties": {
            "vnfLcmOpOccId": {"type": "string"},
            "point": {"enum": list(HOOK_POINTS)},
            "status": {"enum": ["pending", "running", "done", "failed"]},
            "eventId": {"type": ["integer", "null"]},
            "nodes": {"type": "array", "items": {"type": "string"}},
            "detail": {"type": "string"},
            "vimConnectionInfo": {
                "type": "object",
                "description": "done: our entry, for the script to return to Tacker "
                "(holds the bearer token)",
            },
        },
    }
    answer = {"application/json": {"schema": {"$ref": _REF.format(model="HookAnswer")}}}
    refused = _problem("no or a wrong ``Authorization: Bearer <hooks.token>``")
    security: list[dict[str, list[str]]] = [{"hookToken": []}]
    return {
        path: {
            "post": {
                "summary": "Run the op-occ's cluster job for this point of the operation",
                "security": security,
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {"schema": {"$ref": _REF.format(model="HookRequest")}}
                    },
                },
                "responses": {
                    "202": {"description": "kept; where its job stands", "content": answer},
                    "400": _problem("not a valid request; ``field`` names the first bad one"),
                    "401": refused,
                    "413": _problem("the body is too large"),
                    "415": _problem("not ``application/json``"),
                    "503": _problem("the store cannot be written: nothing was kept, send again"),
                },
            }
        },
        path + "/{vnfLcmOpOccId}/{point}": {
            "get": {
                "summary": "Where the op-occ's job for this point stands (poll until done or "
                "failed)",
                "security": security,
                "parameters": [
                    {
                        "name": "vnfLcmOpOccId",
                        "in": "path",
                        "required": True,
                        "schema": {"type": "string"},
                    },
                    {
                        "name": "point",
                        "in": "path",
                        "required": True,
                        "schema": {"enum": list(HOOK_POINTS)},
                    },
                ],
                "responses": {
                    "200": {"description": "the answer", "content": answer},
                    "400": _problem("not an op-occ id, or not a hook point"),
                    "401": refused,
                    "404": _problem("no request for this op-occ and point"),
                },
            }
        },
    }


def openapi_document(
    callback_path: str = "/lccn/notifications", hook_path: str | None = None
) -> dict[str, Any]:
    """The OpenAPI 3.1 document of the callback listener at ``callback_path`` (and of the
    management-driver hooks at ``hook_path`` when they are on)."""
    notification = TypeAdapter(Notification).json_schema(ref_template=_REF, by_alias=True)
    schemas: dict[str, Any] = notification.pop("$defs", {})
    schemas.setdefault(
        "ProblemDetails", ProblemDetails.model_json_schema(ref_template=_REF, by_alias=True)
    )
    for name in ("VnfIdentifierCreationNotification", "VnfIdentifierDeletionNotification"):
        schemas[name].update(_LINKS_RULE)
    schemas["Notification"] = notification
    auth_refused = _problem("callback authentication refused (``WWW-Authenticate`` says how)")
    document: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": "lccn-subscriber callback API",
            "version": "1",
            "description": (
                "SOL003 VnfLcmOperationOccurrenceNotification, VnfIdentifierCreation"
                "Notification and VnfIdentifierDeletionNotification, as Tacker v1 and v2 "
                "send them. A 204 is sent only once the notification is stored durably; "
                "copies of a stored transition also get 204 and add nothing."
            ),
        },
        "paths": {
            callback_path: {
                "get": {
                    "summary": "Tacker's test notification",
                    "responses": {"204": {"description": "reachable"}, "401": auth_refused},
                },
                "post": {
                    "summary": "One LCM notification",
                    "parameters": [
                        {
                            "name": "Version",
                            "in": "header",
                            "required": False,
                            "schema": {"type": "string"},
                            "description": "the SOL013 API version Tacker sends (stored)",
                        }
                    ],
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {
                                "schema": {"$ref": _REF.format(model="Notification")}
                            }
                        },
                    },
                    "responses": {
                        "204": {"description": "stored (or a copy of a stored transition)"},
                        "400": _problem(
                            "not a valid notification; ``field`` names the first bad one"
                        ),
                        "401": auth_refused,
                        "413": _problem("the body is larger than ``http.max_body_bytes``"),
                        "415": _problem(
                            "a Content-Type other than ``application/json`` (none is read "
                            "as JSON: Tacker's v1 conductor sends none)"
                        ),
                        "500": _problem("an unexpected error; the detail names a request id"),
                        "503": _problem(
                            "the store cannot be written: nothing was stored, send again"
                        ),
                    },
                },
            },
            "/healthz": {
                "get": {"summary": "liveness", "responses": {"200": {"description": "up"}}}
            },
            "/readyz": {
                "get": {
                    "summary": "readiness: the store is migrated and every check passes",
                    "responses": {
                        "200": {"description": "ready"},
                        "503": {"description": "not ready; each check's result in the body"},
                    },
                }
            },
        },
        "components": {"schemas": schemas},
    }
    if hook_path is not None:
        document["paths"].update(_hook_paths(hook_path, schemas))
        document["components"]["securitySchemes"] = {
            "hookToken": {"type": "http", "scheme": "bearer"}
        }
    return document
