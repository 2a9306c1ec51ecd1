"""Proactive mode's predictor (pure; docs/design/disruption.md, decision 4): from a node's recent
readings, is it about to degrade? A predicted node is tainted as reclaimed, so its runs save a
checkpoint and move before it does.

Signals are judged three ways. Trended ones (temperature, memory copy utilisation, power, memory
pressure) take the median of the last three readings, so one spike moves nothing, and the
least-squares slope of the longest recent run of those medians that a line fits well (R² of 0.98:
a steady climb, not a step to a new level or a flapping sensor) to predict the value one lead
time ahead: hot when the median now or that prediction reaches the threshold. XID errors are counted (hot at
a burst in the window), double-bit ECC errors are final (any increase of the counter). A node is
predicted after ``confirm`` hot evaluations in a row, at once for a counted or final signal, and
clears only after ``clear`` evaluations in a row with every signal cool: trended ones below the
threshold minus its margin, no XID in the window, no new ECC error.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from statistics import median
from typing import Any, Literal

from trainerop_common.api import GROUP

from .capacity import OUR_RECLAIM_TAINT

Trended = Literal["temperature", "memoryCopy", "power", "memoryPressure"]
Signal = Literal["temperature", "memoryCopy", "power", "memoryPressure", "xid", "ecc"]
TRENDED: tuple[Trended, ...] = ("temperature", "memoryCopy", "power", "memoryPressure")
UNITS: Mapping[Signal, str] = {
    "temperature": "°C",
    "memoryCopy": "%",
    "power": "W",
    "memoryPressure": "s/s stalled",
    "xid": "",
    "ecc": "errors",
}
RECLAIM_KEY = OUR_RECLAIM_TAINT
PREDICTED = "predicted"  # the taint's value when proactive mode set it
PREDICTED_TAINT = {"key": RECLAIM_KEY, "value": PREDICTED, "effect": "NoSchedule"}
PREDICTION_ANNOTATION = f"{GROUP}/prediction"  # on a predicted node: what predicted it
SMOOTHING = 3  # readings a median is taken over
MIN_TREND = 4  # medians a slope is fitted to (fewer: the median alone is judged)
MIN_FIT = 0.98  # R² a run of medians must reach to be projected (bench/proactive.py: a step or a flap does not)


@dataclass(frozen=True)
class Reading:
    """One node's readings at one time (seconds): a trended signal's value (hottest GPU), the last
    XID code (0: none), the double-bit ECC error counter."""

    at: float
    values: Mapping[Signal, float]


@dataclass(frozen=True)
class Limit:
    threshold: float
    margin: float  # cool again below threshold - margin


@dataclass(frozen=True)
class Rules:
    limits: Mapping[Trended, Limit]  # a trended signal without a limit is not judged
    lead_seconds: float = 300.0  # how far ahead a trend is projected
    window: int = 10  # readings judged (30 s apart by default: 5 minutes)
    xid_burst: int = 3  # XID readings in the window that make it hot
    confirm: int = 2  # hot evaluations in a row before a trended signal predicts the node
    clear: int = 5  # cool evaluations in a row before a predicted node is cleared


DEFAULT_RULES = Rules(
    limits={
        "temperature": Limit(85.0, 5.0),  # datacenter GPUs slow down from the high 80s
        "memoryCopy": Limit(95.0, 10.0),
        "memoryPressure": Limit(0.2, 0.1),  # a fifth of the time some task stalled on memory
    }
)


@dataclass(frozen=True)
class Heat:
    signal: Signal
    final: bool  # predicts the node at once (a counted or final signal)
    detail: str  # the readings and the prediction, for Events


@dataclass(frozen=True)
class NodeState:
    predicted: bool = False
    since: float | None = None  # when it was predicted
    reason: str = ""  # the heats that predicted it
    hot: int = 0  # hot evaluations in a row
    cool: int = 0  # cool evaluations in a row
    heats: tuple[Heat, ...] = field(default_factory=tuple)  # this evaluation's
    signals: tuple[Signal, ...] = ()  # those that predicted it: cool only once they are read again


def is_ours(taint: Mapping[str, Any]) -> bool:
    """The taint proactive mode sets (a reclaim taint someone else set has another value)."""
    return taint.get("key") == RECLAIM_KEY and taint.get("value") == PREDICTED


def _fmt(value: float) -> str:
    return f"{value:.3g}" if abs(value) < 10 else f"{value:.1f}".removesuffix(".0")


def _slope(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares slope of value over time (units per second), and how well a line fits the
    points (R², 0 to 1: a steady climb fits, a step to a new level or a flapping sensor does not)."""
    n = len(points)
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    spread = sum((t - mt) ** 2 for t, _ in points)
    if not spread:
        return 0.0, 0.0
    slope = sum((t - mt) * (v - mv) for t, v in points) / spread
    total = sum((v - mv) ** 2 for _, v in points)
    residual = sum((v - mv - slope * (t - mt)) ** 2 for t, v in points)
    return slope, (1 - residual / total) if total else 0.0


def _steady_slope(medians: Sequence[tuple[float, float]]) -> float:
    """The slope of the longest recent run of medians (at least MIN_TREND) that a line fits
    (R² ≥ MIN_FIT): a steady climb, even one that began within the window; 0 when none does (a
    step to a new level, a flapping sensor, noise on a flat line)."""
    for k in range(len(medians), MIN_TREND - 1, -1):
        slope, fit = _slope(medians[-k:])
        if fit >= MIN_FIT:
            return slope
    return 0.0


def _medians(history: Sequence[Reading], signal: Signal) -> list[tuple[float, float]]:
    seen = [(r.at, r.values[signal]) for r in history if signal in r.values]
    return [
        (seen[i][0], median(v for _, v in seen[i - SMOOTHING + 1 : i + 1])) for i in range(SMOOTHING - 1, len(seen))
    ]


def trend(history: Sequence[Reading], signal: Trended, limit: Limit, lead: float) -> tuple[Heat | None, bool]:
    """A trended signal's heat (None when not hot) and whether it is cool (below the margin)."""
    medians = _medians(history, signal)
    if not medians:
        return None, True
    now = medians[-1][1]
    slope = _steady_slope(medians)
    ahead = now + max(slope, 0.0) * lead
    cool = now < limit.threshold - limit.margin and ahead < limit.threshold
    if max(now, ahead) < limit.threshold:
        return None, cool
    unit = UNITS[signal]
    recent = ", ".join(_fmt(r.values[signal]) for r in history[-SMOOTHING:] if signal in r.values)
    detail = f"{signal} {recent} {unit} (median {_fmt(now)})"
    if now < limit.threshold:
        detail += f", rising {_fmt(slope * 60)} {unit}/min: {_fmt(ahead)} in {_fmt(lead / 60)} min"
    return Heat(signal, False, f"{detail} ≥ {_fmt(limit.threshold)}"), False


def counted(history: Sequence[Reading], rules: Rules) -> list[Heat]:
    """XID bursts and new double-bit ECC errors in the window."""
    heats = []
    codes = [int(r.values["xid"]) for r in history if r.values.get("xid")]
    if len(codes) >= rules.xid_burst:
        heats.append(Heat("xid", True, f"{len(codes)} XID errors in the window (codes {sorted(set(codes))})"))
    ecc = [r.values["ecc"] for r in history if "ecc" in r.values]
    if len(ecc) >= 2 and ecc[-1] > ecc[-2]:
        heats.append(Heat("ecc", True, f"double-bit ECC errors {_fmt(ecc[-2])} → {_fmt(ecc[-1])}"))
    return heats


def assess(history: Sequence[Reading], state: NodeState, rules: Rules = DEFAULT_RULES) -> NodeState:
    """The node's state after one more evaluation of its readings (oldest first)."""
    window = history[-rules.window :]
    if not window:
        return state
    heats, all_cool = counted(window, rules), True
    for signal in TRENDED:
        if signal in rules.limits:
            heat, cool = trend(window, signal, rules.limits[signal], rules.lead_seconds)
            heats += [heat] if heat is not None else []
            all_cool = all_cool and cool
    xid_seen = any(r.values.get("xid") for r in window)
    # a signal that predicted the node and is no longer read (its exporter died, often with the
    # GPU) is unknown, not cool
    still_read = all(s in window[-1].values for s in state.signals)
    cool = not heats and all_cool and not xid_seen and still_read
    hot = state.hot + 1 if heats else 0
    after = replace(state, hot=hot, cool=state.cool + 1 if cool else 0, heats=tuple(heats))
    if not state.predicted and heats and (hot >= rules.confirm or any(h.final for h in heats)):
        signals = tuple(h.signal for h in heats)
        return replace(
            after, predicted=True, since=window[-1].at, reason="; ".join(h.detail for h in heats), signals=signals
        )
    if state.predicted and after.cool >= rules.clear:
        return replace(after, predicted=False, since=None, reason="", signals=())
    return after
