"""What a Trainer's ``spec.podTemplateOverrides`` may set (pure; docs/trainer.md).

Overrides are merged last into pods the trainer controller creates with its own identity, so a
tenant who may create Trainers but not pods must not reach through them what Pod Security
"restricted" forbids, nor the fields the operator owns (identity, placement, priority). Allowed:
labels and annotations; placement hints (affinity, nodeSelector, tolerations, spread); DNS and
host aliases; the volume types "restricted" allows; containers and init containers with their
usual fields, no host ports, and a security context within "restricted"; a pod security context
within "restricted". Anything else is refused, each problem naming the field and what to do.
"""

from collections.abc import Callable, Mapping
from typing import Any

from trainerop_common.api.trainer import TrainerSpec
from trainerop_common.topology import ROLES, override_name, role_override

METADATA = {"labels", "annotations"}
SPEC = {
    "affinity",
    "nodeSelector",
    "tolerations",
    "topologySpreadConstraints",
    "terminationGracePeriodSeconds",
    "dnsConfig",
    "dnsPolicy",
    "hostAliases",
    "imagePullSecrets",
    "enableServiceLinks",
    "shareProcessNamespace",
    "readinessGates",
    "resourceClaims",
    "volumes",
    "containers",
    "initContainers",
    "securityContext",
}
# Fields the operator owns, with what to use instead.
OWNED = {
    "serviceAccountName": "pods run as the namespace's trainer-operator-runner",
    "serviceAccount": "pods run as the namespace's trainer-operator-runner",
    "automountServiceAccountToken": "the pods' token carries their heartbeats and checkpoint reports",
    "nodeName": "placement is the scheduler's and the quota's; use nodeSelector or affinity",
    "priorityClassName": "use spec.scheduling.priorityClassName, which the quota policy judges",
    "schedulerName": "the quota admits runs for the default scheduler",
    "restartPolicy": "restarts follow spec.runPolicy",
    "hostname": "each replica's DNS name is the operator's",
    "subdomain": "each replica's DNS name is the operator's",
}
# Pod Security "restricted": the volume types it allows.
VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}
CONTAINER = {
    "name",
    "image",
    "imagePullPolicy",
    "command",
    "args",
    "workingDir",
    "env",
    "envFrom",
    "resources",
    "resizePolicy",
    "volumeMounts",
    "ports",
    "lifecycle",
    "livenessProbe",
    "readinessProbe",
    "startupProbe",
    "restartPolicy",  # an init container's "Always" makes it a sidecar
    "terminationMessagePath",
    "terminationMessagePolicy",
    "securityContext",
    "stdin",
    "tty",
}
PROFILES = {"RuntimeDefault", "Localhost"}
RESTRICTED = 'Pod Security "restricted" forbids it'

Check = Callable[[Any], bool]
# Security context fields "restricted" allows, each with the values it allows.
POD_SECURITY: dict[str, Check] = {
    "runAsNonRoot": lambda v: v is True,
    "runAsUser": lambda v: isinstance(v, int) and v != 0,
    "runAsGroup": lambda v: isinstance(v, int),
    "fsGroup": lambda v: isinstance(v, int),
    "fsGroupChangePolicy": lambda v: isinstance(v, str),
    "supplementalGroups": lambda v: isinstance(v, list),
    "seccompProfile": lambda v: isinstance(v, Mapping) and v.get("type") in PROFILES,
    "appArmorProfile": lambda v: isinstance(v, Mapping) and v.get("type") in PROFILES,
}
CONTAINER_SECURITY: dict[str, Check] = {
    **{k: POD_SECURITY[k] for k in ("runAsNonRoot", "runAsUser", "runAsGroup", "seccompProfile", "appArmorProfile")},
    "readOnlyRootFilesystem": lambda v: isinstance(v, bool),
    "allowPrivilegeEscalation": lambda v: v is False,
    "privileged": lambda v: v is False,
    "procMount": lambda v: v == "Default",
    "capabilities": lambda v: (
        isinstance(v, Mapping) and set(v) <= {"drop", "add"} and set(v.get("add") or ()) <= {"NET_BIND_SERVICE"}
    ),
}


def _security(context: Any, allowed: Mapping[str, Check], path: str) -> list[str]:
    if not isinstance(context, Mapping):
        return []  # not an object: the API server says what is wrong
    out = []
    for key, value in context.items():
        check = allowed.get(key)
        if check is None or not check(value):
            out.append(f"{path}.{key}: {value!r} is not allowed ({RESTRICTED})")
    return out


def _container(container: Any, path: str) -> list[str]:
    if not isinstance(container, Mapping):
        return []
    out = [f"{path}.{key}: not allowed in an override" for key in container if key not in CONTAINER]
    for i, port in enumerate(container.get("ports") or ()):
        if isinstance(port, Mapping) and (port.get("hostPort") or port.get("hostIP")):
            out.append(f"{path}.ports[{i}]: a host port is not allowed ({RESTRICTED})")
    return out + _security(container.get("securityContext"), CONTAINER_SECURITY, f"{path}.securityContext")


def _volume(volume: Any, path: str) -> list[str]:
    if not isinstance(volume, Mapping):
        return []
    kinds = set(volume) - {"name"}
    return [
        f"{path}.{k}: this volume type is not allowed ({RESTRICTED}); use {', '.join(sorted(VOLUMES))}"
        for k in sorted(kinds - VOLUMES)
    ]


def _spec(spec: Mapping[str, Any], path: str) -> list[str]:
    out = []
    for key in spec:
        if key in OWNED:
            out.append(f"{path}.{key}: set by the operator ({OWNED[key]})")
        elif key not in SPEC:
            out.append(f"{path}.{key}: not allowed in an override ({RESTRICTED} or the operator owns it)")
    out += _security(spec.get("securityContext"), POD_SECURITY, f"{path}.securityContext")
    for kind in ("containers", "initContainers"):
        for i, container in enumerate(spec.get(kind) or ()):
            out += _container(container, f"{path}.{kind}[{i}]")
    for i, volume in enumerate(spec.get("volumes") or ()):
        out += _volume(volume, f"{path}.volumes[{i}]")
    return out


def fragment_problems(fragment: Mapping[str, Any], path: str) -> list[str]:
    """What of one role's PodTemplateSpec fragment is not allowed, each naming its field."""
    out = [
        f"{path}.{key}: not allowed in an override (only metadata and spec)"
        for key in fragment
        if key not in ("metadata", "spec")
    ]
    meta = fragment.get("metadata")
    if isinstance(meta, Mapping):
        out += [f"{path}.metadata.{key}: only labels and annotations may be set" for key in meta if key not in METADATA]
    spec = fragment.get("spec")
    if isinstance(spec, Mapping):
        out += _spec(spec, f"{path}.spec")
    return out


def override_problems(spec: TrainerSpec) -> list[str]:
    """Every field of ``spec.podTemplateOverrides`` that is not allowed, with why and what to use."""
    out = []
    for role in ROLES:
        fragment = role_override(spec, role)
        if fragment:
            out += fragment_problems(fragment, f"spec.podTemplateOverrides.{override_name(role)}")
    return out
