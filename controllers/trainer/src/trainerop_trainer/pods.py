"""Pod manifests of the replicas and the Trainer's headless Service, claims and runner identity (pure).

Contributions from the other concerns are merged in a fixed order — profile, quota,
checkpoint — and then the Trainer's own spec wins where the user set a field (docs/design/contributions.md).
Per-role ``podTemplateOverrides`` are applied last.
"""

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trainerop_common.api import API_VERSION, GROUP, Contribution, PodContribution
from trainerop_common.api.trainer import TrainerSpec
from trainerop_common.contracts import (
    CONTRACTS,
    DEFAULT_CONTAINER_ANNOTATION,
    GENERATION_ANNOTATION,
    KUBEFLOW_JOB_NAME_LABEL,
    KUBEFLOW_JOB_ROLE_LABEL,
    KUBEFLOW_REPLICA_INDEX_LABEL,
    KUBEFLOW_REPLICA_TYPE_LABEL,
    NODE_ANNOTATION,
    REPLICA_INDEX_LABEL,
    REPLICA_TYPE_LABEL,
    RUNNER_SERVICE_ACCOUNT,
    SECRET_READER_ROLES,
    TRAINER_NAME_LABEL,
    TRAINER_UID_LABEL,
)
from trainerop_common.image_fields import IMAGE_LISTS, image_slots
from trainerop_common.names import MANAGED_BY, PART_OF, component, replica_claim_name
from trainerop_common.pod_security import RESTRICTED
from trainerop_common.topology import Role, is_master_replica, role_override

from .model import ModelSettings, cache_mount, cache_volume, init_container, model_path
from .topology import Replica, framework_env, operator_env, port, rendezvous

CONTRIBUTION_ORDER = ("profile", "quota", "checkpoint", "verify")


@dataclass(frozen=True)
class Owner:
    """The Trainer the objects belong to."""

    name: str
    namespace: str
    uid: str
    generation: int
    api_version: str = API_VERSION
    # Started by an earlier version, which made a Service per replica: its pods resolve those.
    per_replica_services: bool = False

    def reference(self) -> dict[str, Any]:
        return {
            "apiVersion": self.api_version,
            "kind": "Trainer",
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }

    def selector(self) -> dict[str, str]:
        """The labels every pod of the Trainer carries (and only its pods)."""
        return {TRAINER_NAME_LABEL: self.name, TRAINER_UID_LABEL: self.uid}

    def named_metadata(self) -> dict[str, Any]:
        """The metadata of an object of the Trainer named like it (its Service, its drain guard)."""
        return {
            "name": self.name,
            "namespace": self.namespace,
            "labels": {**self.selector(), **MANAGED_BY},
            "ownerReferences": [self.reference()],
        }


@dataclass(frozen=True)
class PodSettings:
    """Operator-wide settings of generated pods (controller flags)."""

    init_image: str = "busybox:1.36"
    image_pull_policy: str = "IfNotPresent"
    model: ModelSettings = field(default_factory=ModelSettings)


def labels(owner: Owner, replica: Replica) -> dict[str, str]:
    return {
        TRAINER_NAME_LABEL: owner.name,
        REPLICA_TYPE_LABEL: replica.role,
        REPLICA_INDEX_LABEL: str(replica.index),
        TRAINER_UID_LABEL: owner.uid,
        **MANAGED_BY,
    }


def kubeflow_labels(owner: Owner, spec: TrainerSpec, replica: Replica) -> dict[str, str]:
    """The labels Kubeflow v1 gives the same replica of a job named like the Trainer."""
    out = {
        KUBEFLOW_JOB_NAME_LABEL: owner.name,
        KUBEFLOW_REPLICA_TYPE_LABEL: replica.role,
        KUBEFLOW_REPLICA_INDEX_LABEL: str(replica.index),
    }
    if is_master_replica(spec, replica.role, replica.index):
        out[KUBEFLOW_JOB_ROLE_LABEL] = "master"
    return out


def _by_name(items: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    return {str(i["name"]): dict(i) for i in items}


def role_contributions(contributions: Mapping[str, Contribution], role: Role) -> dict[str, PodContribution]:
    """Each concern's fragment for ``role``'s pods: its fragment for every role, and its fragment
    for that role over it (docs/design/contributions.md)."""
    out: dict[str, PodContribution] = {}
    for concern, c in contributions.items():
        own = (c.roles or {}).get(role)
        out[concern] = merge_contributions([c.pod, own]) if own is not None else c.pod
    return out


def merge_contributions(contributions: Sequence[PodContribution]) -> PodContribution:
    """Fold contributions in order; a later one wins field by field (lists merge by name)."""
    env: dict[str, dict[str, Any]] = {}
    volumes: dict[str, dict[str, Any]] = {}
    mounts: dict[str, dict[str, Any]] = {}
    node_selector: dict[str, str] = {}
    tolerations: list[dict[str, Any]] = []
    requests: dict[str, Any] = {}
    limits: dict[str, Any] = {}
    annotations: dict[str, str] = {}
    extra_labels: dict[str, str] = {}
    affinity: dict[str, Any] | None = None
    service_account: str | None = None
    security: dict[str, Any] = {}
    gates: list[str] = []
    images: dict[str, str] = {}
    for c in contributions:
        env |= _by_name(e.to_k8s() for e in c.env or ())
        volumes |= _by_name(c.volumes or ())
        mounts |= _by_name(c.volume_mounts or ())
        node_selector |= c.node_selector or {}
        for t in c.tolerations or ():
            if t.to_k8s() not in tolerations:
                tolerations.append(t.to_k8s())
        if c.resources is not None:
            requests |= c.resources.requests or {}
            limits |= c.resources.limits or {}
        annotations |= c.annotations or {}
        extra_labels |= c.labels or {}
        affinity = {**(affinity or {}), **c.affinity} if c.affinity else affinity  # by kind of affinity
        service_account = c.service_account_name or service_account
        security |= c.security_context.to_k8s() if c.security_context else {}
        gates += [g for g in c.scheduling_gates or () if g not in gates]  # gates add up
        images |= c.images or {}
    return PodContribution.model_validate(
        {
            "env": list(env.values()) or None,
            "volumes": list(volumes.values()) or None,
            "volumeMounts": list(mounts.values()) or None,
            "nodeSelector": node_selector or None,
            "tolerations": tolerations or None,
            "affinity": affinity,
            "serviceAccountName": service_account,
            "resources": {"requests": requests or None, "limits": limits or None} if requests or limits else None,
            "annotations": annotations or None,
            "labels": extra_labels or None,
            "securityContext": security or None,
            "schedulingGates": gates or None,
            "images": images or None,
        }
    )


# How an override merges into a generated field (kubectl's strategic-merge keys): maps merge
# key by key; lists of objects merge by their key field — a container is merged field by field,
# any other entry (an env variable, a volume, a mount, a port) is replaced whole; tolerations
# add up; anything else is replaced. A null in an override counts as not set. So a role override
# never silently drops what a profile contributed.
_MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "volumes": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
}
_DEEP = ("containers", "initContainers")
_MAPS = ("nodeSelector", "resources", "requests", "limits", "securityContext")  # merged key by key, as kubectl does


def _merge_keyed(base: Sequence[Any], extra: Sequence[Any], key: str, deep: bool) -> list[Any]:
    merged: dict[Any, Any] = {}
    for item in [*base, *extra]:
        if not isinstance(item, Mapping):
            continue  # not an object: the API server will say what is wrong with the override
        current = merged.get(item.get(key))
        merged[item.get(key)] = _merge_fields(current, item) if deep and current is not None else dict(item)
    return list(merged.values())


def _merge_fields(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        current = out.get(key)
        if value is None:
            continue
        if key in _MERGE_KEYS and isinstance(current, list) and isinstance(value, list):
            out[key] = _merge_keyed(current, value, _MERGE_KEYS[key], key in _DEEP)
        elif key in _MAPS and isinstance(current, dict) and isinstance(value, dict):
            out[key] = _merge_fields(current, value)
        elif key == "tolerations" and isinstance(current, list) and isinstance(value, list):
            out[key] = current + [t for t in value if t not in current]
        else:
            out[key] = value
    return out


def pin(pod: dict[str, Any], node: str) -> dict[str, Any]:
    """Keep the pod to ``node`` (its place in the quota admission): the node's name is required
    in every node-affinity term, which keep their own conditions (the scheduler still checks fit)."""
    # The affinity may be shared with other pods' manifests (it comes from a contribution): copied.
    pod["spec"]["affinity"] = copy.deepcopy(pod["spec"].get("affinity") or {})
    affinity = pod["spec"]["affinity"].setdefault("nodeAffinity", {})
    required = affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    field = {"key": "metadata.name", "operator": "In", "values": [node]}
    required["nodeSelectorTerms"] = [
        {**term, "matchFields": [*(term.get("matchFields") or ()), field]}
        for term in required.get("nodeSelectorTerms") or [{}]
    ]
    pod["metadata"]["annotations"][NODE_ANNOTATION] = node
    return pod


def _apply_override(pod: dict[str, Any], override: Mapping[str, Any]) -> None:
    """Merge a PodTemplateSpec fragment: metadata maps merge (identity labels stay ours); spec
    fields merge as kubectl's strategic merge does (see ``_MERGE_KEYS``), the override winning."""
    meta = override.get("metadata") or {}
    for key in ("labels", "annotations"):
        pod["metadata"][key] = {**(meta.get(key) or {}), **pod["metadata"].get(key, {})}  # ours win
    spec = override.get("spec")
    if isinstance(spec, Mapping):
        pod["spec"] = _merge_fields(pod["spec"], spec)


def training_env(owner: Owner, spec: TrainerSpec, replica: Replica, merged: PodContribution) -> list[dict[str, Any]]:
    """The concerns' variables, then the framework's and the operator's (which win over them), then
    the Trainer's own (which win over all)."""
    env = {e.name: e.to_k8s() for e in merged.env or ()}
    for name, value in {
        **framework_env(owner.name, owner.namespace, spec, replica, owner.per_replica_services),
        **operator_env(owner.name, owner.uid, spec, replica),
    }.items():
        env[name] = {"name": name, "value": value}
    env["POD_NAME"] = {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
    if spec.model is not None:
        env["MODEL_PATH"] = {"name": "MODEL_PATH", "value": model_path(spec.model)}
    env |= {e.name: e.to_k8s() for e in spec.env or ()}  # the user's own variables win
    return list(env.values())


def training_container(
    owner: Owner, spec: TrainerSpec, replica: Replica, merged: PodContribution, settings: PodSettings, level: str
) -> dict[str, Any]:
    contract = CONTRACTS[spec.framework]
    requests = dict((merged.resources.requests or {}) if merged.resources else {})
    limits = dict((merged.resources.limits or {}) if merged.resources else {})
    if spec.resources is not None:
        requests |= spec.resources.requests or {}
        limits |= spec.resources.limits or {}
    container: dict[str, Any] = {
        "name": contract.container,
        "image": spec.image,
        "imagePullPolicy": settings.image_pull_policy,
        "env": training_env(owner, spec, replica, merged),
        "ports": [{"name": contract.port_name, "containerPort": port(spec)}],
    }
    if spec.command:
        container["command"] = list(spec.command)
    if spec.args:
        container["args"] = list(spec.args)
    if requests or limits:
        container["resources"] = {k: v for k, v in (("requests", requests), ("limits", limits)) if v}
    mounts = list(merged.volume_mounts or ())
    if spec.storage is not None:
        mounts.append({"name": "replica-data", "mountPath": spec.storage.mount_path})
    if spec.model is not None:
        mounts.append(cache_mount(spec.model))
    if mounts:
        container["volumeMounts"] = mounts
    if level == RESTRICTED:
        container["securityContext"] = dict(CONTAINER_SECURITY)
    return container


def pod_spec(
    owner: Owner, spec: TrainerSpec, replica: Replica, merged: PodContribution, settings: PodSettings, level: str
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "restartPolicy": "Never",  # the operator replaces failed pods itself, per its restart rules
        "hostname": replica.name(owner.name),
        "subdomain": owner.name,  # the Trainer's headless Service: DNS <hostname>.<trainer>
        "containers": [training_container(owner, spec, replica, merged, settings, level)],
    }
    target = rendezvous(owner.name, spec, replica, owner.per_replica_services)
    model = spec.model
    inits = [init_container(model, settings.model, settings.image_pull_policy, CONTAINER_SECURITY)] if model else []
    if target is not None:
        inits.append(wait_for(target, settings))
    if inits:
        out["initContainers"] = inits
    volumes = list(merged.volumes or ())
    if spec.storage is not None:
        volumes.append({"name": "replica-data", "persistentVolumeClaim": {"claimName": claim_name(owner, replica)}})
    if spec.model is not None:
        volumes.append(cache_volume(spec.model))
    placement = {
        "volumes": volumes,
        "nodeSelector": merged.node_selector,
        "tolerations": [t.to_k8s() for t in merged.tolerations or ()],
        "affinity": merged.affinity,
        "schedulingGates": [{"name": gate} for gate in merged.scheduling_gates or ()],
    }
    out |= {k: v for k, v in placement.items() if v}
    # A concern may pick another identity; it then needs the runner's Lease permissions to beat.
    out["serviceAccountName"] = merged.service_account_name or RUNNER_SERVICE_ACCOUNT
    out["securityContext"] = pod_security(merged, level)
    return out


# Pod Security "restricted" where the namespace says no looser level (docs/trainer.md): no privilege
# escalation, every capability dropped, the runtime's seccomp profile, and a non-root user — the
# image's own, unless a profile names one (PodSecurity) or lets it be root (runAsNonRoot false:
# then no longer "restricted"). Where the namespace says baseline or privileged, only the runtime's
# seccomp profile: the image's user and capabilities are its own, as on a pod of the tenant's.
CONTAINER_SECURITY: dict[str, Any] = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
INIT_USER = 65532  # the rendezvous wait needs no identity; busybox would otherwise run as root


def pod_security(merged: PodContribution, level: str = RESTRICTED) -> dict[str, Any]:
    """The pod's securityContext in a namespace of Pod Security ``level``: the level's defaults,
    with what the concerns contributed over them."""
    contributed = merged.security_context.to_k8s() if merged.security_context else {}
    defaults: dict[str, Any] = {"seccompProfile": {"type": "RuntimeDefault"}}
    if level == RESTRICTED:
        defaults = {"runAsNonRoot": True, **defaults}
    return {**defaults, **contributed}


def pod_manifest(
    owner: Owner,
    spec: TrainerSpec,
    replica: Replica,
    contributions: Mapping[str, PodContribution],
    settings: PodSettings,
    level: str = RESTRICTED,
) -> dict[str, Any]:
    """A replica's pod in a namespace of Pod Security ``level``: the contributions merged in order,
    the Trainer's own spec over them, the role's podTemplateOverrides last."""
    merged = merge_contributions([contributions[c] for c in CONTRIBUTION_ORDER if c in contributions])
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": replica.name(owner.name),
            "namespace": owner.namespace,
            "labels": {**(merged.labels or {}), **kubeflow_labels(owner, spec, replica), **labels(owner, replica)},
            "annotations": {
                **(merged.annotations or {}),
                GENERATION_ANNOTATION: str(owner.generation),
                DEFAULT_CONTAINER_ANNOTATION: CONTRACTS[spec.framework].container,  # kubectl logs and the client's
            },
            "ownerReferences": [owner.reference()],
        },
        "spec": pod_spec(owner, spec, replica, merged, settings, level),
    }
    fragment = role_override(spec, replica.role)
    if fragment:
        _apply_override(pod, fragment)
    if level == RESTRICTED:
        restrict_containers(pod["spec"])
    pin_images(pod["spec"], merged.images or {})
    return pod


def restrict_containers(spec: dict[str, Any]) -> None:
    """Every container and init container, an override's too, without privilege escalation and
    with every capability dropped unless it says otherwise itself (Pod Security "restricted": what
    the admission policy trainer-operator-trainer-creations holds the pods to where the namespace
    allows no more). New dicts: an override's entries may still be the Trainer's own objects."""
    for kind in ("containers", "initContainers"):
        if isinstance(spec.get(kind), list):
            spec[kind] = [restricted(c) for c in spec[kind]]


def restricted(container: Any) -> Any:
    """The container with restricted's defaults under its own securityContext; an entry that is not
    an object (an override's fields are not typed) as it is, for the API server to refuse."""
    own = container.get("securityContext") if isinstance(container, Mapping) else None
    if not isinstance(container, Mapping) or not isinstance(own or {}, Mapping):
        return container
    own = dict(own or {})
    caps = own.get("capabilities") or {}
    capabilities = {"drop": ["ALL"], **caps} if isinstance(caps, Mapping) else caps
    return {**container, "securityContext": {**CONTAINER_SECURITY, **own, "capabilities": capabilities}}


def pin_images(spec: dict[str, Any], pinned: Mapping[str, str]) -> None:
    """Each image the pod names (containers, init containers, image volumes) as the verify concern
    resolved it (by digest), the overrides' too: what was verified is what runs. The lists are
    copied first: an override's entries may still be the Trainer's own objects."""
    if not pinned:
        return
    for name in IMAGE_LISTS:
        if name in spec:
            spec[name] = copy.deepcopy(spec[name])
    for holder, key in image_slots(spec):
        holder[key] = pinned.get(holder[key], holder[key])


def claim_name(owner: Owner, replica: Replica) -> str:
    return replica_claim_name(owner.name, replica.role, replica.index)


def claim_manifest(owner: Owner, spec: TrainerSpec, replica: Replica) -> dict[str, Any]:
    """The replica's own PersistentVolumeClaim; it outlives the replica's pods."""
    storage = spec.storage
    assert storage is not None
    claim: dict[str, Any] = {
        "accessModes": list(storage.access_modes),
        "resources": {"requests": {"storage": storage.size}},
    }
    if storage.storage_class_name is not None:
        claim["storageClassName"] = storage.storage_class_name
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": claim_name(owner, replica),
            "namespace": owner.namespace,
            "labels": labels(owner, replica),
            "ownerReferences": [owner.reference()],
        },
        "spec": claim,
    }


# The labels of what this controller makes once per namespace (not owned by any Trainer).
NAMESPACE_OBJECT_LABELS = {**PART_OF, **MANAGED_BY}


def runner_manifests(namespace: str) -> list[dict[str, Any]]:
    """ServiceAccount, Role and RoleBinding of the training pods of a namespace (least privilege,
    docs/trainer.md), made once per namespace and left with it: create and renew Leases and report
    Checkpoints. Neither can be named in RBAC ahead of time, so the API server's admission policy
    trainer-operator-checkpoint-reporters holds each pod to its own Lease and its own Trainer's Checkpoints
    (by the pod its token is bound to)."""
    meta = {
        "name": RUNNER_SERVICE_ACCOUNT,
        "namespace": namespace,
        "labels": dict(NAMESPACE_OBJECT_LABELS),
    }
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": meta,
            "rules": [
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create", "patch"]},
                {"apiGroups": [GROUP], "resources": ["checkpoints"], "verbs": ["get", "create", "patch"]},
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": RUNNER_SERVICE_ACCOUNT},
            "subjects": [{"kind": "ServiceAccount", "name": RUNNER_SERVICE_ACCOUNT, "namespace": namespace}],
        },
    ]


def secret_grants(namespace: str, gates: Sequence[str], operator_namespace: str) -> list[dict[str, Any]]:
    """RoleBindings that let the controllers of ``gates`` read Secrets in ``namespace`` (the
    profile's Secret, the checkpoint credentials): bound where Trainers are, never cluster-wide,
    and never in the operator's own namespace (its CA Secrets) or a kube-* one. The admission
    policy trainer-operator-trainer-creations holds this controller to exactly these bindings."""
    if namespace == operator_namespace or namespace.startswith("kube-"):
        return []
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {
                "name": role,
                "namespace": namespace,
                "labels": dict(NAMESPACE_OBJECT_LABELS),
            },
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": component(gate), "namespace": operator_namespace}],
        }
        for gate, role in SECRET_READER_ROLES.items()
        if gate in gates
    ]


def wait_for(address: str, settings: PodSettings) -> dict[str, Any]:
    """An init container that waits, without failing, until ``address`` (<pod>.<trainer>, a name
    relative to the pod's namespace) resolves: workers do not crash-loop while the master's pod and
    DNS record come up. Training code's resolver applies the pod's search domains to such a name;
    busybox's nslookup does not to a name with a dot, so the wait asks for it under the first
    search domain (<namespace>.svc.<cluster domain>, whatever the cluster's domain is), or as it is
    where the pod's resolv.conf has no search line (a dnsConfig of the user's). And it exits
    non-zero when any search domain fails even if one answered, so the answer decides."""
    domain = "$(sed -n 's/^search \\([^ ]*\\).*/\\1/p' /etc/resolv.conf)"
    wait = (
        f'domain="{domain}"; name="{address}${{domain:+.$domain}}"; '
        f"until nslookup \"$name\" | grep -q '^Name:'; do echo waiting for {address}; sleep 2; done"
    )
    return {
        "name": "wait-for-rendezvous",
        "image": settings.init_image,
        "imagePullPolicy": settings.image_pull_policy,
        "command": ["sh", "-c", wait],
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"cpu": "100m", "memory": "32Mi"}},
        "securityContext": {**CONTAINER_SECURITY, "runAsUser": INIT_USER, "runAsNonRoot": True},
    }


def service_manifest(owner: Owner, spec: TrainerSpec) -> dict[str, Any]:
    """The Trainer's one headless Service, named like it: with each pod's hostname and subdomain
    it gives every replica a stable DNS name, <trainer>-<role>-<index>.<trainer>.<namespace>.svc
    (:meth:`Replica.address`), ready or not (a rendezvous waits for it before the pods are ready)."""
    contract = CONTRACTS[spec.framework]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": owner.named_metadata(),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": owner.selector(),
            "ports": [{"name": contract.port_name, "port": port(spec), "targetPort": port(spec)}],
        },
    }
