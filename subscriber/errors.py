"""The error tree of lccn-subscriber.

Every error the service raises on purpose derives from :class:`LccnError`.
Class attributes drive the runner: ``retriable`` errors are retried with
persisted backoff, the rest fail the job (its event stays for replay).

::

    LccnError
    ├── ConfigError                  bad configuration (fail at start-up)
    ├── StoreError                   the event store failed
    │   └── StoreUnavailable         (retriable) database unreachable / locked
    ├── NotificationError            a body is not a valid notification
    ├── IngestError                  an ingest source failed (Kafka client errors)
    │   └── BrokerUnavailable        (retriable) no Kafka broker answered
    ├── StepError                    a step of a job failed
    │   ├── TransientStepError       (retriable) SSH connect/timeout, 5xx, 409, broker down
    │   └── PermanentStepError       bad parameters, auth refused, script failed
    ├── StepInterrupted              a non-idempotent step was cut off mid-run;
    │                                its effect is unknown, so it is not re-run
    └── CliError                     a command cannot go on: one line on stderr, exit 2

Step outcomes that are not failures are separate exceptions in
:mod:`handlers.base` (``SkipStep``).
"""

from __future__ import annotations

__all__ = [
    "BrokerUnavailable",
    "CliError",
    "ConfigError",
    "IngestError",
    "LccnError",
    "NotificationError",
    "PermanentStepError",
    "StepError",
    "StepInterrupted",
    "StoreError",
    "StoreUnavailable",
    "TransientStepError",
]


class LccnError(Exception):
    """Root of every error raised by lccn-subscriber.

    Attributes:
        retriable: the operation may succeed if tried again later.
        error_class: a short stable name used in stored failures and metrics.
        vnf_instance_id, job_id, step: where it happened, when known.
    """

    retriable: bool = False
    error_class: str = "error"

    def __init__(
        self,
        message: str,
        *,
        vnf_instance_id: str | None = None,
        job_id: int | None = None,
        step: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.vnf_instance_id = vnf_instance_id
        self.job_id = job_id
        self.step = step


class ConfigError(LccnError):
    error_class = "config"


class StoreError(LccnError):
    error_class = "store"


class StoreUnavailable(StoreError):
    retriable = True
    error_class = "store-unavailable"


class NotificationError(LccnError):
    """A body that is not a valid notification; ``field`` names the first bad field."""

    error_class = "invalid-notification"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class IngestError(LccnError):
    """An ingest source failed; the foreign error is chained as ``__cause__``."""

    error_class = "ingest"


class BrokerUnavailable(IngestError):
    retriable = True
    error_class = "broker-unavailable"


class StepError(LccnError):
    error_class = "step"


class TransientStepError(StepError):
    retriable = True
    error_class = "transient"


class PermanentStepError(StepError):
    error_class = "permanent"


class StepInterrupted(StepError):
    error_class = "interrupted"


class CliError(LccnError):
    """A one-line error for the operator (the CLI prints it and exits 2)."""

    error_class = "cli"
