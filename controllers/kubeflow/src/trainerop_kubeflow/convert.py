"""A Kubeflow v1 job as the Trainer that carries it out (pure; docs/kubeflow.md).

The Trainer is named like the job, so its pods are named as upstream names them
(``<job>-<replica type>-<index>``) and carry upstream's labels. Each replica type becomes a role
(``kinds.JOB_KINDS``); its pod template becomes the role's ``podTemplateOverrides`` (merged over
the pod the trainer makes, container by container), its restart policy the role's
``runPolicy.restartPolicies``. What upstream's webhooks refuse is refused here with upstream's
messages (``problems``), before any Trainer exists.
"""

import copy
import re
from collections.abc import Mapping
from typing import Any

from trainerop_common.api import API_VERSION
from trainerop_common.api.kubeflow import KUBEFLOW_API_VERSION
from trainerop_common.api.trainer import MAX_PRIORITY_CLASS_NAME, MAX_TRAINER_NAME, TRAINER_NAME_PATTERN
from trainerop_common.contracts import CONTRACTS, KUBEFLOW_JOB_KIND_LABEL, TRAINING_CONTAINER
from trainerop_common.topology import Role, override_name

from .kinds import JobKind, canonical_type

# A job's annotation naming the TrainingProfile (or ClusterTrainingProfile) its Trainer uses.
PROFILE_ANNOTATION = "trainer.operator.kubeflow.org/profile"


def replica_specs(kind: JobKind, job: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The job's replica specs by their canonical type (``worker`` read as Worker); types the
    kind does not have are left out (``problems`` names them)."""
    written = (job.get("spec") or {}).get(kind.specs_field) or {}
    out = {}
    for name, replica in written.items():
        canonical = canonical_type(kind, name)
        if canonical is not None and isinstance(replica, Mapping):
            out[canonical] = dict(replica)
    return out


def replicas(spec: Mapping[str, Any]) -> int:
    """A replica spec's replicas (upstream's default: 1)."""
    count = spec.get("replicas")
    return 1 if count is None else int(count)


def containers(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    template = spec.get("template") or {}
    return [c for c in (template.get("spec") or {}).get("containers") or () if isinstance(c, Mapping)]


def main_container(kind: JobKind, spec: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The container upstream gives the framework's variables: the one named like the framework."""
    name = TRAINING_CONTAINER[kind.framework]
    return next((c for c in containers(spec) if c.get("name") == name), None)


def _replica_problems(kind: JobKind, type_: str, spec: Mapping[str, Any]) -> list[str]:
    path = f"spec.{kind.specs_field}[{type_}]"
    found = containers(spec)
    if not found:
        return [f"{path}.template.spec.containers: Required value: must be specified"]
    out = [
        f"{path}.template.spec.containers[{i}].image: Required value: must be required"
        for i, c in enumerate(found)
        if not c.get("image")
    ]
    if main_container(kind, spec) is None:
        name = TRAINING_CONTAINER[kind.framework]
        out.append(
            f"{path}.template.spec.containers: Required value: must have at least one container with name {name}"
        )
    return out


def bounds(policy: Mapping[str, Any], workers: int) -> tuple[int, int]:
    """An elastic policy's bounds with upstream's defaults: a missing one is the other, both
    missing the workers."""
    low, high = policy.get("minReplicas"), policy.get("maxReplicas")
    return low or high or workers, high or low or workers


def _elastic_bounds(field: str, policy: Mapping[str, Any], worker: Mapping[str, Any] | None) -> list[str]:
    if worker is None:
        return []
    count = replicas(worker)
    low, high = bounds(policy, count)
    if low <= count <= high:
        return []
    return [
        f"spec.{field}[Worker].replicas: Invalid value: {count}: must lie within elasticPolicy's minReplicas "
        f"({low}) and maxReplicas ({high})"
    ]


def _kind_problems(kind: JobKind, job: Mapping[str, Any], specs: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Upstream's rules of the kind: one master (pytorch, xgboost), a chief or a master (tensorflow),
    workers with an elastic policy, the master an XGBoostJob must have."""
    field, spec = kind.specs_field, job.get("spec") or {}
    out = []
    if kind.kind in ("PyTorchJob", "XGBoostJob") and "Master" in specs and replicas(specs["Master"]) != 1:
        out.append(f"spec.{field}[Master].replicas: Forbidden: must be 1")
    if kind.kind == "PyTorchJob" and spec.get("elasticPolicy") is not None:
        if "Worker" not in specs:
            out.append(f"spec.{field}[Worker]: Required value: must be configured if elastic policy is used")
        if spec.get("nprocPerNode") is not None and (spec["elasticPolicy"] or {}).get("nProcPerNode") is not None:
            out.append("spec.elasticPolicy.nProcPerNode: Forbidden: must not be used with spec.nprocPerNode")
        out += _elastic_bounds(field, spec["elasticPolicy"] or {}, specs.get("Worker"))
        if "Master" in specs:
            out.append(
                f"spec.{field}[Master]: Forbidden: an elastic PyTorchJob has its rendezvous on worker 0 here; "
                "remove the Master replica spec"
            )
    if kind.kind == "TFJob" and sum(replicas(specs[t]) for t in ("Chief", "Master") if t in specs) > 1:
        out.append(f"spec.{field}: Forbidden: must not have more than 1 Chief or Master role")
    if kind.kind == "XGBoostJob" and "Master" not in specs:
        out.append(f"spec.{field}[Master]: Required value: must be present")
    return out


def priority_class(job: Mapping[str, Any]) -> str:
    """The gang's priority class (schedulingPolicy's), "" for none."""
    scheduling = ((job.get("spec") or {}).get("runPolicy") or {}).get("schedulingPolicy") or {}
    return str(scheduling.get("priorityClass") or "")


def problems(kind: JobKind, job: Mapping[str, Any]) -> list[str]:
    """What upstream's webhook refuses in the job, in its words; and what a Trainer cannot carry."""
    name = str((job.get("metadata") or {}).get("name") or "")
    out = []
    if len(name) > MAX_TRAINER_NAME or not re.match(TRAINER_NAME_PATTERN, name):
        out.append(
            f"metadata.name: Invalid value: {name!r}: must be a lowercase RFC 1035 label of at most "
            f"{MAX_TRAINER_NAME} characters (its pods are named <name>-<replica type>-<index>)"
        )
    if len(priority := priority_class(job)) > MAX_PRIORITY_CLASS_NAME:
        out.append(
            f"spec.runPolicy.schedulingPolicy.priorityClass: Invalid value: {priority!r}: at most "
            f"{MAX_PRIORITY_CLASS_NAME} characters here (it names a priority class of the namespace's QuotaPolicy)"
        )
    written = (job.get("spec") or {}).get(kind.specs_field) or {}
    if not isinstance(written, Mapping) or not replica_specs(kind, job):
        return [*out, f"spec.{kind.specs_field}: Required value: must be required"]
    out += [
        f"spec.{kind.specs_field}[{t}]: Unsupported value: {t!r}: supported values: {', '.join(kind.types)}"
        for t in written
        if canonical_type(kind, t) is None
    ]
    specs = replica_specs(kind, job)
    for type_, spec in specs.items():
        out += _replica_problems(kind, type_, spec)
    return out + _kind_problems(kind, job, specs)


def override(template: Mapping[str, Any]) -> dict[str, Any]:
    """A replica spec's pod template as the role's override: its restartPolicy goes (upstream
    replaces it with the replica spec's, and here the trainer replaces pods itself)."""
    out = copy.deepcopy(dict(template))
    spec = out.get("spec")
    if isinstance(spec, dict):
        spec.pop("restartPolicy", None)
    return out


def _port(kind: JobKind, specs: Mapping[str, Mapping[str, Any]]) -> int | None:
    """The main container's port named like upstream's default one, when the job sets one (the
    master's first, as upstream reads it)."""
    for type_ in (t for t in kind.types if t in specs):
        main = main_container(kind, specs[type_]) or {}
        for port in main.get("ports") or ():
            if isinstance(port, Mapping) and port.get("name") == CONTRACTS[kind.framework].port_name:
                return int(port.get("containerPort") or CONTRACTS[kind.framework].port)
    return None


def _topology(kind: JobKind, specs: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    counts: dict[Role, int] = {kind.roles[t]: replicas(s) for t, s in specs.items()}
    topology: dict[str, Any] = {"workers": counts.get("worker", 0)}
    if kind.framework in ("pytorch", "tensorflow"):
        topology["master"] = counts.get("master", 0)
    others: tuple[tuple[Role, str], ...] = (("ps", "parameterServers"), ("chief", "chief"), ("evaluator", "evaluators"))
    for role, field in others:
        if counts.get(role):
            topology[field] = counts[role]
    return topology


def _endpoint(job: Mapping[str, Any], policy: Mapping[str, Any], port: int) -> str | None:
    """PET_RDZV_ENDPOINT when the policy names a host or port: upstream's default host is worker 0
    (here its DNS name under the Trainer's Service), its default port the workers'."""
    if policy.get("rdzvHost") is None and policy.get("rdzvPort") is None:
        return None  # the trainer's own: worker 0, the run's port
    name = job["metadata"]["name"]
    return f"{policy.get('rdzvHost') or f'{name}-worker-0.{name}'}:{policy.get('rdzvPort') or port}"


def _elastic(job: Mapping[str, Any], workers: int, port: int) -> tuple[dict[str, int] | None, list[dict[str, str]]]:
    """A PyTorchJob's elasticPolicy as topology.elastic (upstream's defaults: a missing bound is
    the other, both missing the workers), and the torchrun settings it carries as variables."""
    policy = (job.get("spec") or {}).get("elasticPolicy")
    if policy is None:
        return None, []
    low, high = bounds(policy, workers)
    backend = policy.get("rdzvBackend")
    conf = ",".join(f"{c.get('key')}={c.get('value')}" for c in policy.get("rdzvConf") or ())
    env = {
        "PET_RDZV_BACKEND": backend if backend not in (None, "c10d") else None,
        "PET_RDZV_ENDPOINT": _endpoint(job, policy, port),
        "PET_RDZV_ID": policy.get("rdzvId"),
        "PET_RDZV_CONF": conf or None,
        "PET_STANDALONE": "" if policy.get("standalone") else None,
        "PET_MAX_RESTARTS": str(policy["maxRestarts"]) if policy.get("maxRestarts") is not None else None,
    }
    return {"minWorkers": low, "maxWorkers": high}, [{"name": k, "value": v} for k, v in env.items() if v is not None]


def _run_policy(kind: JobKind, job_spec: Mapping[str, Any], specs: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    written = job_spec.get("runPolicy") or {}
    policy: dict[str, Any] = {
        "cleanPodPolicy": written.get("cleanPodPolicy") or "None",  # upstream's default
        "suspend": bool(written.get("suspend")),
        "restartPolicies": {kind.roles[t]: s.get("restartPolicy") or kind.restart_policy for t, s in specs.items()},
    }
    # ttlSecondsAfterFinished is the job's: the kubeflow controller deletes the job (and so its Trainer).
    for field in ("backoffLimit", "activeDeadlineSeconds"):
        if written.get(field) is not None:
            policy[field] = written[field]
    if job_spec.get("successPolicy") == "AllWorkers":
        policy["successPolicy"] = "AllWorkers"
    return policy


def owner_reference(kind: JobKind, job: Mapping[str, Any]) -> dict[str, Any]:
    meta = job["metadata"]
    return {
        "apiVersion": KUBEFLOW_API_VERSION,
        "kind": kind.kind,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _settings(kind: JobKind, job: Mapping[str, Any], workers: int, port: int | None) -> dict[str, Any]:
    """The Trainer's fields a job sets only now and then: the elastic policy (and the torchrun
    settings it carries as variables), processes per pod, the port, the profile, the priority."""
    job_spec = job.get("spec") or {}
    out: dict[str, Any] = {}
    # The gang's priority class orders the quota controller's admissions, as it orders Volcano's queue
    # (docs/kubeflow.md: minAvailable, queue and scheduleTimeoutSeconds need no counterpart).
    priority = priority_class(job)
    if priority:
        out["scheduling"] = {"priorityClassName": priority}
    elastic, env = _elastic(job, workers, port or CONTRACTS[kind.framework].port)
    if elastic is not None:
        out["elastic"] = elastic
    if env:
        out["env"] = env
    nproc = job_spec.get("nprocPerNode") or (job_spec.get("elasticPolicy") or {}).get("nProcPerNode")
    if nproc is not None:
        out["nprocPerNode"] = str(nproc)
    if port is not None:
        out["port"] = port
    profile = ((job.get("metadata") or {}).get("annotations") or {}).get(PROFILE_ANNOTATION)
    if profile:
        out["profile"] = profile
    return out


def trainer_spec(kind: JobKind, job: Mapping[str, Any]) -> dict[str, Any]:
    """The Trainer's spec for a job that ``problems`` found nothing wrong with."""
    specs = replica_specs(kind, job)
    first = specs.get("Worker") or next(iter(specs.values()))
    topology = _topology(kind, specs)
    spec: dict[str, Any] = {
        "framework": kind.framework,
        "image": (main_container(kind, first) or {})["image"],
        "topology": topology,
        "runPolicy": _run_policy(kind, job.get("spec") or {}, specs),
        "podTemplateOverrides": {
            override_name(kind.roles[t]): override(s.get("template") or {}) for t, s in specs.items()
        },
    }
    settings = _settings(kind, job, topology["workers"], _port(kind, specs))
    if "elastic" in settings:
        topology["elastic"] = settings.pop("elastic")
        topology.pop("master", None)
    return spec | settings


def to_trainer(kind: JobKind, job: Mapping[str, Any]) -> dict[str, Any]:
    """The Trainer manifest that carries out ``job``, owned by it and named like it."""
    meta = job["metadata"]
    metadata: dict[str, Any] = {
        "name": meta["name"],
        "namespace": meta.get("namespace"),
        "labels": {**(meta.get("labels") or {}), KUBEFLOW_JOB_KIND_LABEL: kind.kind},
    }
    if meta.get("uid"):
        metadata["ownerReferences"] = [owner_reference(kind, job)]
    return {"apiVersion": API_VERSION, "kind": "Trainer", "metadata": metadata, "spec": trainer_spec(kind, job)}
