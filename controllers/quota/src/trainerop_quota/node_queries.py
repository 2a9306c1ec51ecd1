"""The same metrics as node_readings, read from a Prometheus server's query API instead of each
node's exporters (pure; docs/quota.md "Proactive mode", --proactive-prometheus-url).

One instant query per metric, folded per node as the exporters' samples are (the hottest GPU,
the sum of the ECC errors and of the pressure counter), grouped by the label that names the node
(--proactive-prometheus-node-label, `node` by default: what a ServiceMonitor's relabelling of
`__meta_kubernetes_pod_node_name` usually gives). The answers become, per node, the samples
node_readings.reading turns into the predictor's reading.
"""

from collections.abc import Mapping
from typing import Any

from .node_readings import FOLDS, PRESSURE


def series(family: str) -> str:
    """A metric's series name in Prometheus (a counter's with its ``_total``)."""
    return f"{family}_total" if family == PRESSURE else family


def queries(node_label: str) -> dict[str, str]:
    """The PromQL instant query of each metric the predictor reads, by its family name."""
    return {family: f"{fold} by ({node_label}) ({series(family)})" for family, fold in FOLDS.items()}


def vector(answer: Mapping[str, Any], node_label: str) -> dict[str, float]:
    """An instant query's answer (``/api/v1/query``'s JSON) as value by node (ValueError: not a
    successful vector answer)."""
    data = answer.get("data") if answer.get("status") == "success" else None
    if not isinstance(data, dict) or data.get("resultType") != "vector":
        raise ValueError(f"not a successful instant vector answer: {str(answer)[:200]}")
    out: dict[str, float] = {}
    for item in data.get("result") or ():
        node = (item.get("metric") or {}).get(node_label)
        value = item.get("value")
        if node and isinstance(value, list) and len(value) == 2:
            out[str(node)] = float(value[1])
    return out


def by_node(answers: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, float]]:
    """Each node's samples (family -> value) from the answers of every query (family -> node -> value)."""
    out: dict[str, dict[str, float]] = {}
    for family, values in answers.items():
        for node, value in values.items():
            out.setdefault(node, {})[family] = value
    return out
