"""The error tree of lccn-subscriber: every exception it raises on purpose.

Class attributes drive the runner: ``retriable`` errors are retried with
persisted backoff, the rest fail the job (its event stays for replay);
``error_class`` is the short stable name stored with a failure and used in
metrics and ``failed list --error-class``. The adapters translate foreign errors
(asyncssh, aiohttp, keystoneauth, openstacksdk, aiokafka) into these at one
boundary each, chaining the original with ``from exc``.

::

    LccnError
    ├── ConfigError                     bad configuration (fail at start-up)
    │   └── ConfigFileError             the configuration file is missing or unreadable
    ├── StoreError                      the event store failed
    │   ├── StoreUnavailable            (retriable) database unreachable / locked / refused us
    │   └── SchemaTooNew                the store was migrated by a newer lccn-subscriber
    ├── NotificationParseError          a body is not a valid notification (also ValueError)
    ├── IngestError                     an ingest source failed (Kafka client errors)
    │   ├── BrokerUnavailable           (retriable) no Kafka broker answered
    │   ├── ListenFailed                the HTTP listener cannot bind (port taken, not permitted)
    │   └── RecordRejected              a Kafka record is no notification (stored as poison)
    ├── ClusterParamsError              invalid k8s_cluster_installation_param (also ValueError)
    ├── StepError                       a step of a job failed
    │   ├── TransientStepError          (retriable)
    │   │   ├── SshConnectError         cannot connect: refused, unreachable, timeout
    │   │   ├── SshConnectionLost       an open connection or channel broke
    │   │   ├── CommandTimeout          a remote command ran past its timeout
    │   │   ├── OpenStackUnavailable    connect failure, timeout, 5xx, 429
    │   │   └── TackerUnavailable       connection refused/reset, timeout, 5xx, Keystone down
    │   │       └── TackerConflict      409 past the client's own retries
    │   └── PermanentStepError
    │       ├── ServiceMissing          a client the step needs is not configured
    │       ├── DiscoveryError          the VNF is not the cluster its parameters describe
    │       ├── HostKeyRejected         unknown host key under ``strict``, or a changed key
    │       ├── AuthenticationFailed    every offered SSH key / the password was refused
    │       ├── SshKeyRefused           an ssh_private_key_path outside ssh.key_dir, not a
    │       │                           regular file, too large, or not a private key
    │       ├── SftpFailed              an upload was refused (no such dir, permission)
    │       ├── CommandFailed           a remote command exited non-zero (CommandResult.check)
    │       ├── OpenStackError          (root of OpenStack's, with OpenStackUnavailable)
    │       │   ├── OpenStackAuthFailed     401/403
    │       │   ├── OpenStackNotFound       404: no such stack, resource or server
    │       │   └── OpenStackRequestFailed  another 4xx
    │       └── TackerRejected          4xx other than 409 (ProblemDetails ``detail``)
    │           ├── TackerAuthError     Keystone refused the credentials, or 401/403
    │           ├── PackageNotFound     no onboarded VNF package has the instance's vnfdId
    │           ├── VimNotOurs          vim_name names a VIM we did not register: left alone
    │           └── TackerOpFailed      our MODIFY_INFO op-occ ended FAILED_TEMP/FAILED
    ├── StepInterrupted                 a non-idempotent step was cut off mid-run;
    │                                   its effect is unknown, so it is not re-run
    ├── StepOutcome                     not failures: how a step ends other than by returning
    │   ├── SkipStep                    the step's work is already done ("node already joined")
    │   │   └── EndJob                  ... and the job has nothing more to do: it ends done here
    │   │       └── NotACluster         the VNF is a CNF on Kubernetes, not a cluster of VMs
    │   └── EventRejected               Tacker contradicts the notification: the event is
    │                                   rejected, never run, never replayed
    └── CliError                        a command cannot go on: one line on stderr, exit 2
        └── PublishInputError           ``kafka publish`` input holds no valid notification

``SshError`` is a mixin of the SSH errors (``host`` says ``user@host:port``) and
``OpenStackError`` of OpenStack's, so ``except SshError`` catches every SSH
failure whether transient or permanent.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AuthenticationFailed",
    "BrokerUnavailable",
    "CliError",
    "ClusterParamsError",
    "CommandFailed",
    "CommandTimeout",
    "ConfigError",
    "ConfigFileError",
    "DiscoveryError",
    "EndJob",
    "EventRejected",
    "HostKeyRejected",
    "IngestError",
    "LccnError",
    "LeaseLost",
    "ListenFailed",
    "NotACluster",
    "NotificationParseError",
    "OpenStackAuthFailed",
    "OpenStackError",
    "OpenStackNotFound",
    "OpenStackRequestFailed",
    "OpenStackUnavailable",
    "PackageNotFound",
    "PermanentStepError",
    "PublishInputError",
    "RecordRejected",
    "SchemaTooNew",
    "ServiceMissing",
    "SftpFailed",
    "SkipStep",
    "SshConnectError",
    "SshConnectionLost",
    "SshError",
    "SshKeyRefused",
    "StepError",
    "StepInterrupted",
    "StepOutcome",
    "StoreError",
    "StoreUnavailable",
    "TackerAuthError",
    "TackerConflict",
    "TackerOpFailed",
    "TackerRejected",
    "TackerUnavailable",
    "TransientStepError",
    "VimNotOurs",
]


class LccnError(Exception):
    """Root of every error raised by lccn-subscriber.

    Attributes:
        retriable: the operation may succeed if tried again later.
        effect_unknown: the failure cut off work that may already have had its
            effect (a connection lost mid-command): a step that is not
            idempotent must not be retried blindly after it.
        error_class: a short stable name used in stored failures and metrics.
        vnf_instance_id, job_id, step: where it happened, when known.
    """

    retriable: bool = False
    effect_unknown: bool = False
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


# ------------------------------------------------------------ configuration


class ConfigError(LccnError):
    error_class = "config"


class ConfigFileError(ConfigError):
    """The configuration file is missing or unreadable."""

    error_class = "config-file"


# ---------------------------------------------------------- store and ingest


class StoreError(LccnError):
    error_class = "store"


class StoreUnavailable(StoreError):
    retriable = True
    error_class = "store-unavailable"


class LeaseLost(LccnError):
    """A lane's lease is no longer ours (taken over, or our renewal failed or timed out).

    Raised by a fenced store write (its conditional update of the lease row,
    ``owner`` and fencing ``token``, matched nothing) and by the check before a
    step starts. The write is refused, the lane stops; the new holder goes on.
    """

    error_class = "lease-lost"


class SchemaTooNew(StoreError):
    """The store's schema revision is unknown here: a newer version migrated it."""

    error_class = "schema-newer"


class NotificationParseError(LccnError, ValueError):
    """The body is not a valid notification.

    Attributes:
        field: dotted path of the first bad field (``None`` for bad JSON).
        detail: one human sentence naming the problem.
    """

    error_class = "invalid-notification"

    def __init__(self, detail: str, field: str | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.field = field


class IngestError(LccnError):
    """An ingest source failed; the foreign error is chained as ``__cause__``."""

    error_class = "ingest"


class BrokerUnavailable(IngestError):
    retriable = True
    error_class = "broker-unavailable"


class ListenFailed(IngestError):
    error_class = "listen"


class RecordRejected(IngestError):
    """The record is not a notification; it is stored as poison and skipped.

    Attributes:
        error: the validation error, one sentence.
        field: the first bad field, when known.
    """

    error_class = "poison"

    def __init__(self, error: str, field: str | None = None) -> None:
        super().__init__(error)
        self.error = error
        self.field = field


class ClusterParamsError(LccnError, ValueError):
    """The cluster parameters are invalid; ``problems`` lists (field path, what's wrong).

    The message names each field and never echoes a value (passwords live there).
    """

    error_class = "invalid-params"

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        lines = "; ".join(f"{path}: {what}" if path else what for path, what in problems)
        super().__init__(f"invalid k8s_cluster_installation_param: {lines}")


# -------------------------------------------------------------------- steps


class StepError(LccnError):
    error_class = "step"


class TransientStepError(StepError):
    retriable = True
    error_class = "transient"


class PermanentStepError(StepError):
    error_class = "permanent"


class ServiceMissing(PermanentStepError):
    error_class = "service-missing"


class DiscoveryError(PermanentStepError):
    """The VNF instance does not look like a cluster the parameters describe."""

    error_class = "discovery"


class StepInterrupted(StepError):
    error_class = "interrupted"


class StepOutcome(LccnError):
    """A step ending other than by returning, and not a failure."""

    error_class = "outcome"


class SkipStep(StepOutcome):
    """Raised by a step whose work is already done ("node already joined").

    Its ``result`` is stored as the step's result, like a return value.
    """

    error_class = "skipped"

    def __init__(self, reason: str = "", result: Any = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.result = result


class EndJob(SkipStep):
    """Raised by a step that finds its job has nothing to do ("no drain was requested").

    The step is recorded as skipped with its ``result``, and the job ends done there:
    the plan's later steps are not run.
    """


class NotACluster(EndJob):
    """The VNF of the notification is not a cluster of VMs but a CNF deployed on Kubernetes.

    Every VIM it names is a Kubernetes or Helm one and its operation carries no cluster
    parameters (the seeds' VNF-B, which Tacker deploys on the cluster we built and whose
    notifications reach us through the same subscription). The cluster handlers' job
    ends done at the parameters step, with the reason on it.
    """

    error_class = "not-a-cluster"


class EventRejected(StepOutcome):
    """What Tacker says contradicts the notification: its op-occ names another instance
    or operation, is in another state, or the op-occ or instance does not exist for us.

    A notification is a claim and Tacker is the truth: the event is stored as
    ``rejected`` with the reason, its job never runs a step that acts, and no replay
    takes it back (a new, true notification is a new event).
    """

    error_class = "rejected"


# ---------------------------------------------------------------------- SSH


class SshError(LccnError):
    """Mixin root of the SSH executor's errors; ``host`` is ``user@host:port``.

    ``result`` is the command's :class:`~subscriber.kernel.ports.CommandResult`
    when there was one (a failed or timed-out command), for its output tails.
    """

    error_class = "ssh"

    def __init__(
        self,
        message: str,
        *,
        host: str = "",
        step: str | None = None,
        result: Any = None,
    ) -> None:
        super().__init__(message, step=step)
        self.host = host
        self.result = result


class SshConnectError(TransientStepError, SshError):
    error_class = "ssh-connect"


class SshConnectionLost(TransientStepError, SshError):
    error_class = "ssh-connection-lost"
    effect_unknown = True  # the remote command may have run, or may still be running


class CommandTimeout(TransientStepError, SshError):
    """The command ran past its timeout; ``result`` holds the output seen so far."""

    error_class = "ssh-command-timeout"
    effect_unknown = True


class HostKeyRejected(PermanentStepError, SshError):
    error_class = "ssh-host-key"


class AuthenticationFailed(PermanentStepError, SshError):
    error_class = "ssh-auth"


class SshKeyRefused(PermanentStepError, SshError):
    """A key file a VNF's parameters name is not one we may read (nothing was sent)."""

    error_class = "ssh-key-refused"


class SftpFailed(PermanentStepError, SshError):
    error_class = "ssh-sftp"


class CommandFailed(PermanentStepError, SshError):
    """A command exited non-zero (raised by ``CommandResult.check``); ``result`` is it."""

    error_class = "ssh-command-failed"


# ---------------------------------------------------------------- OpenStack


class OpenStackError(PermanentStepError):
    """Root of the OpenStack adapter's errors (permanent unless a subclass says otherwise)."""

    error_class = "openstack"

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class OpenStackAuthFailed(OpenStackError):
    error_class = "openstack-auth"


class OpenStackNotFound(OpenStackError):
    error_class = "openstack-not-found"


class OpenStackRequestFailed(OpenStackError):
    error_class = "openstack-request"


class OpenStackUnavailable(TransientStepError, OpenStackError):
    error_class = "openstack-unavailable"


# ------------------------------------------------------------------- Tacker


class TackerUnavailable(TransientStepError):
    error_class = "tacker-unavailable"

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class TackerConflict(TackerUnavailable):
    error_class = "tacker-conflict"


class TackerRejected(PermanentStepError):
    error_class = "tacker-rejected"

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class TackerAuthError(TackerRejected):
    error_class = "tacker-auth"


class PackageNotFound(TackerRejected):
    """No onboarded VNF package has the vnfdId asked for."""

    error_class = "tacker-package-not-found"


class VimNotOurs(TackerRejected):
    """A VIM of the name we would register or delete is not one we registered."""

    error_class = "tacker-vim-not-ours"


class TackerOpFailed(TackerRejected):
    error_class = "tacker-op-failed"


# ---------------------------------------------------------------------- CLI


class CliError(LccnError):
    """A one-line error for the operator (the CLI prints it and exits 2)."""

    error_class = "cli"


class PublishInputError(CliError):
    """The ``kafka publish`` input holds no notifications, or one that is not valid."""

    error_class = "publish-input"
