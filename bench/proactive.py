#!/usr/bin/env python3
"""Proactive mode's predictor on recorded-style traces: lead time and false moves (prints figures).

    python bench/proactive.py --node-days 30 [--out bench/results/proactive]

No cluster: the traces go through the quota controller's own code as its adapter feeds it, one
scrape every 30 s (``proactive_nodes.observe``: the exporter text's reading, the window, the
predictor with its default rules and hysteresis). Traces, from a fixed seed:
- failing nodes: GPU temperature on a healthy walk, then a ramp of 1 to 6 °C a minute until it
  crosses 85 °C (the throttling line); the figure is the lead time, from the prediction (the
  taint) to the moment the readings themselves cross the line, and how many ramps were predicted
  only after crossing (or never);
- healthy nodes, ``--node-days`` of them: a walk around 70 °C with sensor spikes (one reading at
  95-105 °C, a few a day), a flapping sensor (alternate readings off by 25 °C for a few minutes a
  day) and busy hours hovering at 80-84 °C; every prediction there is a false move;
- XID bursts (3 non-zero readings within 5 minutes) and single XIDs: bursts predicted at once,
  single XIDs never.
A move's cost on the real node (a save at the asked step, the pods stopped and started, the steps
lost) is measured by tests/e2e/test_disruption.py, which prints it.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from trainerop_quota.proactive import DEFAULT_RULES
from trainerop_quota.proactive_nodes import Watched, observe

SCRAPE = 30.0  # seconds between readings (--proactive-interval-seconds)
DAY = int(24 * 3600 / SCRAPE)  # readings a node-day
LINE = DEFAULT_RULES.limits["temperature"].threshold
TEMP = "DCGM_FI_DEV_GPU_TEMP"
XID = "DCGM_FI_DEV_XID_ERRORS"


def play(samples: Sequence[dict[str, float]]) -> Iterator[bool]:
    """Whether the node is predicted after each scrape."""
    watched = Watched()
    for i, sample in enumerate(samples):
        watched = observe(watched, i * SCRAPE, sample)
        yield watched.state.predicted


def healthy_day(rng: random.Random) -> list[dict[str, float]]:
    """A node-day of a healthy node: a walk around 70 °C, spikes, flapping, busy hours."""
    temps, t = [], 70.0
    for _ in range(DAY):
        t = min(80.0, max(60.0, t + rng.gauss(0, 0.4) + (70.0 - t) * 0.02))
        temps.append(t)
    for _ in range(rng.randint(2, 6)):  # one-reading sensor spikes
        temps[rng.randrange(DAY)] = rng.uniform(95, 105)
    for _ in range(rng.randint(0, 2)):  # a flapping sensor for a few minutes
        start = rng.randrange(DAY - 20)
        for i in range(start, start + rng.randint(6, 20), 2):
            temps[i] += 25.0
    for _ in range(rng.randint(1, 3)):  # a busy hour hovering just under the line
        start = rng.randrange(DAY - 120)
        for i in range(start, start + 120):
            temps[i] = rng.uniform(80, 84)
    return [{TEMP: v, XID: 0.0} for v in temps]


def ramp(rng: random.Random) -> tuple[list[dict[str, float]], int]:
    """A failing node: an hour healthy, then a ramp; and the scrape at which the readings cross."""
    temps = [70.0 + rng.gauss(0, 0.5) for _ in range(120)]
    per_scrape = rng.uniform(1.0, 6.0) * SCRAPE / 60
    t = temps[-1]
    while len(temps) < 120 + 200:
        t += per_scrape + rng.gauss(0, 0.3)
        temps.append(t)
    crossed = next(i for i, v in enumerate(temps) if i >= 120 and v >= LINE)
    return [{TEMP: v, XID: 0.0} for v in temps], crossed


def xid(rng: random.Random, burst: bool) -> list[dict[str, float]]:
    """An hour with one XID, or with a burst of three within five minutes."""
    codes = [0.0] * 120
    start = rng.randrange(60)
    for i in [start, start + 3, start + 7] if burst else [start]:
        codes[i] = 79.0
    return [{TEMP: 70.0, XID: c} for c in codes]


def run(node_days: int, ramps: int, seed: int) -> dict[str, object]:
    rng = random.Random(seed)
    false_moves = 0
    for _ in range(node_days):
        flags = list(play(healthy_day(rng)))
        false_moves += sum(1 for a, b in zip([False, *flags], flags, strict=False) if b and not a)
    leads, late = [], 0
    for _ in range(ramps):
        samples, crossed = ramp(rng)
        at = next((i for i, p in enumerate(play(samples)) if p), None)
        if at is None or at >= crossed:
            late += 1
        else:
            leads.append((crossed - at) * SCRAPE)
    bursts = sum(any(play(xid(rng, True))) for _ in range(100))
    singles = sum(any(play(xid(rng, False))) for _ in range(100))
    return {
        "node_days": node_days,
        "false_moves_per_node_day": round(false_moves / node_days, 4),
        "ramps": ramps,
        "lead_seconds_p50": statistics.median(leads) if leads else None,
        "lead_seconds_min": min(leads) if leads else None,
        "ramps_predicted_late_or_never": late,
        "xid_bursts_predicted_of_100": bursts,
        "single_xids_predicted_of_100": singles,
        "rules": {"threshold_c": LINE, "lead_seconds": DEFAULT_RULES.lead_seconds, "window": DEFAULT_RULES.window},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--node-days", type=int, default=30, help="healthy node-days played (default 30)")
    parser.add_argument("--ramps", type=int, default=200, help="failing nodes played (default 200)")
    parser.add_argument("--seed", type=int, default=1205)
    parser.add_argument("--out", help="write <out>.json and <out>.md too")
    args = parser.parse_args()
    print(f"playing {args.node_days} healthy node-days and {args.ramps} thermal ramps...", flush=True)
    figures = run(args.node_days, args.ramps, args.seed)
    for key, value in figures.items():
        print(f"{key} {value}")
    if args.out:
        Path(f"{args.out}.json").write_text(json.dumps(figures, indent=1) + "\n")
        rows = "\n".join(f"| `{k}` | {v} |" for k, v in figures.items() if k != "rules")
        Path(f"{args.out}.md").write_text(f"# Proactive mode's predictor\n\n| figure | value |\n|---|---|\n{rows}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
