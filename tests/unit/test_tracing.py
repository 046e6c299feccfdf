"""Tracing (the ``otel`` extra): one trace per event, ingest -> job -> steps -> calls.

A real Service takes a notification over HTTP and runs a job whose steps run SSH
commands (FakeSsh) carrying a token and a password, and call Tacker over HTTP (the
real client against the scripted Tacker); the SDK's in-memory exporter records the spans.
"""

from __future__ import annotations

import asyncio
import logging

import aiohttp
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import SecretStr

from schemas import Notification, parse_notification_data
from subscriber import tracing
from subscriber.config import TackerSettings
from subscriber.kernel import JobContext, Plan, RoutingTable, Services, Step
from subscriber.kernel.ports import SshTarget
from subscriber.store import NewEvent, Store
from subscriber.store.records import EventRow
from tests.cluster_fakes import FakeSsh
from tests.conftest import ServiceFactory, callback_url, wait_settled
from tests.factories import op_occ, uid
from tests.unit.scripted_tacker import ScriptedTacker

TOKEN = "abcdef.0123456789abcdef"
PASSWORD = "node-pw-Xq7!secret"
CA_HASH = "sha256:" + "c0ffee" * 10


class _JoinHandler:
    """Two steps: one joins a node over SSH (secrets in the arguments), one reads Tacker."""

    name = "trace-test"

    def plan(self, notification: Notification) -> Plan:
        async def join(ctx: JobContext) -> None:
            ssh = ctx.services.need_ssh()
            node = SshTarget(host="10.9.0.2", username="ubuntu", password=SecretStr(PASSWORD))
            command = f"kubeadm join 10.9.0.1:6443 --token {TOKEN} --discovery-token-ca-cert-hash"
            (await ssh.run(node, f"{command} {CA_HASH}", sudo=True, secrets=[TOKEN])).check()
            script = f"K8S_TOKEN={TOKEN} /opt/lccn/install_k8s_cluster.sh -p '{PASSWORD}'"
            (await ssh.run(node, script, secrets=[TOKEN, PASSWORD])).check()

        async def read(ctx: JobContext) -> None:
            await ctx.services.need_tacker().get_vnf_instance(ctx.vnf_instance_id)

        return Plan((Step("join", join), Step("read", read)))


def _by_name(finished: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [s for s in finished if s.name == name]


async def _job_ended(spans: InMemorySpanExporter) -> tuple[ReadableSpan, ...]:
    """The finished spans once the job's span has ended (it ends just after the event's
    status is stored, which is what ``wait_settled`` sees)."""
    async with asyncio.timeout(10):
        while not _by_name(spans.get_finished_spans(), "job"):
            await asyncio.sleep(0.01)
    return spans.get_finished_spans()


def _parent_id(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def _span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return span.context.span_id


async def test_a_job_is_one_trace_from_ingest_to_its_commands_without_secrets(
    spans: InMemorySpanExporter,
    start_service: ServiceFactory,
    http: aiohttp.ClientSession,
    fake: ScriptedTacker,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    instance = uid()
    fake.on("GET", f"/vnflcm/v2/vnf_instances/{instance}", (200, {"id": instance}))
    ssh = FakeSsh()
    routing = RoutingTable()
    routing.register(_JoinHandler(), operation="INSTANTIATE", state="STARTING")
    tacker = TackerSettings(endpoint=fake.url, reconcile_interval=0, report_status=False)
    svc = await start_service(
        routing=routing, services=Services(ssh=ssh), update={"tacker": tacker}
    )
    body = op_occ(instance=instance, state="STARTING")
    async with http.post(callback_url(svc), json=body) as resp:
        assert resp.status == 204
    (event,) = await wait_settled(svc, 1)
    assert event.status == "done", event.status_detail
    assert len(ssh.calls) == 2  # the commands really ran, with their secrets

    finished = await _job_ended(spans)
    (ingest,) = _by_name(finished, "ingest")
    (job,) = _by_name(finished, "job")
    steps = {s.attributes["lccn.step"]: s for s in _by_name(finished, "step") if s.attributes}
    commands = _by_name(finished, "ssh")
    calls = _by_name(finished, "tacker")

    # One trace, shaped ingest -> job -> steps -> commands and calls.
    trace_ids = {s.context.trace_id for s in finished if s.context is not None}
    assert len(trace_ids) == 1
    assert ingest.parent is None
    assert ingest.attributes is not None and ingest.attributes["lccn.source"] == "http"
    assert ingest.attributes["lccn.event_id"] == event.id
    assert _parent_id(job) == _span_id(ingest)
    assert job.attributes is not None and job.attributes["lccn.outcome"] == "done"
    assert set(steps) == {"join", "read"}
    assert all(_parent_id(s) == _span_id(job) for s in steps.values())
    assert [(c.attributes or {}).get("lccn.command") for c in commands] == [
        "kubeadm",
        "install_k8s_cluster.sh",
    ]
    assert all(_parent_id(c) == _span_id(steps["join"]) for c in commands)
    assert all((c.attributes or {}).get("net.peer.name") == "10.9.0.2" for c in commands)
    (call,) = calls
    assert _parent_id(call) == _span_id(steps["read"])
    assert dict(call.attributes or {}) == {
        "http.request.method": "GET",
        "url.template": "/vnflcm/v2/vnf_instances/{id}",
        "http.response.status_code": 200,
    }

    # No secret in any name, attribute or status of any span.
    shown = repr(
        [(s.name, dict(s.attributes or {}), s.status.description, s.events) for s in finished]
    )
    for secret in (TOKEN, PASSWORD, CA_HASH, "c0ffee"):
        assert secret not in shown

    # The trace id is stored with the event and logged with its job's records.
    (trace_id,) = (f"{t:032x}" for t in trace_ids)
    stored = await svc.store.events.get(event.id)
    assert stored is not None and stored.trace_id == trace_id
    done = [r for r in caplog.records if r.getMessage() == "job done"]
    assert [getattr(r, "trace_id", None) for r in done] == [trace_id]


async def test_a_failed_step_marks_its_spans_by_error_class_only(
    spans: InMemorySpanExporter,
    start_service: ServiceFactory,
    http: aiohttp.ClientSession,
) -> None:
    ssh = FakeSsh().fail("kubeadm", exit_status=1, stderr=f"bad token {TOKEN}")
    routing = RoutingTable()
    routing.register(_JoinHandler(), operation="INSTANTIATE", state="STARTING")
    svc = await start_service(routing=routing, services=Services(ssh=ssh), max_attempts=1)
    async with http.post(callback_url(svc), json=op_occ(state="STARTING")) as resp:
        assert resp.status == 204
    (event,) = await wait_settled(svc, 1)
    assert event.status == "failed"
    finished = await _job_ended(spans)
    (step,) = _by_name(finished, "step")
    (job,) = _by_name(finished, "job")
    assert step.status.description == "CommandFailed"
    assert (job.attributes or {})["lccn.outcome"] == "failed"
    (command,) = _by_name(finished, "ssh")
    assert (command.attributes or {})["lccn.exit_status"] == 1
    assert TOKEN not in repr([(dict(s.attributes or {}), s.status.description) for s in finished])


def test_without_a_provider_every_helper_is_the_shared_no_op() -> None:
    assert not tracing.enabled()
    assert tracing.span("job", parent="00-" + "1" * 32 + "-" + "2" * 16 + "-01") is tracing.NOOP
    assert tracing.start("ingest") is tracing.NOOP
    with tracing.span("step") as span:
        assert span.traceparent is None and span.trace_id is None
    assert tracing.current_trace_id() is None


@pytest.mark.parametrize(
    ("command", "name"),
    [
        (f"kubeadm join 10.0.0.1:6443 --token {TOKEN}", "kubeadm"),
        (f"sudo -n -- kubeadm token create {TOKEN}", "kubeadm"),
        (f"TOKEN={TOKEN} PASSWORD={PASSWORD} /usr/bin/helm install x", "helm"),
        ("timeout 30 kubectl get nodes", "kubectl"),
        (f"bash -c 'echo {PASSWORD} | chpasswd'", "bash"),
        (f"'{PASSWORD}'", "sh"),
        ("echo 'unterminated", "sh"),
        ("", "sh"),
    ],
)
def test_a_command_is_named_by_its_program_only(command: str, name: str) -> None:
    assert tracing.command_name(command) == name


@pytest.mark.parametrize(
    ("path", "template"),
    [
        ("/vnflcm/v2/vnf_instances/3f1c-9a", "/vnflcm/v2/vnf_instances/{id}"),
        ("/vnflcm/v1/vnf_lcm_op_occs?filter=(eq,id,x)", "/vnflcm/v1/vnf_lcm_op_occs"),
        (
            "/vnfpkgm/v1/vnf_packages/ab12/artifacts/Files/k.yaml",
            "/vnfpkgm/v1/vnf_packages/{id}/artifacts/{id}/{id}",
        ),
    ],
)
def test_a_tacker_path_is_shown_as_its_template(path: str, template: str) -> None:
    assert tracing.path_template(path) == template


async def test_the_traceparent_survives_the_store_round_trip(
    spans: InMemorySpanExporter, store: Store
) -> None:
    """What ingest stores is what another process's job continues (see also the serve
    test in tests/process/test_tracing_process.py)."""
    body = op_occ()
    with tracing.span("ingest") as ingest:
        new = NewEvent(
            source="http",
            notification=parse_notification_data(body),
            body=body,
            traceparent=ingest.traceparent,
        )
        result = await store.events.append(new)
    row: EventRow | None = await store.events.get(result.event_id)
    assert row is not None and row.traceparent == ingest.traceparent
    assert row.trace_id == ingest.trace_id
    assert row.summary()["traceId"] == ingest.trace_id
    with tracing.span("job", parent=row.traceparent) as job:
        assert job.trace_id == ingest.trace_id
    (_, job_span) = spans.get_finished_spans()
    assert (
        job_span.parent is not None
        and f"{job_span.parent.span_id:016x}" == ((ingest.traceparent or "").split("-")[2])
    )
