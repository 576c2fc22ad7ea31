"""The chart's Grafana dashboard: rendered only when asked for, valid JSON, and every query it
makes names metrics (and labels) that the daemons register, read from the code itself, so a
renamed metric or label fails here rather than as an empty panel."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase

from controller.queue_metrics import QueueMetrics
from kubeletplugin.metrics import PluginMetrics
from tests.deploy.chart import CHART, find, render, render_text

DASHBOARD_LABEL = "grafana_dashboard"
ON = {"grafanaDashboard": {"enabled": True}}
METRIC = re.compile(r"\bdra_[a-z0-9_]+")
# Label names in `by (...)`/`without (...)` and in selectors `{name=~"..."}`.
GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")
MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
LENDING_METRICS = (
    "dra_gpu_lending_open",
    "dra_gpu_lent_seconds_total",
    "dra_gpu_borrowed_gpu_seconds_total",
    "dra_gpu_take_backs_total",
    "dra_gpu_take_back_interference_seconds_bucket",
)


def _registered() -> dict[str, frozenset[str]]:
    """Every exposed metric name of the plugin and the controller's queues -> its labels."""
    plugin = PluginMetrics()
    queues = QueueMetrics(CollectorRegistry())
    found: dict[str, frozenset[str]] = {}
    for holder in (plugin, queues):
        for metric in vars(holder).values():
            if not isinstance(metric, MetricWrapperBase):
                continue
            labels = frozenset(metric._labelnames)
            for suffix in SUFFIXES.get(metric._type, ("",)):
                found[metric._name + suffix] = labels | (
                    {"le"} if suffix == "_bucket" else frozenset()
                )
    return found


def _dashboard_configmaps(value_set: str) -> list[dict[str, Any]]:
    return [
        o
        for o in find(render(value_set), "ConfigMap")
        if (o["metadata"].get("labels") or {}).get(DASHBOARD_LABEL) == "1"
    ]


def _queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, PromQL) of every panel target and query variable."""
    queries = [
        (panel["title"], target["expr"])
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
    ]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]
            queries.append(
                (f"${variable['name']}", query["query"] if isinstance(query, dict) else query)
            )
    return queries


def test_the_dashboard_is_off_by_default() -> None:
    assert _dashboard_configmaps("defaults") == []
    rendered = render_text({})
    assert [p for p, text in rendered.items() if "grafana" in p and text.strip()] == []
    assert any("grafana" in p and text.strip() for p, text in render_text(ON).items())


def test_enabled_it_is_one_configmap_with_the_dashboard_file() -> None:
    (configmap,) = _dashboard_configmaps("custom-driver")
    assert configmap["metadata"]["namespace"] == "dra-system"
    (text,) = configmap["data"].values()
    assert json.loads(text) == json.loads((CHART / "dashboards" / "gpu-usage.json").read_text())


def test_every_panel_queries_metrics_and_labels_the_code_registers() -> None:
    dashboard = json.loads((CHART / "dashboards" / "gpu-usage.json").read_text())
    registered = _registered()
    panels = [p for p in dashboard["panels"] if p.get("type") != "row"]
    assert panels and all(p.get("targets") for p in panels)
    used: set[str] = set()
    for title, expr in _queries(dashboard):
        names = METRIC.findall(expr)
        assert names, f"{title}: {expr} reads no dra_ metric"
        unknown = [n for n in names if n not in registered]
        assert not unknown, f"{title}: {unknown} not registered by the plugin or the controller"
        labels = set().union(*(registered[n] for n in names))
        named = {x.strip() for group in GROUPING.findall(expr) for x in group.split(",")}
        named |= set(MATCHER.findall(expr))
        named |= set(re.findall(r"label_values\([^,]+,\s*([a-zA-Z_]+)\)", expr))
        assert named <= labels, f"{title}: labels {sorted(named - labels)} are not on {names}"
        used.update(names)
    # What the dashboard is for: the plugin's per-device usage and the queues' idle GPUs.
    for metric in ("dra_device_utilization_percent", "dra_device_memory_used_bytes"):
        assert metric in used
    assert "dra_device_idle_seconds" in used
    assert "dra_controller_queue_idle_gpus" in used
    # And lending (docs/overcommit.md): open, lent, borrowed, taken back, and how fast.
    for metric in LENDING_METRICS:
        assert metric in used, metric


@pytest.mark.parametrize("field", ["uid", "title", "schemaVersion"])
def test_the_dashboard_has_what_grafana_imports_by(field: str) -> None:
    dashboard = json.loads((CHART / "dashboards" / "gpu-usage.json").read_text())
    assert dashboard[field]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def _dashboard() -> dict[str, Any]:
    dashboard: dict[str, Any] = json.loads((CHART / "dashboards" / "gpu-usage.json").read_text())
    return dashboard


def test_the_lending_panels_sit_in_their_own_row_below_the_rest() -> None:
    """Grafana groups a row's panels by position: those below a row header up to the next one
    belong to it, so the lending panels must all lie below the "Lending" row, and no panel
    above it may read lending metrics."""
    panels = _dashboard()["panels"]
    (row,) = [p for p in panels if p.get("type") == "row" and p["title"] == "Lending"]
    below = [p for p in panels if p["gridPos"]["y"] > row["gridPos"]["y"]]
    above = [p for p in panels if p["gridPos"]["y"] < row["gridPos"]["y"]]
    lending = {n for p in below for t in p["targets"] for n in METRIC.findall(t["expr"])}
    assert lending == set(LENDING_METRICS)
    assert all(n.startswith("dra_gpu_") for n in lending)
    assert not any("dra_gpu_" in t["expr"] for p in above for t in p["targets"])


def test_no_two_panels_overlap_and_all_fit_the_24_column_grid() -> None:
    cells: dict[tuple[int, int], str] = {}
    for panel in _dashboard()["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = panel["title"]
