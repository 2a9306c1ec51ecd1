"""Proactive mode, per node (pure; docs/design/disruption.md, decision 4): each scrape of a node's
exporters becomes a reading, its window is judged by :func:`.proactive.assess`, and a node that
becomes predicted gets the reclaim taint with the value ``predicted`` (and the prediction in an
annotation, which the plan's reclaim message carries); a node that clears loses it. Only the taint
this controller sets is ever removed."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .node_readings import PRESSURE, reading
from .proactive import (
    DEFAULT_RULES,
    PREDICTED,
    PREDICTED_TAINT,
    RECLAIM_KEY,
    NodeState,
    Reading,
    Rules,
    assess,
    is_ours,
)

Change = Literal["predicted", "cleared"]


@dataclass(frozen=True)
class Watched:
    """A node's recent readings, its predictor state, and its memory-pressure counter last read."""

    history: tuple[Reading, ...] = ()
    state: NodeState = field(default_factory=NodeState)
    pressure: tuple[float, float] | None = None  # (counter, when)


def observe(w: Watched, at: float, samples: Mapping[str, float], rules: Rules = DEFAULT_RULES) -> Watched:
    """The node after one scrape at ``at`` (seconds): its reading added to the window and judged."""
    history = (*w.history, reading(at, samples, w.pressure))[-rules.window :]
    pressure = (samples[PRESSURE], at) if PRESSURE in samples else w.pressure
    return Watched(history, assess(history, w.state, rules), pressure)


def change(before: NodeState, after: NodeState) -> Change | None:
    if after.predicted and not before.predicted:
        return "predicted"
    if before.predicted and not after.predicted:
        return "cleared"
    return None


def taints_after(taints: Sequence[Mapping[str, Any]], predicted: bool) -> list[dict[str, Any]] | None:
    """The node's spec.taints with the prediction's taint added or removed; None: already so. A
    reclaim taint someone else set (another value) is left as it is, and stands for ours (the
    API server keeps one taint per key and effect)."""
    present = any(is_ours(t) for t in taints)
    if present == predicted or (predicted and any(same_slot(t) for t in taints)):
        return None
    if predicted:
        return [dict(t) for t in taints] + [dict(PREDICTED_TAINT)]
    return [dict(t) for t in taints if not is_ours(t)]


def same_slot(taint: Mapping[str, Any]) -> bool:
    return taint.get("key") == RECLAIM_KEY and taint.get("effect") == PREDICTED_TAINT["effect"]


def node_message(node: str, state: NodeState) -> str:
    """The Event on a node that is predicted to degrade, or cleared."""
    if state.predicted:
        return (
            f"node {node} is predicted to degrade: {state.reason}; tainted {RECLAIM_KEY}={PREDICTED}:NoSchedule so "
            "nothing new lands on it, and the runs on it save a checkpoint and move"
        )
    return f"node {node} reads cool again: taint {RECLAIM_KEY}={PREDICTED} removed"
