"""Static checks of manifests/monitoring: the files parse, and every metric that the dashboard
and the alerts query is one the operator exports.

What the operator exports is read from its registry, not from a list kept here: the modules
that define metrics are imported (every operators module that imports prometheus_client),
the scrape-time collectors are registered the way the controllers register them (with an
empty source), and ``prometheus_client.REGISTRY`` is asked for its samples' names.
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import REGISTRY
from prometheus_client.metrics import MetricWrapperBase

REPO = Path(__file__).resolve().parents[3]
MONITORING = REPO / "manifests" / "monitoring"
DASHBOARD = MONITORING / "dralloc-dashboard.json"
RULES = MONITORING / "prometheusrule.yaml"
SERVICE_MONITOR = MONITORING / "servicemonitor.yaml"
OPERATORS = REPO / "operators"

# Labels Prometheus adds to every scraped series (a ServiceMonitor's targets).
TARGET_LABELS = {"job", "instance", "namespace", "pod", "service", "endpoint", "container"}

# PromQL's functions, aggregations, keywords and operators: identifiers that are not metrics.
PROMQL_WORDS = {
    # aggregations and their modifiers
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
    "bottomk", "topk", "quantile", "limitk", "limit_ratio", "by", "without",
    # binary operators and vector matching
    "and", "or", "unless", "bool", "on", "ignoring", "group_left", "group_right",
    "offset", "atan2",
    # functions
    "abs", "absent", "absent_over_time", "ceil", "changes", "clamp", "clamp_max", "clamp_min",
    "day_of_month", "day_of_week", "day_of_year", "days_in_month", "delta", "deriv", "exp",
    "floor", "histogram_avg", "histogram_count", "histogram_fraction", "histogram_quantile",
    "histogram_stddev", "histogram_stdvar", "histogram_sum", "holt_winters", "hour", "idelta",
    "increase", "irate", "label_join", "label_replace", "ln", "log2", "log10", "minute",
    "month", "predict_linear", "rate", "resets", "round", "scalar", "sgn", "sort",
    "sort_desc", "sort_by_label", "sort_by_label_desc", "sqrt", "time", "timestamp", "vector",
    "year", "avg_over_time", "min_over_time", "max_over_time", "sum_over_time",
    "count_over_time", "quantile_over_time", "stddev_over_time", "stdvar_over_time",
    "last_over_time", "present_over_time", "mad_over_time", "double_exponential_smoothing",
    # literals and the histogram label
    "inf", "nan", "le",
}  # fmt: skip

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_GRAFANA_VARIABLE = re.compile(r"\$\{[^}]*\}|\$\w+")
_LABEL_LIST = re.compile(
    r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", re.IGNORECASE
)
_IDENTIFIER = re.compile(r"(?<![\w:.])([A-Za-z_:][\w:]*)")
_SELECTOR = re.compile(r"(?<![\w:.])([A-Za-z_:][\w:]*)\s*\{([^}]*)\}")
_MATCHER = re.compile(r"([A-Za-z_]\w*)\s*(?:=~|!~|!=|=)")


def _strip(expr: str) -> str:
    """The expression without strings, Grafana variables, label lists, matchers and ranges."""
    expr = _GRAFANA_VARIABLE.sub("x", expr)
    expr = _STRING.sub('""', expr)
    expr = _LABEL_LIST.sub(" ", expr)
    expr = re.sub(r"\{[^}]*\}", " ", expr)
    return re.sub(r"\[[^\]]*\]", " ", expr)


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects: identifiers that are not called as functions
    (``name(``) and are not PromQL's words, outside strings, matchers, ranges and label lists."""
    stripped = _strip(expr)
    names = set()
    for match in _IDENTIFIER.finditer(stripped):
        name = match.group(1)
        rest = stripped[match.end() :].lstrip()
        if rest.startswith("(") or name.lower() in PROMQL_WORDS:
            continue
        names.add(name)
    return names


def selector_labels(expr: str) -> Iterator[tuple[str, str]]:
    """``(metric, label)`` for every matcher ``metric{label="..."}`` in an expression."""
    expr = _GRAFANA_VARIABLE.sub("x", expr)
    for match in _SELECTOR.finditer(_STRING.sub('""', expr)):
        for label in _MATCHER.findall(match.group(2)):
            yield match.group(1), label


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ("rate(foo_total[5m])", {"foo_total"}),
        ('sum by (result) (rate(a_total{result!="x",le="1"}[$__rate_interval]))', {"a_total"}),
        ("histogram_quantile(0.99, sum by (le) (rate(h_bucket[5m])))", {"h_bucket"}),
        ("max(g) == 0", {"g"}),
        ("absent(up_metric)", {"up_metric"}),
        ("a / on(pod) group_left(node) b", {"a", "b"}),
        ("x unless x offset 15m", {"x"}),
        ("sum(increase(c[24h])) or vector(0)", {"c"}),
        ("max(d) > 15 * 60", {"d"}),
        ('label_replace(m, "dst", "$1", "src", "(.*)")', {"m"}),
        ("clamp_min(e, 1e-3) > bool 2", {"e"}),
    ],
)
def test_metric_names_are_extracted_from_promql(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


# --- what the operator exports -------------------------------------------------------------


def _metric_modules() -> list[str]:
    modules = []
    for path in sorted(OPERATORS.rglob("*.py")):
        if path.name == "__main__.py" or "prometheus_client" not in path.read_text():
            continue
        parts = path.relative_to(REPO).with_suffix("").parts
        modules.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return modules


@pytest.fixture(scope="module")
def exported() -> dict[str, set[str]]:
    """Every sample name the operator's registry serves, with its label names."""
    modules = _metric_modules()
    assert "operators.metrics" in modules
    # A labelled metric serves no sample before its first use: its label names are read
    # from the metric objects (prometheus_client keeps them as ``_labelnames``).
    declared: dict[str, set[str]] = {}
    for module_name in modules:
        module = importlib.import_module(module_name)
        for name, value in vars(module).items():
            # Collectors the controllers register at start-up (claims, gated pods), as they do.
            if name.startswith("register_") and name.endswith("_gauge"):
                value(list)
            elif isinstance(value, MetricWrapperBase):
                declared[value._name] = set(value._labelnames)
    samples: dict[str, set[str]] = {}
    for family in REGISTRY.collect():
        names = {family.name}
        if family.type == "counter":
            names |= {family.name + "_total", family.name + "_created"}
        elif family.type in ("histogram", "gaugehistogram"):
            names |= {family.name + s for s in ("_bucket", "_sum", "_count", "_created")}
        elif family.type == "summary":
            names |= {family.name + s for s in ("_sum", "_count", "_created")}
        labels = {label for sample in family.samples for label in sample.labels}
        labels |= declared.get(family.name, set()) | set(getattr(family, "_labelnames", ()))
        if family.type in ("histogram", "gaugehistogram"):
            labels.add("le")
        for name in names | {sample.name for sample in family.samples}:
            samples.setdefault(name, set()).update(labels)
    return samples


def test_the_registry_holds_the_operators_metrics(exported: dict[str, set[str]]) -> None:
    for name in (
        "dralloc_pod_allocations_total",
        "dralloc_leader",
        "dralloc_double_allocations_total",
        "dralloc_devices_held_twice",
        "dralloc_gated_pod_oldest_seconds",
        "dralloc_workqueue_depth",
        "dynamic_resource_allocation_resource_claims",
        "dralloc_gc_pause_seconds_total",
    ):
        assert name in exported


def _known_label(label: str, metric: str, exported: dict[str, set[str]]) -> bool:
    # A labelled child appears only once used; the families' label names are the truth.
    return label in TARGET_LABELS or label in exported[metric] or label == "le"


# --- the dashboard -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


def dashboard_exprs(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """``(where, PromQL)`` of every panel target and every query variable."""
    exprs = []
    for panel in _panels(dashboard["panels"]):
        for target in panel.get("targets", []):
            exprs.append((f"panel {panel['title']!r}", target["expr"]))
    for variable in dashboard["templating"]["list"]:
        if variable["type"] != "query":
            continue
        query = variable["query"]
        query = query["query"] if isinstance(query, dict) else query
        # label_values(SELECTOR, label) takes a series selector; label_values(label) none.
        match = re.fullmatch(r"\s*label_values\((.*),\s*\w+\s*\)\s*", query)
        exprs.append((f"variable {variable['name']!r}", match.group(1) if match else query))
    return exprs


def test_dashboard_is_a_grafana_dashboard(dashboard: dict[str, Any]) -> None:
    assert dashboard["title"] and dashboard["uid"]
    ids = [p["id"] for p in _panels(dashboard["panels"])]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    data_panels = [p for p in _panels(dashboard["panels"]) if p["type"] != "row"]
    assert len(data_panels) >= 10
    for panel in data_panels:
        assert panel["targets"], f"panel {panel['title']!r} has no query"
        assert panel["datasource"]["uid"] == "${datasource}"
    assert any(v["type"] == "datasource" for v in dashboard["templating"]["list"])


def test_dashboard_queries_only_exported_metrics(
    dashboard: dict[str, Any], exported: dict[str, set[str]]
) -> None:
    unknown = []
    for where, expr in dashboard_exprs(dashboard):
        names = metric_names(expr)
        assert names, f"{where}: no metric found in {expr!r}"
        unknown += [f"{where}: {name}" for name in sorted(names - exported.keys())]
        unknown += [
            f"{where}: {metric}{{{label}}}"
            for metric, label in selector_labels(expr)
            if metric in exported and not _known_label(label, metric, exported)
        ]
    assert not unknown, "not exported by the operator:\n" + "\n".join(unknown)


def test_dashboard_covers_the_operators_figures(dashboard: dict[str, Any]) -> None:
    used = set().union(*(metric_names(e) for _, e in dashboard_exprs(dashboard)))
    for name in (
        "dralloc_pod_allocations_total",
        "dralloc_pod_allocation_duration_seconds_bucket",
        "dralloc_gated_pods",
        "dralloc_gated_pod_oldest_seconds",
        "dralloc_pod_gated_duration_seconds_bucket",
        "dralloc_workqueue_depth",
        "dralloc_leader",
        "dralloc_double_allocations_total",
        "device_taint_eviction_controller_pod_deletions_total",
        "dralloc_api_requests_total",
        "dralloc_cache_sync_seconds",
    ):
        assert name in used, f"no panel shows {name}"


# --- the alerts ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rules() -> list[dict[str, Any]]:
    rule = yaml.safe_load(RULES.read_text())
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["kind"] == "PrometheusRule"
    return [r for group in rule["spec"]["groups"] for r in group["rules"]]


def test_alerts_query_only_exported_metrics(
    rules: list[dict[str, Any]], exported: dict[str, set[str]]
) -> None:
    unknown = []
    for rule in rules:
        names = metric_names(str(rule["expr"]))
        assert names, f"{rule['alert']}: no metric found"
        unknown += [f"{rule['alert']}: {name}" for name in sorted(names - exported.keys())]
        unknown += [
            f"{rule['alert']}: {metric}{{{label}}}"
            for metric, label in selector_labels(str(rule["expr"]))
            if metric in exported and not _known_label(label, metric, exported)
        ]
    assert not unknown, "not exported by the operator:\n" + "\n".join(unknown)


_DURATION = re.compile(r"(\d+(ms|s|m|h|d|w|y))+")


def test_every_alert_has_a_duration_a_severity_and_annotations(
    rules: list[dict[str, Any]],
) -> None:
    names = [rule["alert"] for rule in rules]
    assert len(names) == len(set(names))
    for rule in rules:
        assert _DURATION.fullmatch(str(rule.get("for", ""))), f"{rule['alert']}: for: duration"
        assert rule["labels"]["severity"] in ("critical", "warning", "info"), rule["alert"]
        for annotation in ("summary", "description", "runbook"):
            assert rule["annotations"].get(annotation), f"{rule['alert']}: no {annotation}"


def test_the_alerts_the_operator_needs(rules: list[dict[str, Any]]) -> None:
    by_metric: dict[str, list[str]] = {}
    for rule in rules:
        for name in metric_names(str(rule["expr"])):
            by_metric.setdefault(name, []).append(rule["alert"])
    assert "dralloc_gated_pod_oldest_seconds" in by_metric  # pods gated too long
    assert "dralloc_pod_allocations_total" in by_metric  # allocation errors
    assert "dralloc_double_allocations_total" in by_metric  # the checker's findings
    assert "dralloc_devices_held_twice" in by_metric  # a double that lasts
    assert "dralloc_fenced_total" in by_metric  # another allocator's records
    leader = {r["alert"]: r["expr"] for r in rules if "dralloc_leader" in metric_names(r["expr"])}
    assert any("absent(" in expr for expr in leader.values()), "operator down: absent()"
    assert any("== 0" in expr for expr in leader.values()), "no leader"


# --- the ServiceMonitor and the kustomization ----------------------------------------------


def test_service_monitor_selects_the_metrics_service() -> None:
    monitor = yaml.safe_load(SERVICE_MONITOR.read_text())
    services = yaml.safe_load_all((REPO / "manifests" / "base" / "services.yaml").read_text())
    service = next(s for s in services if s and s["metadata"]["name"] == "dralloc-metrics")
    assert monitor["kind"] == "ServiceMonitor"
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    assert service["metadata"]["namespace"] in monitor["spec"]["namespaceSelector"]["matchNames"]
    ports = {p["name"] for p in service["spec"]["ports"]}
    for endpoint in monitor["spec"]["endpoints"]:
        assert endpoint["port"] in ports
        assert endpoint["path"] == service["metadata"]["annotations"]["prometheus.io/path"]


def test_kustomization_ships_everything_and_the_dashboard_configmap() -> None:
    kustomization = yaml.safe_load((MONITORING / "kustomization.yaml").read_text())
    on_disk = {p.name for p in MONITORING.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == on_disk
    (generator,) = kustomization["configMapGenerator"]
    assert generator["files"] == [DASHBOARD.name]
    assert generator["options"]["labels"] == {"grafana_dashboard": "1"}
