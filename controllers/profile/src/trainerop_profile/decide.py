"""The profile controller's decision core: pure, table-tested, no I/O.

``spec.profile`` names a TrainingProfile in the Trainer's namespace, else a ClusterTrainingProfile
(the namespaced one shadows a cluster-wide one of the same name). The resolved profile becomes a
contribution (docs/design/contributions.md) that the trainer controller merges into the pods it creates from then on.

Merge rules (docs/profile.md):
- The Trainer's own fields win: ``spec.env``, ``spec.resources``, ``spec.runPolicy`` and the
  per-role ``podTemplateOverrides``; variables the operator sets (``WORLD_SIZE``...) win too.
- Lists merge by key: env by name, tolerations add up, volumes by name, mounts by path.
- A profile setting that loses is listed in ``status.profile.overrides`` and in the condition,
  never dropped silently. A clash that no rule can settle (the profile's secret mounted where
  the Trainer's replica volume goes) stops the Trainer with ``ProfileConflict``.
"""

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from trainerop_common.api import Contribution, PodContribution, TrainerSpec
from trainerop_common.api.base import EnvVar
from trainerop_common.api.profile import TrainingProfileSpec
from trainerop_common.conditions import Desired
from trainerop_common.contracts import GATE_CONDITIONS, SECRET_READER_ROLES, TRAINING_CONTAINER, set_by_operator
from trainerop_common.outcome import StatusSection
from trainerop_common.redaction import is_secret_name
from trainerop_common.topology import override_name, role_counts, role_override

CONDITION = GATE_CONDITIONS["profile"]
SECTION = StatusSection(("profile",), (CONDITION,))
SECRET_VOLUME = "profile-runtime-secret"
MAX_OVERRIDES = 50  # listed in status and the message; more are counted

ProfileKind = Literal["TrainingProfile", "ClusterTrainingProfile"]


@dataclass(frozen=True)
class FoundProfile:
    """The profile ``spec.profile`` resolved to."""

    kind: ProfileKind
    name: str
    generation: int
    spec: TrainingProfileSpec

    def describe(self) -> str:
        return f"{self.kind} {self.name!r}"


@dataclass(frozen=True)
class Decision:
    status: dict[str, Any]
    conditions: tuple[Desired, ...]
    problem: Desired | None = None  # set when the user must fix something (an Event is posted)
    missing_secrets: tuple[str, ...] = ()  # re-checked after a while: the Trainer proceeds once they exist
    overrides: tuple[str, ...] = field(default=())


def spec_hash(spec: TrainingProfileSpec) -> str:
    """A short, stable hash of the profile's content (status.profile.hash)."""
    text = json.dumps(spec.to_k8s(), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _contributed_env(spec: TrainingProfileSpec, trainer: TrainerSpec | None = None) -> list[EnvVar]:
    """The profile's variables that can reach a pod: not the operator's own, not the Trainer's."""
    own = {e.name for e in (trainer.env if trainer else None) or ()}
    return [e for e in spec.env_vars or () if not set_by_operator(e.name) and e.name not in own]


def needed_secrets(spec: TrainingProfileSpec, trainer: TrainerSpec | None = None) -> dict[str, str]:
    """Secrets the profile makes the Trainer's pods depend on (name -> which field), all from the
    Trainer's namespace; a variable the Trainer sets itself needs none of the profile's."""
    out: dict[str, str] = {}
    if spec.runtime_config is not None:
        out[spec.runtime_config.secret] = "runtimeConfig.secret"
    for env in _contributed_env(spec, trainer):
        ref = (env.value_from or {}).get("secretKeyRef")
        if isinstance(ref, dict) and ref.get("name") and not ref.get("optional"):
            out.setdefault(str(ref["name"]), f"envVars[{env.name}].valueFrom.secretKeyRef")
    return out


def contribution(spec: TrainingProfileSpec, generation: int) -> Contribution:
    pod = PodContribution(
        env=_contributed_env(spec) or None,
        node_selector=dict(spec.node_selector) if spec.node_selector else None,
        tolerations=list(spec.tolerations) if spec.tolerations else None,
        resources=spec.resources,
        security_context=spec.security_context,
    )
    if spec.runtime_config is not None:
        pod.volumes = [{"name": SECRET_VOLUME, "secret": {"secretName": spec.runtime_config.secret}}]
        pod.volume_mounts = [{"name": SECRET_VOLUME, "mountPath": spec.runtime_config.mount_path, "readOnly": True}]
    run_policy = spec.retry_policy if spec.retry_policy and spec.retry_policy.to_k8s() else None
    return Contribution(generation=generation, pod=pod, run_policy=run_policy)


def _role_fragments(trainer: TrainerSpec) -> "Fragments":
    """(role, pod spec override, override of the training container) for the roles the run has."""
    out = []
    for role, count in role_counts(trainer).items():
        spec = (role_override(trainer, role) or {}).get("spec")
        if not count or not isinstance(spec, Mapping):
            continue
        name = TRAINING_CONTAINER[trainer.framework]
        containers = [c for c in _items(spec.get("containers")) if c.get("name") == name]
        out.append((override_name(role), spec, containers))
    return out


def _items(value: Any) -> list[Mapping[str, Any]]:
    """The objects of a list field of a free-form override (null, or a non-list: none)."""
    return [i for i in value if isinstance(i, Mapping)] if isinstance(value, list) else []


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _env_key(e: EnvVar | Mapping[str, Any]) -> Any:
    data = e.to_k8s() if isinstance(e, EnvVar) else dict(e)
    return (data.get("value"), json.dumps(data.get("valueFrom"), sort_keys=True))


Fragments = list[tuple[str, Mapping[str, Any], list[Mapping[str, Any]]]]


def overrides(trainer: TrainerSpec, profile: TrainingProfileSpec) -> list[str]:
    """Profile settings that lose to the Trainer's own spec or to the operator (names only:
    values may be secrets)."""
    fragments = _role_fragments(trainer)
    return [
        *_env_overrides(trainer, profile, fragments),
        *_resource_overrides(trainer, profile, fragments),
        *_placement_overrides(profile, fragments),
        *_retry_overrides(trainer, profile),
        *_packing_overrides(trainer, profile),
        *(["model (spec.model)"] if trainer.model and profile.model and trainer.model != profile.model else []),
    ]


def _packing_overrides(trainer: TrainerSpec, profile: TrainingProfileSpec) -> list[str]:
    own = trainer.scheduling.packing if trainer.scheduling else None
    return ["packing (spec.scheduling.packing)"] if own and profile.packing and own != profile.packing else []


def _env_overrides(trainer: TrainerSpec, profile: TrainingProfileSpec, fragments: Fragments) -> list[str]:
    out: list[str] = []
    own_env = {e.name: e for e in trainer.env or ()}
    for env in profile.env_vars or ():
        if set_by_operator(env.name):
            out.append(f"env {env.name} (set by the operator)")
        elif env.name in own_env and _env_key(own_env[env.name]) != _env_key(env):
            out.append(f"env {env.name} (spec.env)")
        for role, _, containers in fragments:
            theirs = [e for c in containers for e in _items(c.get("env")) if e.get("name") == env.name]
            if any(_env_key(e) != _env_key(env) for e in theirs):
                out.append(f"env {env.name} (podTemplateOverrides.{role})")
    return out


def _resource_overrides(trainer: TrainerSpec, profile: TrainingProfileSpec, fragments: Fragments) -> list[str]:
    out: list[str] = []
    for section in ("requests", "limits"):
        mine = getattr(trainer.resources, section, None) or {}
        for name, value in (getattr(profile.resources, section, None) or {}).items():
            if name in mine and str(mine[name]) != str(value):
                out.append(f"resources.{section}[{name}] (spec.resources)")
            for role, _, containers in fragments:
                overridden = [_map(_map(c.get("resources")).get(section)) for c in containers]
                if any(name in o and str(o[name]) != str(value) for o in overridden):
                    out.append(f"resources.{section}[{name}] (podTemplateOverrides.{role})")
    return out


def _placement_overrides(profile: TrainingProfileSpec, fragments: Fragments) -> list[str]:
    """The node selector, and the runtime Secret's mount and volume, a role's override replaces."""
    out: list[str] = []
    for key, value in (profile.node_selector or {}).items():
        for role, pod_spec, _ in fragments:
            selector = _map(pod_spec.get("nodeSelector"))
            if key in selector and selector[key] != value:
                out.append(f"nodeSelector[{key}] (podTemplateOverrides.{role})")
    if profile.runtime_config is not None:
        path = profile.runtime_config.mount_path
        for role, pod_spec, containers in fragments:
            if any(m.get("mountPath") == path for c in containers for m in _items(c.get("volumeMounts"))):
                out.append(f"runtimeConfig.mountPath {path} (podTemplateOverrides.{role})")
            if any(v.get("name") == SECRET_VOLUME for v in _items(pod_spec.get("volumes"))):
                out.append(f"runtimeConfig volume {SECRET_VOLUME} (podTemplateOverrides.{role})")
    return out


def _retry_overrides(trainer: TrainerSpec, profile: TrainingProfileSpec) -> list[str]:
    retry, own = profile.retry_policy, trainer.run_policy
    if retry is None:
        return []
    out = []
    for attr, wire in (("restart_policy", "restartPolicy"), ("backoff_limit", "backoffLimit")):
        theirs_value, own_value = getattr(retry, attr), getattr(own, attr)
        if theirs_value is not None and own_value is not None and theirs_value != own_value:
            out.append(f"retryPolicy.{wire} (spec.runPolicy.{wire})")
    return out


def clashes(trainer: TrainerSpec, profile: TrainingProfileSpec) -> list[str]:
    """Clashes no merge rule settles: the pod would be invalid."""
    out = []
    runtime, storage = profile.runtime_config, trainer.storage
    if runtime is not None and storage is not None and runtime.mount_path.rstrip("/") == storage.mount_path.rstrip("/"):
        out.append(
            f"runtimeConfig.mountPath {runtime.mount_path} is also spec.storage.mountPath (the replica's volume)"
        )
    return out


def secret_literals(profile: TrainingProfileSpec) -> list[str]:
    """Variables with a secret-looking name and a literal value. The API server refuses them
    (CEL) since that rule exists; a profile stored before it may still hold one, and copying it
    into the contribution would put a secret into the Trainer's status."""
    return [e.name for e in profile.env_vars or () if e.value is not None and is_secret_name(e.name)]


@dataclass(frozen=True)
class Observed:
    namespace: str
    trainer: TrainerSpec
    generation: int
    profile: FoundProfile | None  # what spec.profile resolved to (None: no such profile)
    # The Secrets of needed_secrets(profile, trainer) -> whether each exists (None: could not be
    # checked, the controller may not get Secrets in that namespace).
    secrets: Mapping[str, bool | None] = field(default_factory=dict)


def decide(obs: Observed) -> Decision:
    name, found = obs.trainer.profile, obs.profile
    if not name:
        # Not asked (contracts.asks): nothing said, and what was said of an earlier profile goes.
        return Decision(status={}, conditions=())
    if found is None:
        return _problem(
            {"name": name},
            "ProfileNotFound",
            f"no TrainingProfile {name!r} in namespace {obs.namespace!r} and no ClusterTrainingProfile {name!r}; "
            "create one or change spec.profile (the Trainer waits, with no pods, until then)",
        )
    section: dict[str, Any] = {
        "name": found.name,
        "kind": found.kind,
        "generation": found.generation,
        "hash": spec_hash(found.spec),
    }
    return _unusable(obs, found, section) or _resolved(obs, found, section)


def _unusable(obs: Observed, found: FoundProfile, section: dict[str, Any]) -> Decision | None:
    """Why the profile cannot be applied as it is, if so: a secret-looking literal, a clash no rule
    settles, a Secret that does not exist."""
    literals = secret_literals(found.spec)
    if literals:
        return _problem(
            section,
            "InvalidProfile",
            f"{found.describe()} has a literal value in envVars {', '.join(literals)}, whose names look like "
            "secrets; move the values into a Secret and use valueFrom.secretKeyRef (the operator never copies "
            "secret values into status)",
        )
    blocking = clashes(obs.trainer, found.spec)
    if blocking:
        return _problem(
            section,
            "ProfileConflict",
            f"{found.describe()} cannot be applied: " + "; ".join(blocking) + "; change one of them",
        )
    needed = needed_secrets(found.spec, obs.trainer)
    missing = tuple(s for s in needed if obs.secrets.get(s, False) is False)
    if missing:
        what = ", ".join(f"Secret {s!r} ({needed[s]})" for s in missing)
        return _problem(
            section,
            "SecretNotFound",
            f"{found.describe()} needs {what} in namespace {obs.namespace!r}; create it there "
            "(the Trainer waits, with no new pods, until it exists)",
            missing,
        )
    return None


def _resolved(obs: Observed, found: FoundProfile, section: dict[str, Any]) -> Decision:
    """The profile applied: its contribution, and what of it the Trainer's own settings override."""
    unchecked = [s for s in needed_secrets(found.spec, obs.trainer) if obs.secrets.get(s, False) is None]
    lost = overrides(obs.trainer, found.spec)
    if len(lost) > MAX_OVERRIDES:
        lost = [*lost[: MAX_OVERRIDES - 1], f"and {len(lost) - MAX_OVERRIDES + 1} more"]
    section["contribution"] = contribution(found.spec, obs.generation).to_k8s()
    if found.spec.placement_plugin is not None:  # the quota controller reads it from here
        section["placementPlugin"] = found.spec.placement_plugin
    if found.spec.packing is not None:  # the quota controller's too, unless the Trainer says its own
        section["packing"] = found.spec.packing.to_k8s()
    if found.spec.model is not None:  # the trainer's, unless the Trainer names its own
        section["model"] = found.spec.model.to_k8s()
    note = (
        f" (not checked that Secret {', '.join(map(repr, unchecked))} exists: the controller may not get "
        f"Secrets in namespace {obs.namespace!r}; the trainer controller grants it there, with the RoleBinding "
        f"{SECRET_READER_ROLES['profile']}, when it runs with the profile gate)"
        if unchecked
        else ""
    )
    if lost:
        section["overrides"] = lost
        condition = Desired.true(
            CONDITION,
            "ResolvedWithOverrides",
            f"{found.describe()} applied; the Trainer's own settings override its " + ", ".join(lost) + note,
        )
    else:
        condition = Desired.true(CONDITION, "Resolved", f"{found.describe()} applied" + note)
    return Decision(status={"profile": section}, conditions=(condition,), overrides=tuple(lost))


def _problem(section: dict[str, Any], reason: str, message: str, missing: Sequence[str] = ()) -> Decision:
    problem = Desired.false(CONDITION, reason, message)
    return Decision(status={"profile": section}, conditions=(problem,), problem=problem, missing_secrets=tuple(missing))
