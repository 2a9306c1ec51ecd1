"""The ``QuotaPolicy`` kind (cluster-scoped): how much a set of namespaces may train with."""

from pydantic import Field

from .base import Conditions, K8sModel, ResourceList


class NamespaceSelector(K8sModel):
    """Which namespaces a policy covers; empty selects every namespace."""

    match_labels: dict[str, str] | None = None


class SpotPolicy(K8sModel):
    """Whether Trainers may run on spot capacity and how the nodes are recognised."""

    enabled: bool = True
    capacity_type_label: str = Field(default="trainer.operator.kubeflow.org/capacity-type", min_length=1)
    max_fraction_percent: int = Field(default=100, ge=0, le=100, description="Share of workers allowed on spot.")


class QuotaPolicySpec(K8sModel):
    namespace_selector: NamespaceSelector | None = None
    hard: ResourceList = Field(description="Total resources the selected namespaces' Trainers may request.")
    spot: SpotPolicy = Field(default_factory=SpotPolicy, json_schema_extra={"default": {}})


class QuotaPolicyStatus(K8sModel):
    """Written by the quota controller."""

    used: ResourceList | None = None
    admitted_trainers: int = Field(default=0, ge=0)
    conditions: Conditions | None = None


class QuotaPolicy(K8sModel):
    spec: QuotaPolicySpec
    status: QuotaPolicyStatus | None = None
