"""The trainer controller's decision core: pure, table-tested, no I/O.

Today it decides the gate and the status skeleton: whether every deployed concern has said
yes for the current generation (DESIGN §3 "Gates"), the phase, and the worker selector the
scale subresource reports. Pod creation builds on this.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from trainerop_common.api import GROUP
from trainerop_common.api.base import Condition
from trainerop_common.api.trainer import Phase, TopologyStatus, TrainerSpec
from trainerop_common.conditions import Desired, find

CONDITIONS = ("Created", "Running", "Restarting", "Stalled", "Succeeded", "Failed", "Suspended")
OWNED_FIELDS = ("phase", "topology", "progress")


@dataclass(frozen=True)
class Observed:
    name: str
    generation: int
    spec: TrainerSpec
    conditions: Sequence[Condition]
    gates: Sequence[str]  # condition types of the deployed concerns


@dataclass(frozen=True)
class Decision:
    status: dict[str, Any]
    conditions: tuple[Desired, ...]


def worker_selector(name: str) -> str:
    return f"trainer-name={name},{GROUP}/replica-type=worker"


def gate_wait(conditions: Sequence[Condition], gates: Sequence[str], generation: int) -> list[str]:
    """One line per closed gate, saying why it is closed."""
    waiting = []
    for gate in gates:
        cond = find(conditions, gate)
        if cond is None or cond.observed_generation != generation:
            waiting.append(f"{gate} (not yet reported for generation {generation})")
        elif cond.status != "True":
            waiting.append(f"{gate} ({cond.reason}: {cond.message})" if cond.message else f"{gate} ({cond.reason})")
    return waiting


def decide(obs: Observed) -> Decision:
    topology = TopologyStatus(selector=worker_selector(obs.name)).to_k8s()
    phase: Phase
    if obs.spec.run_policy.suspend:
        phase = "Suspended"
        conditions = (
            Desired.false("Created", "Suspended", "spec.runPolicy.suspend is true; set it to false to start"),
            Desired.true("Suspended", "SuspendedByUser", "spec.runPolicy.suspend is true"),
        )
    else:
        phase = "Pending"
        waiting = gate_wait(obs.conditions, obs.gates, obs.generation)
        created = (
            Desired.false("Created", "WaitingForGates", "waiting for " + "; ".join(waiting))
            if waiting
            else Desired.false("Created", "GatesOpen", "all gates are open")
        )
        conditions = (created, Desired.false("Suspended", "NotSuspended"))
    return Decision(status={"phase": phase, "topology": topology}, conditions=conditions)
