"""The Grafana dashboard and the metrics catalogue (docs/metrics.md) against the metrics the
controllers really register: no panel queries a metric or label that does not exist, and the
catalogue lists exactly the registered metrics."""

import importlib
import json
import re
from pathlib import Path

import pytest
from prometheus_client import REGISTRY, Histogram
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.registry import Collector

from deploy.dashboards import generate as dashboard

REPO = Path(__file__).resolve().parents[2]
CONTROLLERS = ("trainer", "profile", "quota", "checkpoint", "audit", "verify")
PROMQL_WORDS = {"sum", "rate", "increase", "histogram_quantile", "by", "without", "avg", "max", "min", "count"}


def collectors() -> dict[str, Collector]:
    """Every sample name the controllers register, to the metric that has it."""
    for c in CONTROLLERS:
        importlib.import_module(f"trainerop_{c}.controller")
    return dict(REGISTRY._names_to_collectors)  # prometheus-client keeps no public index of names


def metric_names(expr: str) -> set[str]:
    bare = re.sub(r'"[^"]*"', "", expr)
    bare = re.sub(r"\{[^}]*\}|\[[^\]]*\]", "", bare)
    bare = re.sub(r"\b(?:by|without)\s*\([^)]*\)", "", bare)
    return {t for t in re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", bare) if t not in PROMQL_WORDS}


def grouping_labels(expr: str) -> set[str]:
    found: set[str] = set()
    for group in re.findall(r"\b(?:by|without)\s*\(([^)]*)\)", expr):
        found |= {label.strip() for label in group.split(",") if label.strip()}
    for matchers in re.findall(r"\{([^}]*)\}", expr):
        found |= set(re.findall(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)", matchers))
    return found


def labels_of(collector: Collector) -> set[str]:
    own = set(getattr(collector, "_labelnames", ()))
    return own | {"le"} if isinstance(collector, Histogram) else own


def documented() -> dict[str, set[str]]:
    """Metric -> labels, from the table "Every metric" of docs/metrics.md."""
    text = (REPO / "docs" / "metrics.md").read_text()
    rows = re.findall(r"^\| `([a-z_]+)` \| (?:counter|gauge|histogram) \| ([^|]*) \|", text, re.M)
    return {name: set(re.findall(r"`([a-z_]+)`", labels)) for name, labels in rows}


def test_the_committed_dashboard_is_the_generated_one() -> None:
    assert dashboard.main(["--check"]) == 0, "run python deploy/dashboards/generate.py"


def test_every_panel_queries_metrics_and_labels_that_exist() -> None:
    known = collectors()
    board = json.loads(dashboard.OUT.read_text())
    panels = [p for p in board["panels"] if p["type"] != "row"]
    assert len(panels) >= 30
    for panel in panels:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            expr = target["expr"]
            names = metric_names(expr)
            assert names, (panel["title"], expr)
            missing = names - set(known)
            assert not missing, f"panel {panel['title']!r} queries {sorted(missing)}, which no controller registers"
            offered = set().union(*(labels_of(known[n]) for n in names))
            assert grouping_labels(expr) <= offered, (panel["title"], expr, offered)


def test_the_catalogue_lists_exactly_the_registered_metrics_with_their_labels() -> None:
    registered = {}
    for c in set(collectors().values()):
        if isinstance(c, MetricWrapperBase):  # not the process/platform/gc collectors
            name = c._name + ("_total" if c._type == "counter" else "")  # no public accessor
            registered[name] = labels_of(c) - {"le"}
    assert documented() == registered


@pytest.mark.parametrize(
    ("expr", "names", "labels"),
    [
        ('sum by (controller, result) (rate(x_count{result!="ok"}[5m]))', {"x_count"}, {"controller", "result"}),
        ("histogram_quantile(0.95, sum by (le) (rate(y_bucket[$__rate_interval])))", {"y_bucket"}, {"le"}),
        ("a_total * 60", {"a_total"}, set()),
    ],
)
def test_the_query_parser_finds_metrics_and_labels(expr: str, names: set[str], labels: set[str]) -> None:
    assert metric_names(expr) == names
    assert grouping_labels(expr) == labels
