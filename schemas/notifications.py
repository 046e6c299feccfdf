"""SOL003 LCCN notifications as Tacker v1 and v2 send them.

Required fields and enum values are enforced; fields we do not model are kept
(``extra='allow'``), never rejected, so a newer Tacker does not break ingest.
The three notification types are told apart by ``notificationType``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from schemas.enums import (
    LcmOperationStateType,
    LcmOperationType,
    NotificationStatus,
    NotificationType,
    Verbosity,
)
from schemas.ids import ResourceId, error_message
from schemas.problem import ProblemDetails
from subscriber.errors import NotificationParseError

__all__ = [
    "Link",
    "Notification",
    "NotificationParseError",
    "VnfIdentifierCreationNotification",
    "VnfIdentifierDeletionNotification",
    "VnfInfoModifications",
    "VnfLcmOperationOccurrenceNotification",
    "parse_notification",
    "parse_notification_data",
]


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class Link(_Open):
    href: str


class OpOccLinks(_Open):
    vnfInstance: Link
    subscription: Link
    vnfLcmOpOcc: Link | None = None


class IdentifierLinks(_Open):
    vnfInstance: Link
    subscription: Link


class VnfInfoModifications(_Open):
    """``changedInfo``: FULL verbosity only; may carry vimConnectionInfo with secrets."""

    vnfInstanceName: str | None = None
    vnfInstanceDescription: str | None = None
    vnfConfigurableProperties: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    extensions: dict[str, Any] | None = None
    # v2: a map keyed by an id; v1: a list of entries.
    vimConnectionInfo: dict[str, Any] | list[Any] | None = None
    vnfdId: str | None = None
    vnfProvider: str | None = None
    vnfProductName: str | None = None
    vnfSoftwareVersion: str | None = None
    vnfdVersion: str | None = None
    vnfcInfoModifications: list[dict[str, Any]] | None = None


class _NotificationBase(_Open):
    # Ids reach the store's columns and Tacker's URLs: their shape is checked here
    # (schemas.ids), so a bad one is refused for its own request, never later.
    id: ResourceId
    subscriptionId: ResourceId
    timeStamp: str
    vnfInstanceId: ResourceId


class VnfLcmOperationOccurrenceNotification(_NotificationBase):
    notificationType: Literal[NotificationType.OP_OCC]
    notificationStatus: NotificationStatus
    operationState: LcmOperationStateType
    operation: LcmOperationType
    isAutomaticInvocation: bool
    vnfLcmOpOccId: ResourceId
    verbosity: Verbosity | None = None
    affectedVnfcs: list[dict[str, Any]] | None = None
    affectedVirtualLinks: list[dict[str, Any]] | None = None
    affectedExtLinkPorts: list[dict[str, Any]] | None = None
    affectedVirtualStorages: list[dict[str, Any]] | None = None
    affectedVipCps: list[dict[str, Any]] | None = None
    changedInfo: VnfInfoModifications | None = None
    changedExtConnectivity: list[dict[str, Any]] | None = None
    modificationsTriggeredByVnfPkgChange: dict[str, Any] | None = None
    error: ProblemDetails | None = None
    links: OpOccLinks = Field(alias="_links")

    @field_validator("error", mode="before")
    @classmethod
    def _v1_error(cls, value: Any) -> Any:
        # Tacker's v1 conductor sends the failure as the bare text of the exception; the
        # op-occ it stores says ProblemDetails(status=500, detail=that text).
        if isinstance(value, str):
            return {"status": 500, "detail": value}
        return value


class _IdentifierNotification(_NotificationBase):
    # v2 sends ``_links``; v1 identifier notifications send ``links``.
    links: IdentifierLinks | None = Field(default=None, alias="_links")
    links_v1: IdentifierLinks | None = Field(default=None, alias="links")

    @model_validator(mode="after")
    def _one_links(self) -> _IdentifierNotification:
        if self.links is None and self.links_v1 is None:
            raise PydanticCustomError(
                "links_missing", "Field required: '_links' (v2) or 'links' (v1)"
            )
        return self


class VnfIdentifierCreationNotification(_IdentifierNotification):
    notificationType: Literal[NotificationType.CREATION]


class VnfIdentifierDeletionNotification(_IdentifierNotification):
    notificationType: Literal[NotificationType.DELETION]


Notification = Annotated[
    VnfLcmOperationOccurrenceNotification
    | VnfIdentifierCreationNotification
    | VnfIdentifierDeletionNotification,
    Field(discriminator="notificationType"),
]

# Only keys are cached while parsing JSON: pydantic's default also caches string values
# up to 64 characters, and every id of a notification is a new UUID. That cache (16,384
# entries) held ~1 MB in each process of serve once it had parsed a few thousand.
_adapter: TypeAdapter[Notification] = TypeAdapter(
    Notification, config=ConfigDict(cache_strings="keys")
)


def _loc_text(loc: tuple[int | str, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        else:
            parts.append(("." if parts else "") + item)
    return "".join(parts)


def _translate(exc: ValidationError) -> NotificationParseError:
    err = exc.errors(include_url=False)[0]
    loc = tuple(err.get("loc", ()))
    # Drop the union tag pydantic inserts after a discriminated union matched.
    if loc and isinstance(loc[0], str) and loc[0] in {t.value for t in NotificationType}:
        loc = loc[1:]
    kind = err.get("type", "")
    if kind == "json_invalid":
        return NotificationParseError(f"body is not valid JSON: {err.get('msg', '')}")
    if kind == "union_tag_not_found":
        return NotificationParseError("Field required: 'notificationType'", "notificationType")
    if kind == "union_tag_invalid":
        allowed = ", ".join(t.value for t in NotificationType)
        return NotificationParseError(
            f"'notificationType' must be one of {allowed}", "notificationType"
        )
    if kind == "links_missing":
        return NotificationParseError(err.get("msg", ""), "_links")
    if kind in ("model_type", "model_attributes_type", "dict_type") and not loc:
        return NotificationParseError("body must be a JSON object")
    field = _loc_text(loc) or None
    msg = error_message(err)
    if field:
        return NotificationParseError(f"'{field}': {msg}", field)
    return NotificationParseError(msg)


def parse_notification(body: bytes | str) -> Notification:
    """Parse and validate a notification from raw JSON.

    Raises:
        NotificationParseError: bad JSON or a body that fails the schema; its
            ``field`` names the first bad field.
    """
    try:
        return _adapter.validate_json(body)
    except ValidationError as exc:
        raise _translate(exc) from None


def parse_notification_data(data: Any) -> Notification:
    """Like :func:`parse_notification` for already-decoded JSON."""
    try:
        return _adapter.validate_python(data)
    except ValidationError as exc:
        raise _translate(exc) from None
