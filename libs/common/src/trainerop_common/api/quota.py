"""The ``QuotaPolicy`` kind (cluster-scoped): what the Trainers of a set of namespaces may use,
on which capacity, in which order, at what price (docs/quota.md)."""

from typing import Annotated, Literal

from pydantic import Field

from trainerop_sdk.names import DNS_LABEL

from .base import Conditions, K8sModel, ResourceList, cel, list_map

CapacityType = Literal["spot", "on-demand"]
Preference = Literal["SpotFirst", "OnDemandFirst", "SpotOnly", "OnDemandOnly"]
PackingMode = Literal["Required", "Preferred"]

# A price per unit and hour: a plain decimal so that no float rounding reaches the status.
Price = Annotated[str, Field(pattern=r"^[0-9]{1,9}([.][0-9]{1,6})?$", max_length=16)]
PriceList = Annotated[dict[str, Price], Field(json_schema_extra={"maxProperties": 16})]


class Packing(K8sModel):
    """How close a run's pods are placed in the cluster's interconnect (docs/quota.md#topology)."""

    level: str = Field(
        min_length=1,
        max_length=317,
        description="A label key of the quota controller's --topology-levels (e.g. nvidia.com/gpu.clique): the "
        "pods go into one of its domains, or as few as hold them.",
    )
    mode: PackingMode = Field(
        default="Preferred",
        json_schema_extra={"default": "Preferred"},
        description="Required: one domain of the level or the run waits; Preferred: else the finest coarser "
        "level one domain of which holds the run, else the fewest domains.",
    )


class PluginHint(K8sModel):
    """What the placement plugin suggested for the admission (docs/placement-plugins.md)."""

    suggested: int = Field(default=0, ge=0, description="Replicas the plugin named a node for.")
    followed: int = Field(default=0, ge=0, description="Of them, placed on the node it named.")
    reason: str | None = Field(default=None, max_length=256, description="The plugin's own words.")
    failed: str | None = Field(
        default=None, max_length=256, description="Why it gave nothing usable (the built-in placement was used)."
    )


class PlacementScore(K8sModel):
    """How the admitted pods sit in the interconnect (docs/quota.md#topology)."""

    level: str | None = Field(default=None, description="The finest level one domain of which holds every pod.")
    domains: int = Field(default=0, ge=0, description="Domains of the finest level the pods span.")
    cross_neighbours: int = Field(
        default=0, ge=0, description="Neighbours in the ranks' ring that are in different finest-level domains."
    )
    plugin: PluginHint | None = Field(default=None, description="The placement plugin's hint, when one was asked.")


class NamespaceSelector(K8sModel):
    """Which namespaces a policy covers; empty selects every namespace."""

    match_labels: dict[str, str] | None = Field(
        default=None, description="Labels a namespace must all have; unset or empty: every namespace."
    )


class Budgets(K8sModel):
    """What each selected namespace may use at once, per capacity type. A capacity type without a
    budget is not used at all; a resource a budget does not name is not limited by it."""

    on_demand: ResourceList | None = Field(default=None, description="Guaranteed capacity (on-demand nodes).")
    spot: ResourceList | None = Field(default=None, description="Burst capacity (spot nodes, may be reclaimed).")


class Prices(K8sModel):
    """Price per unit and hour by resource (cpu per core, memory and ephemeral-storage per GiB,
    others such as nvidia.com/gpu per unit), for the cost estimate in status and metrics."""

    on_demand: PriceList | None = Field(default=None, description="Resource name -> price on on-demand nodes.")
    spot: PriceList | None = Field(default=None, description="Resource name -> price on spot nodes.")


class PriorityClass(K8sModel):
    """A name Trainers may give in spec.scheduling.priorityClassName: higher values are admitted first."""

    name: str = Field(
        min_length=1, max_length=63, pattern=DNS_LABEL, description="The name Trainers give (a DNS label)."
    )
    value: int = Field(ge=-1_000_000, le=1_000_000, description="Its priority; higher is admitted first.")


class ResourceAdjustment(K8sModel):
    """Resources whose per-pod requests and limits the controller may lower to fit a run."""

    resources: list[str] = Field(min_length=1, max_length=8, description="Such as cpu and memory.")
    min_percent: int = Field(default=50, ge=10, le=100, description="Never below this share of what was asked.")


class ReclaimPolicy(K8sModel):
    """What happens when a spot node is reclaimed under a running Trainer."""

    checkpoint_grace_seconds: int = Field(
        default=300,
        ge=0,
        le=3600,
        description="A Trainer with checkpoints keeps its pods this long after a reclaim notice (a termination "
        "taint) for a checkpoint to commit before it is moved; 0 moves at once.",
    )


class QuotaPolicySpec(K8sModel):
    """The namespaces governed, their budgets per capacity type, admission order and prices."""

    model_config = K8sModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                cel(
                    "self.preference != 'SpotOnly' || has(self.budgets.spot)",
                    "preference SpotOnly needs budgets.spot",
                ),
                cel(
                    "self.preference != 'OnDemandOnly' || has(self.budgets.onDemand)",
                    "preference OnDemandOnly needs budgets.onDemand",
                ),
            ]
        }
    }

    namespace_selector: NamespaceSelector | None = Field(
        default=None, description="The namespaces the policy governs; unset: every namespace."
    )
    budgets: Budgets = Field(description="Per selected namespace, per capacity type.")
    preference: Preference = Field(
        default="SpotFirst",
        description="Capacity order for the Trainers of these namespaces (a Trainer may choose its own in "
        "spec.scheduling.preference; budgets still apply).",
    )
    priority_classes: list[PriorityClass] | None = Field(
        default=None,
        description="The priorities Trainers may name in spec.scheduling.priorityClassName (unset there: 0).",
        json_schema_extra=list_map("name", 32),
    )
    prices: Prices | None = None
    adjustment: ResourceAdjustment | None = Field(
        default=None, description="Unset: per-pod resources are never changed, only the worker count (elastic)."
    )
    reclaim: ReclaimPolicy = Field(default_factory=ReclaimPolicy, json_schema_extra={"default": {}})


class Usage(K8sModel):
    """Resources in use, per capacity type."""

    on_demand: ResourceList | None = Field(default=None, description="Resource name -> quantity on on-demand nodes.")
    spot: ResourceList | None = Field(default=None, description="Resource name -> quantity on spot nodes.")


class QuotaPolicyStatus(K8sModel):
    """Written by the quota controller: totals over the namespaces the policy governs."""

    admitted_trainers: int = Field(default=0, ge=0, description="Trainers admitted and holding their budget.")
    pending_trainers: int = Field(default=0, ge=0, description="Trainers waiting for admission.")
    used: Usage | None = Field(default=None, description="Reserved by admitted Trainers, summed over namespaces.")
    conditions: Conditions | None = None


class QuotaPolicy(K8sModel):
    """What the Trainers of a set of namespaces may use, on which capacity, in which order, at what price."""

    spec: QuotaPolicySpec
    status: QuotaPolicyStatus | None = None
