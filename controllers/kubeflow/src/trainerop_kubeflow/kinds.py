"""What each Kubeflow v1 job kind is made of (pure): its framework, the field of its replica specs,
its replica types and the Trainer role each becomes, and upstream's defaults for it."""

from collections.abc import Mapping
from dataclasses import dataclass

from trainerop_common.api.base import K8sModel, RestartPolicy
from trainerop_common.api.kubeflow import JAXJob, PyTorchJob, TFJob, XGBoostJob
from trainerop_common.api.trainer import Framework
from trainerop_common.topology import Role


@dataclass(frozen=True)
class JobKind:
    kind: str
    plural: str
    framework: Framework
    specs_field: str  # spec.<this> holds the replica specs, keyed by replica type
    roles: Mapping[str, Role]  # replica type -> Trainer role, in upstream's order
    restart_policy: RestartPolicy  # a replica spec's restartPolicy when it has none
    model: type[K8sModel]

    @property
    def types(self) -> tuple[str, ...]:
        return tuple(self.roles)

    def replica_type(self, role: str) -> str | None:
        """The replica type a Trainer role stands for in this kind (None: it has no such role)."""
        return next((t for t, r in self.roles.items() if r == role), None)


JOB_KINDS: dict[str, JobKind] = {
    k.kind: k
    for k in (
        JobKind(
            "PyTorchJob",
            "pytorchjobs",
            "pytorch",
            "pytorchReplicaSpecs",
            {"Master": "master", "Worker": "worker"},
            "OnFailure",
            PyTorchJob,
        ),
        JobKind(
            "TFJob",
            "tfjobs",
            "tensorflow",
            "tfReplicaSpecs",
            {"Chief": "chief", "Master": "master", "Worker": "worker", "PS": "ps", "Evaluator": "evaluator"},
            "Never",
            TFJob,
        ),
        JobKind("JAXJob", "jaxjobs", "jax", "jaxReplicaSpecs", {"Worker": "worker"}, "Never", JAXJob),
        JobKind(
            "XGBoostJob",
            "xgboostjobs",
            "xgboost",
            "xgbReplicaSpecs",
            {"Master": "master", "Worker": "worker"},
            "Never",
            XGBoostJob,
        ),
    )
}


def canonical_type(kind: JobKind, written: str) -> str | None:
    """The replica type ``written`` names, case aside (upstream accepts ``worker`` for Worker);
    None when the kind has no such type."""
    return next((t for t in kind.types if t.lower() == written.lower()), None)
