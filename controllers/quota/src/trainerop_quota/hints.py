"""A placement plugin's suggestion as the plan reads it (pure): a node per replica and preferred
node-affinity terms, which the plan tries first and validates like any placement
(docs/placement-plugins.md)."""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from .packing import Site, Slot

# Kubernetes' node selector operators (Gt and Lt compare integers).
OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
MAX_REASON = 256  # characters of the plugin's reason kept in status


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str
    values: tuple[str, ...] = ()


@dataclass(frozen=True)
class Term:
    weight: int
    requirements: tuple[Requirement, ...]


@dataclass(frozen=True)
class Suggestion:
    """What the plugin answered for one generation of a run; ``failed`` says why it answered
    nothing usable (a timeout, an error): the built-in placement is used."""

    generation: int
    nodes: Mapping[Slot, str] = field(default_factory=dict)
    preferred: tuple[Term, ...] = ()
    reason: str = ""
    failed: str = ""


def _integer(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def matches(labels: Mapping[str, str], r: Requirement) -> bool:
    """Whether a node's labels meet one requirement, as the scheduler judges it."""
    value = labels.get(r.key)
    if r.operator == "Exists":
        return value is not None
    if r.operator == "DoesNotExist":
        return value is None
    if r.operator == "In":
        return value is not None and value in r.values
    if r.operator == "NotIn":
        return value is None or value not in r.values
    have, bound = _integer(value or ""), _integer(r.values[0]) if len(r.values) == 1 else None
    if have is None or bound is None:
        return False
    return have > bound if r.operator == "Gt" else r.operator == "Lt" and have < bound


def weights(terms: Sequence[Term], sites: Iterable[Site]) -> dict[str, int]:
    """Each node's preference: the summed weights of the terms it meets (the scheduler's rule)."""
    out: dict[str, int] = {}
    for site in sites:
        total = sum(t.weight for t in terms if all(matches(site.labels, r) for r in t.requirements))
        if total:
            out[site.name] = total
    return out


def problems(nodes: Mapping[Slot, str], terms: Sequence[Term]) -> list[str]:
    """What is wrong with a suggestion's form (its nodes are judged by the plan)."""
    out = [
        f"operator {r.operator!r} of {r.key!r}" for t in terms for r in t.requirements if r.operator not in OPERATORS
    ]
    out += [f"weight {t.weight} (1 to 100)" for t in terms if not 1 <= t.weight <= 100]
    out += [f"{role} {index}: no node" for (role, index), node in nodes.items() if not node]
    return out
