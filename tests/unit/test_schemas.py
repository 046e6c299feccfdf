"""Every notification shape Tacker sends parses; malformed ones name their first bad field."""

from __future__ import annotations

import json

import pytest

from schemas import (
    NotificationParseError,
    VnfIdentifierCreationNotification,
    VnfIdentifierDeletionNotification,
    VnfLcmOperationOccurrenceNotification,
    parse_notification,
)
from tests.factories import OPERATIONS, STATES, identifier, op_occ


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("verbosity", ["FULL", "SHORT"])
@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize("operation", OPERATIONS)
def test_every_op_occ_shape_parses(
    operation: str, state: str, verbosity: str, version: int
) -> None:
    body = op_occ(operation=operation, state=state, verbosity=verbosity, version=version)
    n = parse_notification(json.dumps(body))
    assert isinstance(n, VnfLcmOperationOccurrenceNotification)
    assert (n.operation, n.operationState) == (operation, state)
    assert n.vnfLcmOpOccId == body["vnfLcmOpOccId"]


@pytest.mark.parametrize("version", [1, 2])
def test_identifier_notifications_v1_links_and_v2_underscore_links(version: int) -> None:
    created = parse_notification(json.dumps(identifier("Creation", version=version)))
    deleted = parse_notification(json.dumps(identifier("Deletion", version=version)))
    assert isinstance(created, VnfIdentifierCreationNotification)
    assert isinstance(deleted, VnfIdentifierDeletionNotification)


def test_unknown_fields_are_kept() -> None:
    body = op_occ(state="COMPLETED") | {"vendorExtension": {"x": 1}}
    n = parse_notification(json.dumps(body))
    assert n.model_extra == {"vendorExtension": {"x": 1}}


def test_changed_info_with_v2_map_and_v1_list_vim_connection_info() -> None:
    v2 = op_occ(operation="MODIFY_INFO", state="COMPLETED")
    n = parse_notification(json.dumps(v2))
    assert isinstance(n, VnfLcmOperationOccurrenceNotification)
    assert n.changedInfo is not None and isinstance(n.changedInfo.vimConnectionInfo, dict)
    v1 = op_occ(operation="MODIFY_INFO", state="COMPLETED", version=1)
    v1["changedInfo"] = {"vimConnectionInfo": [{"id": "a", "vimType": "kubernetes"}]}
    n1 = parse_notification(json.dumps(v1))
    assert isinstance(n1, VnfLcmOperationOccurrenceNotification)
    assert n1.changedInfo is not None and isinstance(n1.changedInfo.vimConnectionInfo, list)


def _without(body: dict[str, object], key: str) -> dict[str, object]:
    return {k: v for k, v in body.items() if k != key}


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda b: _without(b, "vnfLcmOpOccId"), "vnfLcmOpOccId"),
        (lambda b: _without(b, "operationState"), "operationState"),
        (lambda b: _without(b, "_links"), "_links"),
        (lambda b: _without(b, "notificationType"), "notificationType"),
        (lambda b: b | {"operationState": "DONE"}, "operationState"),
        (lambda b: b | {"operation": "REBOOT"}, "operation"),
        (lambda b: b | {"notificationStatus": "MIDDLE"}, "notificationStatus"),
        (lambda b: b | {"notificationType": "Nope"}, "notificationType"),
        (lambda b: b | {"isAutomaticInvocation": "sometimes"}, "isAutomaticInvocation"),
        (lambda b: b | {"_links": {"subscription": {"href": "x"}}}, "_links.vnfInstance"),
        (lambda b: b | {"vnfInstanceId": ""}, "vnfInstanceId"),
    ],
)
def test_malformed_names_first_bad_field(mutate: object, field: str) -> None:
    body = mutate(op_occ())  # type: ignore[operator]
    with pytest.raises(NotificationParseError) as err:
        parse_notification(json.dumps(body))
    assert err.value.field == field
    assert field.split(".")[0] in err.value.detail


def test_identifier_without_any_links_is_rejected() -> None:
    body = identifier()
    body.pop("_links")
    with pytest.raises(NotificationParseError) as err:
        parse_notification(json.dumps(body))
    assert err.value.field == "_links"


@pytest.mark.parametrize("raw", [b"{not json", b"", b"[1, 2]", b'"text"', b"\xff\xfe"])
def test_not_an_object(raw: bytes) -> None:
    with pytest.raises(NotificationParseError) as err:
        parse_notification(raw)
    assert err.value.field is None
    assert err.value.detail


def test_parsing_keeps_no_cache_of_string_values() -> None:
    """Each parse makes its own id strings: pydantic's default JSON parsing caches short
    string values (every id of a notification, a new UUID each), ~1 MB a process after a
    few thousand notifications; the field names are still shared."""
    body = json.dumps(op_occ())
    first, second = parse_notification(body), parse_notification(body)
    assert first.vnfInstanceId == second.vnfInstanceId
    assert first.vnfInstanceId is not second.vnfInstanceId
