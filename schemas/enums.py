"""SOL003 enumerations exactly as Tacker defines them (``objects/v2/fields.py``)."""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "STATE_RANK",
    "LcmOperationStateType",
    "LcmOperationType",
    "NotificationStatus",
    "NotificationType",
    "Verbosity",
]


class LcmOperationStateType(StrEnum):
    STARTING = "STARTING"
    PROCESSING = "PROCESSING"
    COMPLETED = "COMPLETED"
    FAILED_TEMP = "FAILED_TEMP"
    FAILED = "FAILED"
    ROLLING_BACK = "ROLLING_BACK"
    ROLLED_BACK = "ROLLED_BACK"


class LcmOperationType(StrEnum):
    INSTANTIATE = "INSTANTIATE"
    SCALE = "SCALE"
    SCALE_TO_LEVEL = "SCALE_TO_LEVEL"
    CHANGE_FLAVOUR = "CHANGE_FLAVOUR"
    TERMINATE = "TERMINATE"
    HEAL = "HEAL"
    OPERATE = "OPERATE"
    CHANGE_EXT_CONN = "CHANGE_EXT_CONN"
    MODIFY_INFO = "MODIFY_INFO"
    CREATE_SNAPSHOT = "CREATE_SNAPSHOT"
    REVERT_TO_SNAPSHOT = "REVERT_TO_SNAPSHOT"
    CHANGE_VNFPKG = "CHANGE_VNFPKG"


class NotificationStatus(StrEnum):
    START = "START"
    RESULT = "RESULT"


class Verbosity(StrEnum):
    FULL = "FULL"
    SHORT = "SHORT"


class NotificationType(StrEnum):
    OP_OCC = "VnfLcmOperationOccurrenceNotification"
    CREATION = "VnfIdentifierCreationNotification"
    DELETION = "VnfIdentifierDeletionNotification"


# Order of op-occ states inside one lane. Terminal-ish states share a rank:
# FAILED_TEMP can be followed by COMPLETED (retry) or ROLLING_BACK (rollback),
# so none of them makes the others stale.
STATE_RANK: dict[str, int] = {
    LcmOperationStateType.STARTING: 0,
    LcmOperationStateType.PROCESSING: 1,
    LcmOperationStateType.COMPLETED: 2,
    LcmOperationStateType.FAILED_TEMP: 2,
    LcmOperationStateType.FAILED: 2,
    LcmOperationStateType.ROLLING_BACK: 2,
    LcmOperationStateType.ROLLED_BACK: 3,
}
