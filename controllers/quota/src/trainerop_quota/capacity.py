"""What the cluster has: nodes by capacity type, what pods use, what a Trainer's pods ask (pure).

Capacity types come from well-known node labels; a node without one is on-demand. A node is
lost when it is gone or NotReady for the grace period, and being reclaimed when it carries a
termination taint (the notice spot providers give before they take a node back).
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from trainerop_common.api import GROUP
from trainerop_common.api.base import PodContribution, ResourceRequirements, Toleration
from trainerop_common.api.quota import CapacityType
from trainerop_common.api.trainer import TrainerSpec
from trainerop_common.contracts import TRAINING_CONTAINER
from trainerop_common.quantity import parse_quantity
from trainerop_common.topology import Role, override_name, role_override

from .taints import Taint

Resources = dict[str, Decimal]

OUR_CAPACITY_LABEL = f"{GROUP}/capacity-type"
# label -> the value that means spot (any other value, or no label, is on-demand)
SPOT_LABELS = {
    "karpenter.sh/capacity-type": "spot",
    "cloud.google.com/gke-spot": "true",
    "eks.amazonaws.com/capacityType": "SPOT",
    OUR_CAPACITY_LABEL: "spot",
}
# Our own notice: set by hand, or by proactive mode with the value "predicted" (proactive.py).
OUR_RECLAIM_TAINT = f"{GROUP}/reclaim"
# Taints that announce a node's end: the pods on it should save their work and move.
RECLAIM_TAINTS = (
    "karpenter.sh/disrupted",
    "karpenter.sh/disruption",
    "cloud.google.com/impending-node-termination",
    "aws-node-termination-handler/spot-itn",
    "aws-node-termination-handler/asg-lifecycle-termination",
    "ToBeDeletedByClusterAutoscaler",
    "node.kubernetes.io/out-of-service",
    OUR_RECLAIM_TAINT,
)
SPOT_TOLERATIONS = (
    {"key": "cloud.google.com/gke-spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"},
    {"key": "karpenter.sh/capacity-type", "operator": "Equal", "value": "spot", "effect": "NoSchedule"},
    {"key": OUR_CAPACITY_LABEL, "operator": "Equal", "value": "spot", "effect": "NoSchedule"},
)


def capacity_type(labels: Mapping[str, str]) -> CapacityType:
    return "spot" if any(labels.get(k) == v for k, v in SPOT_LABELS.items()) else "on-demand"


def placement(kind: CapacityType) -> PodContribution:
    """Pod constraints that keep a run on nodes of one capacity type, whichever label marks them."""
    if kind == "spot":
        terms = [{"matchExpressions": [{"key": k, "operator": "In", "values": [v]}]} for k, v in SPOT_LABELS.items()]
        return PodContribution(
            affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}},
            tolerations=[Toleration.model_validate(t) for t in SPOT_TOLERATIONS],
            labels={OUR_CAPACITY_LABEL: kind},
        )
    not_spot = [{"key": k, "operator": "NotIn", "values": [v]} for k, v in SPOT_LABELS.items()]
    return PodContribution(
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": not_spot}]
                }
            }
        },
        labels={OUR_CAPACITY_LABEL: kind},
    )


@dataclass(frozen=True)
class NodeInfo:
    name: str
    kind: CapacityType
    allocatable: Resources
    labels: Mapping[str, str] = field(default_factory=dict)
    schedulable: bool = True  # Ready, not cordoned, no reclaim taint
    lost: str | None = None  # why its pods are gone (deleted, NotReady past the grace period)
    reclaimed: str | None = None  # why its pods will go (a termination taint)
    taints: tuple[Taint, ...] = ()  # NoSchedule and NoExecute: only pods that tolerate them go there
    predicted: bool = False  # reclaimed because proactive mode predicts it will degrade
    drained: str | None = None  # why a run with checkpoints on it moves: cordoned (a drain)


@dataclass(frozen=True)
class PodInfo:
    """A pod that holds (or will hold) resources: not finished."""

    node: str  # "" while unscheduled
    requests: Resources
    trainer_uid: str | None = None
    role: str = ""
    index: int = 0
    admission: str | None = None  # the grant id it was created under
    deleting: bool = False
    succeeded: bool = False  # its replica is done: it holds no resources and needs no place


def _add(into: Resources, more: Mapping[str, Decimal], times: Decimal | int = 1) -> None:
    for name, amount in more.items():
        into[name] = into.get(name, Decimal(0)) + amount * times


def total(parts: Iterable[tuple[Mapping[str, Decimal], int]]) -> Resources:
    out: Resources = {}
    for requests, count in parts:
        _add(out, requests, count)
    return out


def resource_parts(resources: Any) -> Mapping[str, Any]:
    """A container's ``resources`` (none: empty); ValueError where it or its requests or limits is
    not an object (an override's fields are not checked by the API server's schema)."""
    resources = resources or {}
    if not isinstance(resources, Mapping) or not all(
        isinstance(resources.get(part) or {}, Mapping) for part in ("requests", "limits")
    ):
        raise ValueError(f"resources {resources!r} are not requests and limits")
    return resources


def container_requests(resources: Mapping[str, Any] | None) -> Resources:
    """requests, with limits standing in where a request is missing (as the API server defaults)."""
    resources = resource_parts(resources)
    out = {name: parse_quantity(v) for name, v in (resources.get("limits") or {}).items()}
    out.update({name: parse_quantity(v) for name, v in (resources.get("requests") or {}).items()})
    return out


def _objects(items: Any) -> list[Mapping[str, Any]]:
    """The objects of a list of a pod spec (an override's entry that is not one is left to the API server)."""
    return [item for item in items or () if isinstance(item, Mapping)] if isinstance(items, list) else []


def _raise_to(into: Resources, more: Mapping[str, Decimal]) -> None:
    for name, amount in more.items():
        into[name] = max(into.get(name, Decimal(0)), amount)


def is_sidecar(container: Mapping[str, Any]) -> bool:
    """An init container that runs for the pod's whole life (KEP-753): restartPolicy Always."""
    return container.get("restartPolicy") == "Always"


def spec_requests(spec: Mapping[str, Any]) -> Resources:
    """What the scheduler counts for a pod of ``spec`` (its effective requests, KEP-753): the init
    containers in order, each sidecar adding to the sidecars started so far; a regular init
    container asks its own requests plus those sidecars. Per resource, the larger of the largest
    regular init container's and the containers' sum plus every sidecar's; plus the overhead and
    one ``pods``. Limits stand in for missing requests (``container_requests``)."""
    running: Resources = {}  # the containers and the sidecars: held for the pod's whole life
    for c in _objects(spec.get("containers")):
        _add(running, container_requests(c.get("resources")))
    started: Resources = {}  # the sidecars started so far
    initializing: Resources = {}  # the most any regular init container asks, with the sidecars before it
    for c in _objects(spec.get("initContainers")):
        own = container_requests(c.get("resources"))
        if is_sidecar(c):
            _add(started, own)
            _add(running, own)
        else:
            _raise_to(initializing, total(((own, 1), (started, 1))))
    out = dict(running)
    _raise_to(out, initializing)
    _add(out, container_requests({"requests": spec.get("overhead")}))  # the RuntimeClass's, read as requests
    out["pods"] = Decimal(1)
    return out


def pod_requests(pod: Mapping[str, Any]) -> Resources:
    """What the scheduler counts for a pod (``spec_requests``)."""
    return spec_requests(pod.get("spec") or {})


def _as_dict(r: ResourceRequirements | None) -> dict[str, Any]:
    return r.model_dump(exclude_none=True) if r is not None else {}


def override_spec(spec: TrainerSpec, role: Role) -> Mapping[str, Any]:
    """The pod spec fragment of the role's podTemplateOverrides (empty without one)."""
    own = (role_override(spec, role) or {}).get("spec")
    return own if isinstance(own, Mapping) else {}


CLAIMS_FIX = "the quota cannot count resource claims; request devices as extended resources (nvidia.com/gpu) instead"


def uncounted_claims(spec: TrainerSpec, role: Role) -> list[str]:
    """The resource claims (Dynamic Resource Allocation) of the role's override, each by its field:
    what a claim holds is not among a pod's requests, so the quota cannot count it."""
    own = override_spec(spec, role)
    path = f"spec.podTemplateOverrides.{override_name(role)}.spec"
    out = [f"{path}.resourceClaims: {CLAIMS_FIX}"] if own.get("resourceClaims") else []
    for kind in ("containers", "initContainers"):
        for i, c in enumerate(own.get(kind) or ()):
            resources = c.get("resources") if isinstance(c, Mapping) else None
            if isinstance(resources, Mapping) and resources.get("claims"):
                out.append(f"{path}.{kind}[{i}].resources.claims: {CLAIMS_FIX}")
    return out


def sidecars_first(inits: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """An override's init containers in the order a planned pod is counted in: its sidecars first.
    One named like an init container the trainer adds itself is merged into that one, which runs
    ahead of the override's own, so the order in the override is not the pod's; counted with every
    sidecar started before every regular init container, a planned pod never asks less than it will."""
    return [c for c in inits if is_sidecar(c)] + [c for c in inits if not is_sidecar(c)]


def role_requests(
    spec: TrainerSpec, role: Role, profile: PodContribution | None, grant: ResourceRequirements | None = None
) -> Resources:
    """One pod of ``role`` (``spec_requests``): the training container as the trainer builds it (the
    profile's resources, the Trainer's own over them, the grant over those, the role's override over
    all), the other containers and the init containers the override adds (its sidecars counted
    first: ``sidecars_first``). Raises ValueError for what cannot be counted: a malformed quantity,
    a resource claim (``uncounted_claims``)."""
    claims = uncounted_claims(spec, role)
    if claims:
        raise ValueError("; ".join(claims))
    own = override_spec(spec, role)
    main = TRAINING_CONTAINER[spec.framework]
    containers = _objects(own.get("containers"))
    layers: list[Mapping[str, Any]] = [
        _as_dict(profile.resources if profile else None),
        _as_dict(spec.resources),
        _as_dict(grant),
    ]
    layers += [resource_parts(c.get("resources")) for c in containers if c.get("name") == main]
    merged: dict[str, dict[str, Any]] = {"requests": {}, "limits": {}}
    for layer in layers:
        for part in ("requests", "limits"):
            merged[part].update(layer.get(part) or {})
    planned = {
        **own,
        "containers": [{"name": main, "resources": merged}, *(c for c in containers if c.get("name") != main)],
        "initContainers": sidecars_first(_objects(own.get("initContainers"))),
    }
    return spec_requests(planned)


def adjusted(
    spec: TrainerSpec, profile: PodContribution | None, names: Sequence[str], percent: int
) -> ResourceRequirements | None:
    """The Trainer's per-pod resources with ``names`` lowered to ``percent`` (None at 100%)."""
    if percent >= 100:
        return None
    base: dict[str, dict[str, Any]] = {"requests": {}, "limits": {}}
    for layer in (_as_dict(profile.resources if profile else None), _as_dict(spec.resources)):
        for part in ("requests", "limits"):
            base[part].update(layer.get(part) or {})
    out: dict[str, dict[str, str]] = {"requests": {}, "limits": {}}
    for part in ("requests", "limits"):
        for name in names:
            if name in base[part]:
                amount = parse_quantity(base[part][name]) * percent / 100
                out[part][name] = quantity_text(amount)
    if not out["requests"] and not out["limits"]:
        return None
    return ResourceRequirements.model_validate({k: v for k, v in out.items() if v})


def quantity_text(amount: Decimal) -> str:
    """A quantity string for ``amount``: whole units, else milli-units (rounded down)."""
    if amount == amount.to_integral_value():
        return str(int(amount))
    return f"{int(amount * 1000)}m"


def node_usage(pods: Sequence[PodInfo]) -> dict[str, Resources]:
    out: dict[str, Resources] = {}
    for pod in pods:
        if pod.node and not pod.succeeded:
            _add(out.setdefault(pod.node, {}), pod.requests)
    return out


def fits(free: Mapping[str, Decimal], want: Mapping[str, Decimal]) -> bool:
    return all(free.get(name, Decimal(0)) >= amount for name, amount in want.items() if amount > 0)


def subtract(free: Resources, used: Mapping[str, Decimal]) -> None:
    _add(free, used, -1)
