"""The growth plot of a suite run (issue 19): seconds per Trainer to all pods running, and each
controller's memory, against N, for the operator, the plain client's ceiling and Kubeflow v1.
Flat lines mean no super-linear term. Usage: ``python -m bench.plot RESULTS.json [MORE.json ...]``
writes RESULTS.png next to the first, with the sizes of all of them (the suite draws each run's
own after it)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import matplotlib

from bench.repeats import figure, merged

matplotlib.use("Agg")  # files only: no display on a CI machine
import matplotlib.pyplot as plt


def series(results: dict[str, Any]) -> dict[str, dict[int, float]]:
    """Seconds per Trainer (or job) to all pods running (the median of repetitions), by N, for each
    of the three."""
    out: dict[str, dict[int, float]] = {"Trainer Operator": {}, "ceiling (plain client)": {}, "Kubeflow v1": {}}
    for n, t in results.get("throughput", {}).items():
        out["Trainer Operator"][int(n)] = figure(t, "operator", "all_pods_running_seconds") / int(n)
        out["ceiling (plain client)"][int(n)] = figure(t, "ceiling", "all_pods_running_seconds") / int(n)
    for n, k in (results.get("kubeflow") or {}).items():
        if (seconds := figure(k, "all_pods_running_seconds")) is not None:  # None: its wait stalled
            out["Kubeflow v1"][int(n)] = seconds / int(n)
    return {name: points for name, points in out.items() if points}


def memory(results: dict[str, Any]) -> dict[str, dict[int, float]]:
    """Resident MiB by N: each controller of ours, and Kubeflow's operator."""
    out: dict[str, dict[int, float]] = {}
    for n, t in results.get("throughput", {}).items():
        for ctl, mib in t["operator"]["memory_mib"].items():
            out.setdefault(ctl, {})[int(n)] = mib
    for n, k in (results.get("kubeflow") or {}).items():
        out.setdefault("Kubeflow v1", {})[int(n)] = k["memory_mib"]
    return out


def plot(results: dict[str, Any], to: Path) -> Path:
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, data, title, unit in (
        (left, series(results), "Time per Trainer to all pods running", "seconds per Trainer"),
        (right, memory(results), "Resident memory per controller", "MiB"),
    ):
        for name, points in data.items():
            ns = sorted(points)
            ax.plot(ns, [points[n] for n in ns], marker="o", label=name)
        ax.set_xscale("log")
        ax.set_xlabel("N (Trainers x 4 workers)")
        ax.set_ylabel(unit)
        ax.set_title(title)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{results.get('label', '')} {results.get('date', '')}: {results['machine']['cores']} cores")
    fig.tight_layout()
    fig.savefig(to, dpi=100)
    plt.close(fig)
    return to


def main(argv: list[str]) -> int:
    """``RESULTS.json [MORE.json ...]``: the plot of them together, next to the first."""
    sources = [Path(a) for a in argv]
    print(plot(merged([json.loads(s.read_text()) for s in sources]), sources[0].with_suffix(".png")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
