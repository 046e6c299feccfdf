"""The typed step layer: every routed plan is built and its ``needs`` hold, routes are
keyed by the SOL003 enums, and a step reads only the results it declares."""

from __future__ import annotations

from typing import Any

import pytest

from handlers import cluster_routes, default_routing
from handlers.results import ClusterAccess, Discovered
from schemas import LcmOperationStateType, LcmOperationType, NotificationType
from subscriber.config import ClusterSettings
from subscriber.errors import ConfigError
from subscriber.kernel import JobContext, Plan, RoutingTable, Services, Step, StepResult, StepsFor
from subscriber.kernel.routing import sample_notification
from tests.cluster_fakes import job_context


class Made(StepResult, step="make"):
    value: int


class Other(StepResult, step="other"):
    value: int = 0


async def _make(ctx: JobContext) -> Made:
    return Made(value=1)


def _ctx(results: dict[str, Any] | None = None) -> JobContext:
    notification = sample_notification(LcmOperationType.SCALE, LcmOperationStateType.COMPLETED)
    return job_context(notification, Services(), results=results or {})


def test_every_routed_plan_is_built_with_its_needs_made_earlier() -> None:
    table = default_routing(cluster=ClusterSettings(), cluster_handlers=True)
    routes = cluster_routes()
    assert len(routes) == 11
    for route in routes:
        operation, state = route.operation, route.state
        assert operation is not None
        plan = route.handler.plan(sample_notification(operation, state))  # refuses a bad plan
        assert plan.outline()[0] == "confirm", route.handler.name
        made: set[str] = set()
        for item in plan.items:
            assert {k.step for k in item.needs} <= made, (route.handler.name, item.name)
            if isinstance(item, Step):
                made.add(item.name)
                if item.makes is not None:
                    assert item.makes.step == item.name
    # handlers list builds the same plans from the table itself
    assert {r.handler for r in table.table()} >= {r.handler.name for r in routes}


def test_a_plan_whose_step_needs_a_result_no_earlier_step_makes_is_refused() -> None:
    reader = Step("read", _make, needs=(Made,))
    with pytest.raises(ValueError, match="needs Made, the result of step 'make'"):
        Plan((reader, Step("make", _make, makes=Made)))
    Plan((Step("make", _make, makes=Made), reader))  # in order: fine
    later = StepsFor("each-<x>", Made, lambda made: [])
    with pytest.raises(ValueError, match="each-<x>"):
        Plan((later,))


def test_a_step_makes_only_the_result_named_after_it() -> None:
    with pytest.raises(ValueError, match="makes Made, which is the result of step 'make'"):
        Step("not-make", _make, makes=Made)

    class Nameless(StepResult):
        pass

    with pytest.raises(ValueError, match="names no step"):
        Step("reads", _make, needs=(Nameless,))


def test_a_step_reads_only_what_it_declares() -> None:
    ctx = _ctx({"make": {"value": 7}, "other": {"value": 3}})
    declared = ctx.for_step(Step("read", _make, needs=(Made,), wants=(ClusterAccess,)))
    assert declared.result(Made) == Made(value=7)
    assert declared.result_if_made(ClusterAccess) is None  # wanted, not made: None
    with pytest.raises(RuntimeError, match="reads Other without declaring it"):
        declared.result(Other)
    with pytest.raises(RuntimeError, match="no step"):
        ctx.result(Made)  # not given to a step


def test_results_are_stored_camel_case_and_read_back_from_older_checkpoints() -> None:
    access = ClusterAccess(endpoint="https://10.0.0.1:6443", ssl_ca_cert="PEM")
    assert access.as_json() == {"endpoint": "https://10.0.0.1:6443", "sslCaCert": "PEM"}
    # an unknown key (a newer or older version's) is ignored
    assert ClusterAccess.from_json({**access.as_json(), "old": 1}) == access
    stored = {
        "masters": [
            {"name": "master5", "role": "master", "vnfcId": "v5", "nicIp": "10.0.0.5", "sshIp": "1"}
        ],
        "workers": [],
        "clusterIp": "10.0.0.5",
        "clusterFip": None,
        "endpoint": "https://10.0.0.5:6443",
    }
    found = Discovered.from_json(stored)  # a checkpoint written before day-2 changes existed
    assert found.changes is None and [n.name for n in found.touched()] == ["master5"]
    assert found.topology.endpoint == stored["endpoint"]
    assert Discovered.from_json(found.as_json()) == found


def test_routes_are_keyed_by_the_sol003_enums() -> None:
    table = RoutingTable()
    handler = default_routing().route_taken(None, None)
    assert handler is not None
    with pytest.raises(ValueError, match="unknown operation 'SCALE_OUTT'"):
        table.register(handler, operation="SCALE_OUTT", state="COMPLETED")
    with pytest.raises(ValueError, match="unknown operation state 'COMPLETE'"):
        table.register(handler, operation="SCALE", state="COMPLETE")
    with pytest.raises(ValueError, match="has no operation state"):
        table.register(handler, operation=NotificationType.CREATION, state="STARTING")
    table.register(handler, operation="SCALE", state="COMPLETED")  # strings that are names
    assert table.route_taken(LcmOperationType.SCALE, LcmOperationStateType.COMPLETED) is handler
    assert table.handler_for("SCALE", "COMPLETED") is handler
    assert table.handler_for(LcmOperationType.HEAL, "COMPLETED") is None


def test_a_handler_module_with_a_bad_route_fails_at_start(tmp_path: Any, monkeypatch: Any) -> None:
    (tmp_path / "typo_routes.py").write_text(
        "from handlers.log import LogHandler\n"
        "def register(table):\n"
        "    table.register(LogHandler(), operation='SCALE', state='COMPLETE')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError, match=r"typo_routes.*unknown operation state 'COMPLETE'"):
        RoutingTable().load_modules(["typo_routes"])
