"""What a Trainer's ``spec.podTemplateOverrides`` may set (pure; docs/trainer.md).

Overrides are merged last into pods the trainer controller creates with its own identity, so a
tenant who may create Trainers but not pods must not reach through them what the namespace's Pod
Security level forbids (restricted where it says none: :mod:`trainerop_common.pod_security`), nor
the fields the operator owns (identity, placement, priority), nor a host-level pod at any level.
Allowed: labels and annotations; placement hints (affinity, nodeSelector, tolerations, spread); DNS
and host aliases; the volume types the level allows (never a host path); containers and init
containers with their usual fields, no host ports, and security contexts within the level, never
privileged. Anything else is refused, each problem naming the field and what to do.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from trainerop_common.api.trainer import TrainerSpec
from trainerop_common.pod_security import (
    BASELINE,
    BASELINE_CAPABILITIES,
    BASELINE_SELINUX_TYPES,
    ENFORCE_LABEL,
    PRIVILEGED,
    RESTRICTED,
)
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
# The host's namespaces: never, at any level (BOUND).
HOST = {"hostNetwork", "hostPID", "hostIPC"}
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
# What the operator never creates, whatever the namespace's level (docs/security.md): its identity
# must not be turned into a host-level pod (the creations policy holds it to that too).
BOUND = "the operator creates no privileged or host-level pod, nor one beyond Pod Security baseline, at any level"

Check = Callable[[Any], bool]


def _confined(value: Any) -> bool:
    return isinstance(value, Mapping) and value.get("type") != "Unconfined"


def _selinux(value: Any) -> bool:
    """Baseline's SELinux options: no user or role, a container type."""
    return (
        isinstance(value, Mapping)
        and not value.keys() & {"user", "role"}
        and value.get("type", "") in BASELINE_SELINUX_TYPES
    )


def _capabilities(allowed: Callable[[str], bool]) -> Check:
    return lambda v: isinstance(v, Mapping) and set(v) <= {"drop", "add"} and all(map(allowed, v.get("add") or ()))


# Security context fields each level allows, each with the values it allows.
RESTRICTED_POD: dict[str, Check] = {
    "runAsNonRoot": lambda v: v is True,
    "runAsUser": lambda v: isinstance(v, int) and v != 0,
    "runAsGroup": lambda v: isinstance(v, int),
    "fsGroup": lambda v: isinstance(v, int),
    "fsGroupChangePolicy": lambda v: isinstance(v, str),
    "supplementalGroups": lambda v: isinstance(v, list),
    "supplementalGroupsPolicy": lambda v: isinstance(v, str),
    "seLinuxChangePolicy": lambda v: isinstance(v, str),
    "seLinuxOptions": _selinux,
    "seccompProfile": lambda v: isinstance(v, Mapping) and v.get("type") in PROFILES,
    "appArmorProfile": lambda v: isinstance(v, Mapping) and v.get("type") in PROFILES,
}
RESTRICTED_CONTAINER: dict[str, Check] = {
    **{k: RESTRICTED_POD[k] for k in ("runAsNonRoot", "runAsUser", "runAsGroup", "seLinuxOptions")},
    **{k: RESTRICTED_POD[k] for k in ("seccompProfile", "appArmorProfile")},
    "readOnlyRootFilesystem": lambda v: isinstance(v, bool),
    "allowPrivilegeEscalation": lambda v: v is False,
    "privileged": lambda v: v is False,
    "procMount": lambda v: v == "Default",
    "capabilities": _capabilities(lambda c: c == "NET_BIND_SERVICE"),
}
BASELINE_LOOSER: dict[str, Check] = {
    "runAsNonRoot": lambda v: isinstance(v, bool),
    "runAsUser": lambda v: isinstance(v, int),
    "seccompProfile": _confined,
    "appArmorProfile": _confined,
}


@dataclass(frozen=True)
class Rules:
    """What one Pod Security level lets a template or override set."""

    pod: Mapping[str, Check]
    container: Mapping[str, Check]
    volumes: Callable[[str], bool]  # a volume type


BASELINE_RULES = Rules(
    {**RESTRICTED_POD, **BASELINE_LOOSER},
    {
        **RESTRICTED_CONTAINER,
        **BASELINE_LOOSER,
        "allowPrivilegeEscalation": lambda v: isinstance(v, bool),
        "capabilities": _capabilities(lambda c: c in BASELINE_CAPABILITIES),
    },
    lambda kind: kind != "hostPath",
)
# A privileged namespace gets baseline's fields through an override, no more: a pod beyond
# baseline (other capabilities, no confinement, sysctls) can reach the host, and the tenant who
# asks may create Trainers without being allowed such pods (docs/security.md).
RULES = {
    RESTRICTED: Rules(RESTRICTED_POD, RESTRICTED_CONTAINER, lambda kind: kind in VOLUMES),
    BASELINE: BASELINE_RULES,
    PRIVILEGED: BASELINE_RULES,
}
UNKNOWN = "not a securityContext field an override may set"


def why(level: str, key_known: bool, looser: bool) -> str:
    """Why a value is refused: the namespace's level (``looser``: a looser level would allow it),
    else the operator's bound, or the field is not one the rules know."""
    if not key_known:
        return UNKNOWN
    if not looser:
        return BOUND
    return f'Pod Security "{level}" forbids it: the namespace\'s {ENFORCE_LABEL} label sets the level'


def _security(context: Any, rules: Callable[[str], Mapping[str, Check]], level: str, path: str) -> list[str]:
    if not isinstance(context, Mapping):
        return []  # not an object: the API server says what is wrong
    out = []
    for key, value in context.items():
        check = rules(level).get(key)
        if check is None or not check(value):
            loose = rules(PRIVILEGED).get(key)
            reason = why(level, loose is not None, bool(loose and loose(value)))
            out.append(f"{path}.{key}: {value!r} is not allowed ({reason})")
    return out


def _pod_rules(level: str) -> Mapping[str, Check]:
    return RULES[level].pod


def _container_rules(level: str) -> Mapping[str, Check]:
    return RULES[level].container


def _container(container: Any, level: str, path: str) -> list[str]:
    if not isinstance(container, Mapping):
        return []
    out = [f"{path}.{key}: not allowed in an override" for key in container if key not in CONTAINER]
    for i, port in enumerate(container.get("ports") or ()):
        if isinstance(port, Mapping) and (port.get("hostPort") or port.get("hostIP")):
            out.append(f"{path}.ports[{i}]: a host port is not allowed ({BOUND})")
    return out + _security(container.get("securityContext"), _container_rules, level, f"{path}.securityContext")


def _volume(volume: Any, level: str, path: str) -> list[str]:
    if not isinstance(volume, Mapping):
        return []
    refused = sorted(k for k in set(volume) - {"name"} if not RULES[level].volumes(k))
    if level == RESTRICTED:
        use = f"use {', '.join(sorted(VOLUMES))}"
        reasons = {k: why(level, True, k != "hostPath") for k in refused}
        return [f"{path}.{k}: this volume type is not allowed ({reasons[k]}); {use}" for k in refused]
    return [f"{path}.{k}: this volume type is not allowed ({BOUND})" for k in refused]


def _spec(spec: Mapping[str, Any], level: str, path: str) -> list[str]:
    out = []
    for key in spec:
        if key in OWNED:
            out.append(f"{path}.{key}: set by the operator ({OWNED[key]})")
        elif key in HOST:
            out.append(f"{path}.{key}: not allowed ({BOUND})")
        elif key not in SPEC:
            out.append(f"{path}.{key}: not allowed in an override")
    out += _security(spec.get("securityContext"), _pod_rules, level, f"{path}.securityContext")
    for kind in ("containers", "initContainers"):
        for i, container in enumerate(spec.get(kind) or ()):
            out += _container(container, level, f"{path}.{kind}[{i}]")
    for i, volume in enumerate(spec.get("volumes") or ()):
        out += _volume(volume, level, f"{path}.volumes[{i}]")
    return out


def fragment_problems(fragment: Mapping[str, Any], path: str, level: str = RESTRICTED) -> list[str]:
    """What of one role's PodTemplateSpec fragment is not allowed in a namespace of Pod Security
    ``level``, each naming its field."""
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
        out += _spec(spec, level, f"{path}.spec")
    return out


def override_problems(spec: TrainerSpec, level: str = RESTRICTED) -> list[str]:
    """Every field of ``spec.podTemplateOverrides`` that is not allowed in a namespace of Pod
    Security ``level``, with why and what to use."""
    out = []
    for role in ROLES:
        fragment = role_override(spec, role)
        if fragment:
            out += fragment_problems(fragment, f"spec.podTemplateOverrides.{override_name(role)}", level)
    return out
