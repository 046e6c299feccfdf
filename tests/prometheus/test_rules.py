"""``deploy/``'s alert rules and dashboard against the real Prometheus (Debian's 2.42).

* ``promtool check rules`` and ``promtool test rules`` (the rules' unit tests,
  ``deploy/prometheus/tests/``);
* every metric the rules and the dashboard name is one a live ``serve`` exports, and
  every dashboard query is valid PromQL to the real Prometheus;
* a real Prometheus scrapes a real ``serve`` (its metrics listener,
  ``http.metrics_host:metrics_port``) and fires ``LccnEventsFailed`` once an event
  fails, ``LccnCallbacksRefused`` once a notification is refused.
"""

from __future__ import annotations

import asyncio
import json
import re
import urllib.parse
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests import REPO
from tests.conftest import free_port
from tests.factories import op_occ
from tests.operate_handler import handler_env
from tests.programs import ServeProcess
from tests.testbed import prometheus

RULES = REPO / "deploy" / "prometheus" / "lccn-subscriber.rules.yml"
RULE_TESTS = REPO / "deploy" / "prometheus" / "tests"
DASHBOARD = REPO / "deploy" / "grafana" / "lccn-subscriber.json"

# Names in PromQL that are no metric: keywords and modifiers.
_KEYWORDS = frozenset(
    {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right"}
    | {"bool", "offset", "inf", "nan"}
)
# What Grafana substitutes before a query reaches Prometheus.
_GRAFANA_VARS = {"$__rate_interval": "1m", "$__interval": "15s", "$job": ".*", "$instance": ".*"}


@pytest.fixture(autouse=True)
def _installed() -> None:
    why = prometheus.missing()
    if why is not None:
        pytest.fail(why)


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads (``label_values(m, l)``: ``m``)."""
    text = re.sub(r"\blabel_values\(\s*([a-zA-Z_:][\w:]*)[^)]*\)", r"\1", expr)
    text = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', " ", text)  # strings
    text = re.sub(r"\$\{?\w+\}?", " ", text)  # Grafana variables
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges, subqueries
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for match in re.finditer(r"(?<![\w.:])([a-zA-Z_:][\w:]*)(\s*\()?", text):
        name, call = match.group(1), match.group(2)
        if call is None and name.lower() not in _KEYWORDS:
            names.add(name)
    return names


def exported_names(exposition: str) -> set[str]:
    """The sample names an exposition's families give Prometheus (a family with no sample
    yet, say a labelled counter nothing moved, counts by its type)."""
    suffixes = {
        "counter": ("_total", "_created"),
        "histogram": ("_bucket", "_sum", "_count", "_created"),
        "summary": ("_sum", "_count", "_created", ""),
        "gauge": ("",),
    }
    names = set()
    for family in text_string_to_metric_families(exposition):
        names |= {family.name + s for s in suffixes.get(family.type, ("",))}
        names |= {s.name for s in family.samples}
    return names


def dashboard_queries() -> list[str]:
    """Every PromQL expression of the dashboard: panels' targets (rows' panels too) and
    the template variables' queries."""
    board = json.loads(DASHBOARD.read_text())
    found: list[str] = []

    def panels(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for item in items:
            yield item
            yield from panels(item.get("panels", []))

    for panel in panels(board["panels"]):
        found += [t["expr"] for t in panel.get("targets", []) if t.get("expr")]
    for var in board["templating"]["list"]:
        query = var.get("query")
        if isinstance(query, dict):
            found.append(query["query"])
    return found


def rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def test_metric_names_reads_promql() -> None:
    """The checker below finds what an expression reads, and nothing else."""
    expr = (
        'histogram_quantile(0.95, sum by (le, step) (rate(a_bucket{job=~"$job",x="y"}'
        "[$__rate_interval]))) / on (job) group_left b:rec offset 5m > bool 1 "
        'and count(c == 0) or vector(0) unless label_replace(d, "dst", "$1", "src", "(.*)")'
    )
    assert metric_names(expr) == {"a_bucket", "b:rec", "c", "d"}
    assert metric_names('label_values(lccn_ready{job=~"$job"}, instance)') == {"lccn_ready"}


def test_promtool_checks_the_rules_and_runs_their_unit_tests() -> None:
    checked = prometheus.promtool("check", "rules", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS" in checked.stdout
    tests = sorted(RULE_TESTS.glob("*.yml"))
    assert tests
    ran = prometheus.promtool("test", "rules", *(t.name for t in tests), cwd=RULE_TESTS)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    alerts = {r["alert"] for r in rules() if "alert" in r}
    tested = set(re.findall(r"alertname: (\w+)", "".join(t.read_text() for t in tests)))
    assert alerts == tested  # every alert has unit tests


@pytest.fixture(scope="module")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    """``serve`` (ingest and its worker) with a handler whose job fails, its metrics on a
    listener of their own, as an operator runs it."""
    tmp = tmp_path_factory.mktemp("serve")
    fault, runs_file = tmp / "fault", tmp / "runs.txt"
    fault.touch()
    env = {
        **handler_env(fault, runs_file),
        "LCCN_DISPATCH__REORDER_WINDOW": "0.05",
        "LCCN_HTTP__METRICS_HOST": "127.0.0.1",
        "LCCN_HTTP__METRICS_PORT": str(free_port()),
    }
    proc = ServeProcess(tmp, env=env).start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def metrics_target(serve: ServeProcess) -> str:
    return f"127.0.0.1:{serve.env['LCCN_HTTP__METRICS_PORT']}"


@pytest.fixture
async def ready(serve: ServeProcess, metrics_target: str) -> str:
    """The exposition of ``serve``'s metrics listener, once it is ready."""
    async with asyncio.timeout(60), aiohttp.ClientSession() as http:
        while True:
            assert serve.alive(), serve.log_text()[-4000:]
            try:
                async with http.get(f"http://{metrics_target}/readyz") as resp:
                    if resp.status == 200:
                        break
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
        async with http.get(f"http://{metrics_target}/metrics") as resp:
            assert resp.status == 200
            return await resp.text()


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, metrics_target: str
) -> Iterator[prometheus.Prometheus]:
    running = prometheus.start(
        tmp_path_factory.mktemp("prometheus"), [metrics_target], [RULES], interval=0.5
    )
    yield running
    running.stop()


def test_rules_and_dashboard_name_only_what_serve_exports(
    ready: str, server: prometheus.Prometheus
) -> None:
    exported = exported_names(ready)
    assert {"lccn_worker_up", "lccn_ready", "lccn_http_responses_total"} <= exported
    recorded = {r["record"] for r in rules() if "record" in r}
    for rule in rules():
        unknown = metric_names(rule["expr"]) - exported - recorded
        assert not unknown, f"{rule.get('alert') or rule.get('record')}: {unknown}"
    queries = dashboard_queries()
    assert len(queries) > 20
    for query in queries:
        names = metric_names(query)
        assert names, query
        assert names <= exported, f"{query}: {names - exported} not exported"
        # And the real Prometheus takes it, variables substituted as Grafana does.
        if not query.startswith("label_values"):
            for var, value in _GRAFANA_VARS.items():
                query = query.replace(var, value)
            server.api(f"query?query={urllib.parse.quote(query, safe='')}")


async def _alert(
    server: prometheus.Prometheus, name: str, state: str, within: float = 30
) -> dict[str, Any]:
    async with asyncio.timeout(within):
        while True:
            found = [a for a in server.alerts() if a["labels"]["alertname"] == name]
            if found and found[0]["state"] == state:
                return found[0]
            await asyncio.sleep(0.2)


async def test_prometheus_fires_the_alerts_of_a_failed_event_and_a_refused_callback(
    ready: str, serve: ServeProcess, server: prometheus.Prometheus
) -> None:
    # Prometheus scrapes serve and evaluates the rules: nothing fires yet.
    async with asyncio.timeout(30):
        while not server.api("query?query=lccn_failed_events")["result"]:
            await asyncio.sleep(0.2)
    names = {a["labels"]["alertname"] for a in server.alerts()}
    assert not names & {"LccnEventsFailed", "LccnCallbacksRefused", "LccnWorkerDown"}

    async with aiohttp.ClientSession() as http:
        async with http.post(serve.url, json=op_occ(state="COMPLETED")) as resp:
            assert resp.status == 204  # its job fails (the handler's fault file)
        async with http.post(serve.url, json={"notificationType": "nonsense"}) as resp:
            assert resp.status == 400

    failed = await _alert(server, "LccnEventsFailed", "firing")
    assert failed["labels"]["severity"] == "warning"
    assert failed["labels"]["job"] == prometheus.JOB
    assert float(failed["value"]) == 1
    assert failed["annotations"]["summary"] == "1 event(s) failed for good"
    refused = await _alert(server, "LccnCallbacksRefused", "firing")
    assert refused["labels"]["severity"] == "warning"
    assert serve.rows("SELECT status FROM events") == [("failed",)]
