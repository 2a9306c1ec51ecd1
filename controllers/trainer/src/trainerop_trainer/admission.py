"""What the trainer controller's validating webhook refuses (pure; the adapter is in controller.py).

Beyond the CRD's schema and CEL rules (which hold the topology's rules for the framework, so that
`kubectl scale` is judged too): one pod must fit some node, podTemplateOverrides may set only
what :mod:`trainerop_trainer.overrides` allows, a model source must be one the initializer reads
(the schema's pattern is coarser), and per-role overrides of a role the run does not have are
pointed out.
"""

from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from trainerop_common.admission import Request, Verdict
from trainerop_common.api.trainer import TrainerSpec
from trainerop_common.pod_security import RESTRICTED
from trainerop_common.quantity import parse_quantity
from trainerop_common.topology import override_name, role_counts, role_override

from .model import model_problem
from .overrides import override_problems

SHOWN_NODES = 3


def unused_overrides(spec: TrainerSpec) -> list[str]:
    """Warnings about podTemplateOverrides of roles this run has no replica of."""
    counts = role_counts(spec)
    return [
        f"spec.podTemplateOverrides.{override_name(role)} is unused: this {spec.framework} run has no {role} "
        f"replica ({', '.join(f'{r}: {n}' for r, n in counts.items())})"
        for role, count in counts.items()
        if role_override(spec, role) and not count
    ]


def pod_requests(spec: TrainerSpec) -> dict[str, Decimal]:
    """What one pod asks a node for: its requests, and limits where no request is given (the API
    server defaults a missing request to the limit)."""
    resources = spec.resources
    if resources is None:
        return {}
    wanted = {k: parse_quantity(v) for k, v in (resources.limits or {}).items()}
    wanted |= {k: parse_quantity(v) for k, v in (resources.requests or {}).items()}
    return {k: v for k, v in wanted.items() if v > 0}


def _offers(node: Mapping[str, Any]) -> dict[str, Decimal]:
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    offers: dict[str, Decimal] = {}
    for name, value in allocatable.items():
        try:
            offers[name] = parse_quantity(value)
        except ValueError:
            continue  # a node reporting nonsense offers nothing of it
    return offers


def _show(resources: Mapping[str, Decimal], names: Sequence[str]) -> str:
    return ", ".join(f"{n} {format(resources.get(n, Decimal(0)).normalize(), 'f')}" for n in names)


def check_node_fit(wanted: Mapping[str, Decimal], nodes: Sequence[Mapping[str, Any]]) -> str | None:
    """Why no node could ever hold one pod, or None if one can (or the pod asks for nothing)."""
    if not wanted:
        return None
    names = sorted(wanted)
    best: list[tuple[int, str, dict[str, Decimal]]] = []
    for node in nodes:
        offers = _offers(node)
        short = sum(1 for n in names if offers.get(n, Decimal(0)) < wanted[n])
        if short == 0:
            return None
        best.append((short, str(node["metadata"]["name"]), offers))
    asked = _show(wanted, names)
    if not best:
        return f"spec.resources: the cluster has no nodes, so no pod asking for {asked} can run; add nodes first"
    closest = "; ".join(f"{name}: {_show(offers, names)}" for _, name, offers in sorted(best)[:SHOWN_NODES])
    return (
        f"spec.resources: no node of the cluster can hold one pod asking for {asked} (closest: {closest}); "
        "lower the requests, or, where an autoscaler adds larger nodes on demand, run the trainer controller "
        "with --no-admission-node-fit"
    )


def validate(
    request: Request, spec: TrainerSpec, nodes: Sequence[Mapping[str, Any]] | None, level: str = RESTRICTED
) -> Verdict:
    """The verdict on a Trainer in a namespace of Pod Security ``level``; ``nodes`` None: do not
    judge node fit (turned off, or unchanged)."""
    unfit = check_node_fit(pod_requests(spec), nodes) if nodes is not None else None
    warnings = unused_overrides(spec) if request.changed("podTemplateOverrides") or request.changed("topology") else []
    refused = override_problems(spec, level) if request.changed("podTemplateOverrides") else []
    model = model_problem(spec.model) if request.changed("model") else None
    problems = (*refused, *((unfit,) if unfit else ()), *((model,) if model else ()))
    return Verdict(problems=problems, warnings=tuple(warnings))
