"""The same metrics as node_readings, read from a Prometheus server's query API instead of each
node's exporters (pure; docs/quota.md "Proactive mode", --proactive-prometheus-url).

One instant query per metric, folded per node as the exporters' samples are (the hottest GPU,
the sum of the ECC errors and of the pressure counter), grouped by the label that names the node
(--proactive-prometheus-node-label, `node` by default: what a ServiceMonitor's relabelling of
`__meta_kubernetes_pod_node_name` usually gives). The answers become, per node, the samples
node_readings.reading turns into the predictor's reading.
"""

import math
from collections.abc import Mapping
from typing import Any

from .node_readings import FOLDS, PRESSURE, PRESSURE_RATE

RATE_WINDOW = "2m"  # the pressure counter's rate over it (a scrape is not aligned with a query)


def queries(node_label: str) -> dict[str, str]:
    """The PromQL instant query of each metric the predictor reads, by its family name (the
    pressure counter's as its rate, ``PRESSURE_RATE``: the server knows when each sample was
    scraped, the controller only when it asked)."""
    out = {family: f"{fold} by ({node_label}) ({family})" for family, fold in FOLDS.items() if family != PRESSURE}
    out[PRESSURE_RATE] = f"sum by ({node_label}) (rate({PRESSURE}_total[{RATE_WINDOW}]))"
    return out


def vector(answer: Mapping[str, Any], node_label: str) -> dict[str, float]:
    """An instant query's answer (``/api/v1/query``'s JSON) as value by node (ValueError: not a
    successful vector answer)."""
    data = answer.get("data") if isinstance(answer, Mapping) and answer.get("status") == "success" else None
    if not isinstance(data, dict) or data.get("resultType") != "vector" or not isinstance(data.get("result"), list):
        raise ValueError(f"not a successful instant vector answer: {str(answer)[:200]}")
    out: dict[str, float] = {}
    for item in data["result"]:
        metric, value = (item.get("metric"), item.get("value")) if isinstance(item, dict) else (None, None)
        node = metric.get(node_label) if isinstance(metric, dict) else None
        number = number_of(value[1]) if isinstance(value, list) and len(value) == 2 else None
        if node and number is not None:  # a sample without the node's label, or NaN, names nothing
            out[str(node)] = number
    return out


def number_of(text: object) -> float | None:
    """A sample's value (a string in the API's JSON); None unless a finite number."""
    try:
        number = float(str(text))
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def by_node(answers: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, float]]:
    """Each node's samples (family -> value) from the answers of every query (family -> node -> value)."""
    out: dict[str, dict[str, float]] = {}
    for family, values in answers.items():
        for node, value in values.items():
            out.setdefault(node, {})[family] = value
    return out
