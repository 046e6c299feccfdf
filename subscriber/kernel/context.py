"""What a step sees of its job: identity, the notification, results, typed services."""

from __future__ import annotations

import logging
from dataclasses import dataclass, fields, replace
from typing import Any, Protocol, TypeVar

from schemas import Notification
from subscriber.errors import ServiceMissing
from subscriber.kernel.ports import (
    ClusterInventory,
    HandBack,
    KeyValues,
    OpenStackLookups,
    SshExecutor,
    TackerApi,
)
from subscriber.kernel.results import StepResult

__all__ = ["JobContext", "Services"]

R = TypeVar("R", bound=StepResult)


class _Reader(Protocol):
    """What a context needs to know of its step (a :class:`~subscriber.kernel.plan.Step`)."""

    @property
    def name(self) -> str: ...

    @property
    def reads(self) -> frozenset[type[StepResult]]: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Services:
    """The clients steps use; ``None`` where the service is not configured.

    ``serve`` wires the real clients (asyncssh pool, Tacker, openstacksdk, the
    store's inventory); unit tests pass in-memory fakes; integration tests the
    real Tacker, the simulated OpenStack and real sshd hosts. Steps ask for one
    with :meth:`need_ssh` and friends, which fail the job with a message that
    names the missing settings.
    """

    ssh: SshExecutor | None = None
    tacker: TackerApi | None = None
    openstack: OpenStackLookups | None = None
    inventory: ClusterInventory | None = None
    values: KeyValues | None = None
    answers: HandBack | None = None

    def merged(self, overrides: Services | None) -> Services:
        """These services with every service ``overrides`` sets taking precedence."""
        if overrides is None:
            return self
        changes = {
            f.name: getattr(overrides, f.name)
            for f in fields(overrides)
            if getattr(overrides, f.name) is not None
        }
        return replace(self, **changes)

    def configured(self) -> frozenset[str]:
        """The names of the services that are present."""
        return frozenset(f.name for f in fields(self) if getattr(self, f.name) is not None)

    def _need(self, name: str, value: Any) -> Any:
        if value is None:
            raise ServiceMissing(
                f"the {name!r} service is not configured: the cluster handlers need tacker, "
                "openstack and ssh (see the tacker.*, openstack.* and ssh.* settings)"
            )
        return value

    def need_ssh(self) -> SshExecutor:
        ssh: SshExecutor = self._need("ssh", self.ssh)
        return ssh

    def need_tacker(self) -> TackerApi:
        tacker: TackerApi = self._need("tacker", self.tacker)
        return tacker

    def need_openstack(self) -> OpenStackLookups:
        openstack: OpenStackLookups = self._need("openstack", self.openstack)
        return openstack

    def need_inventory(self) -> ClusterInventory:
        inventory: ClusterInventory = self._need("inventory", self.inventory)
        return inventory

    def need_values(self) -> KeyValues:
        values: KeyValues = self._need("values", self.values)
        return values

    def need_answers(self) -> HandBack:
        if self.answers is None:
            raise ServiceMissing(
                "a job run by a management-driver hook hands its answer back through the "
                "hook, which needs hooks.token (or hooks.token_file)"
            )
        return self.answers


@dataclass(frozen=True, slots=True)
class JobContext:
    """What a step sees of its job.

    Attributes:
        event_id, job_id, attempt: identity of the run (attempt counts from 1).
        mode: ``live``, ``resume`` or ``anew``.
        source: where the event came from (``http``, ``kafka``, ``reconcile``, ``replay``,
            or ``hook``: a management-driver hook of the VNF package asked for the job).
        notification: the event's notification, parsed from the stored
            (redacted) body: secrets must be read from Tacker, not from here.
        results: the stored form of this job's done steps' results, by step name
            (the runner's; steps read them with :meth:`result`).
        services: the clients steps use.
        log: a logger adapter carrying the event/job/instance ids.
        step: the name of the step this context is given to (:meth:`for_step`).
        reads: the result kinds that step declares (``needs`` and ``wants``).
        step_started_at: when the runner decided to start that step (wall clock, taken
            before its last lease check, so never later than the step could have begun).
    """

    event_id: int
    job_id: int
    attempt: int
    mode: str
    notification: Notification
    results: dict[str, Any]
    services: Services
    log: logging.LoggerAdapter[logging.Logger]
    source: str = ""
    step: str | None = None
    reads: frozenset[type[StepResult]] = frozenset()
    step_started_at: float | None = None

    @property
    def vnf_instance_id(self) -> str:
        return self.notification.vnfInstanceId

    def for_step(self, step: _Reader, started_at: float | None = None) -> JobContext:
        """This context as ``step`` sees it (what it may read is what it declares);
        ``started_at``: when the runner decided to start it."""
        return replace(self, step=step.name, reads=step.reads, step_started_at=started_at)

    def result(self, kind: type[R]) -> R:
        """The result of the earlier step that made ``kind``, which this step ``needs``.

        Raises:
            RuntimeError: the step does not declare ``kind``, or no earlier step made it
                (a plan built with :class:`~subscriber.kernel.plan.Plan` cannot get here
                for a kind in ``needs``).
        """
        found = self.result_if_made(kind)
        if found is None:
            raise RuntimeError(f"no earlier step made {kind.__name__} (step {kind.step!r})")
        return found

    def result_if_made(self, kind: type[R]) -> R | None:
        """The result of kind ``kind`` if an earlier step made it, else ``None``.

        Raises:
            RuntimeError: the step declares ``kind`` in neither ``needs`` nor ``wants``.
        """
        if self.step is None or kind not in self.reads:
            who = self.step if self.step is not None else "(no step)"
            raise RuntimeError(
                f"step {who!r} reads {kind.__name__} without declaring it in needs or wants"
            )
        stored = self.results.get(kind.step)
        return None if stored is None else kind.from_json(stored)
