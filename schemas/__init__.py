"""pydantic models of what crosses our boundaries: SOL003 notifications, ProblemDetails."""

from schemas.enums import (
    STATE_RANK,
    LcmOperationStateType,
    LcmOperationType,
    NotificationStatus,
    NotificationType,
    Verbosity,
)
from schemas.notifications import (
    Notification,
    VnfIdentifierCreationNotification,
    VnfIdentifierDeletionNotification,
    VnfLcmOperationOccurrenceNotification,
    parse_notification,
    parse_notification_data,
)
from schemas.problem import PROBLEM_CONTENT_TYPE, ProblemDetails
from subscriber.errors import NotificationParseError  # what parse_notification raises

__all__ = [
    "PROBLEM_CONTENT_TYPE",
    "STATE_RANK",
    "LcmOperationStateType",
    "LcmOperationType",
    "Notification",
    "NotificationParseError",
    "NotificationStatus",
    "NotificationType",
    "ProblemDetails",
    "Verbosity",
    "VnfIdentifierCreationNotification",
    "VnfIdentifierDeletionNotification",
    "VnfLcmOperationOccurrenceNotification",
    "parse_notification",
    "parse_notification_data",
]
