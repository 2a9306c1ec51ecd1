"""Repetitions of the headline figures (issue 19: at least 3, reported as median and spread).

The first repetition of a size keeps its whole result (memory, API cost, profile); every
repetition, the first included, adds its headline times to ``repetitions`` and the summary
``median`` is recomputed. The ceiling's share is paired: each repetition's ceiling over that
repetition's operator run, then the median of those ratios. Replacements measured during the
ramps are pooled over the repetitions (one ramp has too few for a p99)."""

from __future__ import annotations

import math
import statistics
from typing import Any

from bench.measure import spread

# The times a repetition keeps, by side of a throughput result.
THROUGHPUT_TIMES = {
    "operator": (
        "all_trainers_created_seconds",
        "all_pods_created_seconds",
        "all_pods_running_seconds",
        "all_trainers_running_seconds",
    ),
    "ceiling": ("all_pods_created_seconds", "all_pods_running_seconds"),
}
KUBEFLOW_TIMES = (
    "all_jobs_created_seconds",
    "all_pods_created_seconds",
    "all_pods_running_seconds",
    "all_jobs_running_seconds",
)
STALLED = "stalled"  # how the report writes a figure whose wait stalled (None)
# The ceiling's time over ours, per repetition: named by the time compared.
SHARES = {"created": "all_pods_created_seconds", "running": "all_pods_running_seconds"}


def order(sizes: list[int], count: int) -> list[tuple[int, int]]:
    """(repetition, N) in the order they run: every size once, then again (drift over the run
    spreads over the sizes instead of landing on one)."""
    return [(rep, n) for rep in range(count) for n in sizes]


def median_spread(values: list[float | None]) -> dict[str, Any]:
    """Median, min and max of ``values``. A value None (a wait that stalled) ranks slower than any:
    the median is None once half or more stalled, the max None once one did."""
    ranked = [math.inf if v is None else v for v in values]

    def kept(x: float) -> float | None:
        return None if x == math.inf else round(x, 3)

    return {
        "median": kept(statistics.median(ranked)),
        "min": kept(min(ranked)),
        "max": kept(max(ranked)),
        "values": values,
    }


def throughput_headline(run: dict[str, Any]) -> dict[str, Any]:
    """One repetition's times and its paired shares of the ceiling."""
    out: dict[str, Any] = {side: {k: run[side][k] for k in keys} for side, keys in THROUGHPUT_TIMES.items()}
    out["of_ceiling"] = {
        name: round(run["ceiling"][key] / run["operator"][key], 3) if run["operator"][key] else 0.0
        for name, key in SHARES.items()
    }
    return out


def summarize(repetitions: list[dict[str, Any]]) -> dict[str, Any]:
    """Median and spread of every number of the repetitions, nested as they are."""
    first = repetitions[0]
    return {
        k: summarize([r[k] for r in repetitions])
        if isinstance(v, dict)
        else median_spread([None if r[k] is None else float(r[k]) for r in repetitions])
        for k, v in first.items()
    }


def record_throughput(into: dict[str, Any], run: dict[str, Any]) -> None:
    """Add ``run`` (one repetition at one N) to ``into`` (that N's result, the first repetition)."""
    into.setdefault("repetitions", []).append(throughput_headline(run))
    into["median"] = summarize(into["repetitions"])
    ramp = run["operator"].get("replacements_during_ramp") or {}
    pooled = into.setdefault("ramp_samples", {"created": [], "running": []})
    pooled["created"] += ramp.get("created_samples", [])
    pooled["running"] += ramp.get("running_samples", [])
    stages = into.setdefault("ramp_stage_samples", {})
    for stage, values in (ramp.get("stage_samples") or {}).items():
        stages[stage] = stages.get(stage, []) + values
    if pooled["created"]:
        into["operator"]["replacements_during_ramp"] = {
            "failures": len(pooled["created"]),
            "ramps": len(into["repetitions"]),
            "replacement_created_seconds": spread(pooled["created"]),
            # None when no replacement was Running before its ramp's end (as recovery.py says it)
            "replacement_running_seconds": spread(pooled["running"]) if pooled["running"] else None,
            "stages_seconds": {stage: spread(values) for stage, values in stages.items() if values},
        }


def record_kubeflow(into: dict[str, Any], run: dict[str, Any]) -> None:
    """Add one Kubeflow repetition at one N to ``into`` (that N's first)."""
    into.setdefault("repetitions", []).append({k: run[k] for k in KUBEFLOW_TIMES})
    into["median"] = summarize(into["repetitions"])
    if run.get("stalled"):  # which wait of which repetition (bench/kubeflow.py)
        into.setdefault("stalls", []).append(f"repetition {len(into['repetitions'])}: {run['stalled']}")


def _repeated(result: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any] | None:
    """The median and spread of the figure at ``path``, when the result was repeated."""
    node: Any = result.get("median")
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, dict) and "median" in node else None


def figure(result: dict[str, Any], *path: str) -> Any:
    """The median of a repeated figure, else the single run's value: ``figure(t, "operator",
    "all_pods_running_seconds")``."""
    repeated = _repeated(result, path)
    if repeated is not None:
        return repeated["median"]
    value: Any = result
    for key in path:
        value = value[key]
    return value


def spread_text(result: dict[str, Any], *path: str) -> str:
    """'233.7 (229.1 to 240.2, 3 runs)' for a repeated figure, else the single value."""
    repeated = _repeated(result, path)
    if repeated is not None and len(repeated["values"]) > 1:
        median, low, high = (STALLED if repeated[k] is None else f"{repeated[k]:g}" for k in ("median", "min", "max"))
        return f"{median} ({low} to {high}, {len(repeated['values'])} runs)"
    single = figure(result, *path)
    return STALLED if single is None else str(single)


def merged(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Several runs as one: the first's description, each N's figures from the first run that
    has them (a later run adds sizes, e.g. N = 3000 measured on its own)."""
    phases = ("throughput", "pytorchjobs", "kubeflow")
    out = {**runs[0], **{phase: {} for phase in phases}}
    for run in runs:
        for phase in phases:
            for n, figures in (run.get(phase) or {}).items():
                out[phase].setdefault(n, figures)
    out["label"] = " + ".join(str(r.get("label", "")) for r in runs)
    return out
