"""The benches compare like with like: the Kafka and HTTP floors write the rows our store writes."""

from __future__ import annotations

import importlib
import json
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from schemas import parse_notification
from subscriber.ingest.kafka_records import decode_record
from subscriber.store import NewEvent
from subscriber.store.events import _row_values
from tests import REPO

BENCH = REPO / "bench"


@pytest.fixture
def kafka_ingest(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCH))
    return importlib.import_module("kafka_ingest")


def _record(value: bytes, offset: int) -> SimpleNamespace:
    key = json.loads(value)["vnfInstanceId"].encode()
    return SimpleNamespace(
        topic="t",
        partition=2,
        offset=offset,
        timestamp=1_700_000_000_000,
        key=key,
        value=value,
        headers=[("h", b"v")],
    )


def test_the_kafka_floor_writes_the_row_our_store_writes(kafka_ingest: ModuleType) -> None:
    values = kafka_ingest.notifications(3)  # STARTING, PROCESSING, COMPLETED
    for offset, value in enumerate(values):
        record = _record(value, offset)
        ours = _row_values(decode_record(record, kafka_ingest.CLIENT_ID), 123.0)
        assert kafka_ingest.floor_row(record, 123.0) == ours


def test_the_http_floor_writes_the_row_our_store_writes(kafka_ingest: ModuleType) -> None:
    for raw in kafka_ingest.notifications(3):
        new = NewEvent(
            source="http", notification=parse_notification(raw), raw=raw, api_version="2.0.0"
        )
        floor = kafka_ingest.floor_values(raw, 123.0, source="http", meta=None, api_version="2.0.0")
        assert floor == _row_values(new, 123.0)


def test_the_memory_bench_posts_each_instance_its_life_in_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(BENCH))
    memory = importlib.import_module("memory")
    rounds = memory.rounds(25, 10)
    assert [len(r) for r in rounds] == [10, 10, 5]
    lives: dict[str, list[tuple[str, str, str]]] = {}
    for batch in rounds:
        for raw in batch:
            body = json.loads(raw)
            lives.setdefault(body["vnfInstanceId"], []).append(
                (body["operation"], body["operationState"], body["vnfLcmOpOccId"])
            )
    assert len(lives) == 10
    first = next(life for life in lives.values() if len(life) == 3)
    assert [(o, s) for o, s, _ in first] == [
        ("INSTANTIATE", "STARTING"),
        ("INSTANTIATE", "PROCESSING"),
        ("INSTANTIATE", "COMPLETED"),
    ]
    assert len({occ for *_, occ in first}) == 1
    assert all(len({occ for *_, occ in life}) == 1 for life in lives.values())


def test_vs_tacker_takes_its_cases_and_gives_both_packages_room_for_the_scale_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The side-by-side bench's arguments and host split (no bed is started), and the
    package room its SCALE_OUT by 3 needs, the same in both packages' flavours."""
    import yaml

    from tests.testbed import tacker_driver

    monkeypatch.syspath_prepend(str(BENCH))
    vs_tacker = importlib.import_module("vs_tacker")
    assert vs_tacker.parse([]) == ["simple", "complex", "scale_out"]
    assert vs_tacker.parse(["--cases", "scale_out"]) == ["scale_out"]
    with pytest.raises(SystemExit):
        vs_tacker.parse(["--cases", "simple,nope"])
    hosts = SimpleNamespace(hosts=list(range(6)))
    assert vs_tacker.split(vs_tacker.CASES["scale_out"], hosts) == ([0], [1, 2], [3, 4, 5])
    assert vs_tacker.split(vs_tacker.CASES["complex"], hosts) == ([0, 1, 2], [3, 4], [])

    files = tacker_driver.flavours(max_workers=vs_tacker.MAX_WORKERS)
    for flavour in ("simple", "complex"):
        vnfd = yaml.safe_load(files[f"Definitions/lccn_k8s_cluster_df_{flavour}.yaml"])
        topology = vnfd["topology_template"]
        worker = topology["node_templates"]["workerNode"]["properties"]["vdu_profile"]
        assert worker["max_number_of_instances"] == 5
        aspects = next(p for p in topology["policies"] if "scaling_aspects" in p)
        aspect = aspects["scaling_aspects"]["properties"]["aspects"]["workerNode_scale"]
        assert aspect["max_scale_level"] == 3
        hot = yaml.safe_load(files[f"BaseHOT/{flavour}/lccn_k8s_cluster_{flavour}.yaml"])
        assert hot["resources"]["workerNode"]["properties"]["max_size"] == 5


def test_vs_tacker_names_what_differs_between_the_two_drivers_results(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fidelity lines: node names, Ready, labels, /etc/hosts names and access data;
    none when the two left the same cluster."""
    monkeypatch.syspath_prepend(str(BENCH))
    vs_tacker = importlib.import_module("vs_tacker")
    node = {"ready": True, "labels": ["node-role.kubernetes.io/master="]}
    ours = {
        "nodes": {"master5": node, "worker6": {"ready": True, "labels": []}},
        "etc_hosts": {"node5": ["10.0.0.5 master5", "10.0.0.6 worker6"]},
        "access": ["interfaceInfo.endpoint", "accessInfo.bearer_token"],
    }
    assert vs_tacker.differences(ours, ours) == []
    tacker = {
        "nodes": {
            "master5": node,
            "worker6": {"ready": False, "labels": ["CIS-node=compute-1"]},
        },
        "etc_hosts": {"node5": ["10.0.0.5 master5"]},
        "access": [],
    }
    lines = vs_tacker.differences(tacker, ours)
    assert lines == [
        "worker6 Ready: Tacker False, ours True",
        "worker6 labels only Tacker's: ['CIS-node=compute-1']; only ours: []",
        "node5 /etc/hosts names: Tacker ['10.0.0.5 master5'], "
        "ours ['10.0.0.5 master5', '10.0.0.6 worker6']",
        "access data in Tacker: Tacker's none, "
        "ours ['interfaceInfo.endpoint', 'accessInfo.bearer_token']",
    ]
    tacker["nodes"] = {"master5": node}
    assert vs_tacker.differences(tacker, ours)[0] == (
        "node names: Tacker ['master5'], ours ['master5', 'worker6']"
    )


def test_vs_tacker_ceiling_adds_up_the_kubeadm_steps_of_the_timed_op_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The ceiling's denominator: the init and join steps of the timed op-occ's jobs, from
    serve's CLI contract; other steps, other op-occs and unfinished steps do not count."""
    monkeypatch.syspath_prepend(str(BENCH))
    vs_tacker = importlib.import_module("vs_tacker")

    def step(name: str, start: float, end: float | None) -> dict[str, Any]:
        return {"name": name, "startedAt": start, "finishedAt": end}

    shown = {
        1: {"jobs": [{"steps": [step("init-master-m1", 10.0, 20.0)]}]},
        2: {
            "jobs": [
                {
                    "steps": [
                        step("load-params", 0.0, 1.0),
                        step("init-master-m1", 1.0, 17.5),
                        step("join-master-m2", 17.5, 50.0),
                        step("join-workers", 50.0, 62.0),
                        step("write-back", 62.0, 63.0),
                        step("join-master-m3", 63.0, None),
                    ]
                }
            ]
        },
    }
    serve = SimpleNamespace(
        events=lambda: [
            {"id": 1, "vnfLcmOpOccId": "other"},
            {"id": 2, "vnfLcmOpOccId": "occ"},
        ],
        event=lambda event_id: shown[event_id],
    )
    assert vs_tacker.kubeadm_steps(serve, "occ") == [
        ("init-master-m1", 16.5),
        ("join-master-m2", 32.5),
        ("join-workers", 12.0),
    ]
    assert vs_tacker.kubeadm_steps(serve, "none") == []


def test_vs_tacker_timeline_lists_the_install_scripts_ended_since_the_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each host's ``/tmp/installed`` time from the timed request's 202, earliest first;
    the hosts installed before it (a SCALE_OUT's cluster) left out."""
    monkeypatch.syspath_prepend(str(BENCH))
    vs_tacker = importlib.import_module("vs_tacker")
    left = {
        "started": 1000.0,
        "installed": {"node4": 1052.25, "node2": 1010.0, "node3": 1031.5, "old": 990.0},
    }
    assert vs_tacker.timeline(left) == "node2 +10.0, node3 +31.5, node4 +52.2"
    assert vs_tacker.timeline({"started": 1000.0, "installed": {}}) == "none"
