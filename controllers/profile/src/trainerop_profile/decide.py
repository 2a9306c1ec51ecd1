"""The profile controller's decision core: pure, table-tested, no I/O.

``spec.profile`` names a TrainingProfile in the Trainer's namespace, else a ClusterTrainingProfile
(the namespaced one shadows a cluster-wide one of the same name). The resolved profile becomes a
contribution (DESIGN §3) that the trainer controller merges into the pods it creates from then on.

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
from trainerop_common.contracts import set_by_operator

CONDITION = "ProfileResolved"
OWNED_FIELDS = ("profile",)
SECRET_VOLUME = "profile-runtime-secret"
ROLES = (("master", "master"), ("worker", "worker"), ("parameter_server", "parameterServer"))

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


def needed_secrets(spec: TrainingProfileSpec) -> dict[str, str]:
    """Secrets the profile makes pods depend on (name -> which field), all from the Trainer's namespace."""
    out: dict[str, str] = {}
    if spec.runtime_config is not None:
        out[spec.runtime_config.secret] = "runtimeConfig.secret"
    for env in spec.env_vars or ():
        ref = (env.value_from or {}).get("secretKeyRef")
        if isinstance(ref, dict) and ref.get("name") and not ref.get("optional"):
            out.setdefault(str(ref["name"]), f"envVars[{env.name}].valueFrom.secretKeyRef")
    return out


def contribution(spec: TrainingProfileSpec, generation: int) -> Contribution:
    pod = PodContribution(
        env=[e for e in spec.env_vars or () if not set_by_operator(e.name)] or None,
        node_selector=dict(spec.node_selector) if spec.node_selector else None,
        tolerations=list(spec.tolerations) if spec.tolerations else None,
        resources=spec.resources,
    )
    if spec.runtime_config is not None:
        pod.volumes = [{"name": SECRET_VOLUME, "secret": {"secretName": spec.runtime_config.secret}}]
        pod.volume_mounts = [{"name": SECRET_VOLUME, "mountPath": spec.runtime_config.mount_path, "readOnly": True}]
    run_policy = spec.retry_policy if spec.retry_policy and spec.retry_policy.to_k8s() else None
    return Contribution(generation=generation, pod=pod, run_policy=run_policy)


def _role_fragments(trainer: TrainerSpec) -> list[tuple[str, Mapping[str, Any]]]:
    overrides = trainer.pod_template_overrides
    if overrides is None:
        return []
    return [(wire, frag.get("spec", {})) for attr, wire in ROLES if (frag := getattr(overrides, attr))]


def _containers(pod_spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [c for c in pod_spec.get("containers", ()) if isinstance(c, Mapping)]


def _env_key(e: EnvVar | Mapping[str, Any]) -> Any:
    data = e.to_k8s() if isinstance(e, EnvVar) else dict(e)
    return (data.get("value"), json.dumps(data.get("valueFrom"), sort_keys=True))


def overrides(trainer: TrainerSpec, profile: TrainingProfileSpec) -> list[str]:
    """Profile settings that lose to the Trainer's own spec or to the operator (names only:
    values may be secrets)."""
    out: list[str] = []
    own_env = {e.name: e for e in trainer.env or ()}
    fragments = _role_fragments(trainer)
    for env in profile.env_vars or ():
        if set_by_operator(env.name):
            out.append(f"env {env.name} (set by the operator)")
        elif env.name in own_env and _env_key(own_env[env.name]) != _env_key(env):
            out.append(f"env {env.name} (spec.env)")
        for role, pod_spec in fragments:
            if any(
                e.get("name") == env.name and _env_key(e) != _env_key(env)
                for c in _containers(pod_spec)
                for e in c.get("env", ())
            ):
                out.append(f"env {env.name} (podTemplateOverrides.{role})")
    theirs = profile.resources
    for section in ("requests", "limits"):
        mine = getattr(trainer.resources, section, None) or {}
        for name, value in (getattr(theirs, section, None) or {}).items():
            if name in mine and str(mine[name]) != str(value):
                out.append(f"resources.{section}[{name}] (spec.resources)")
            for role, pod_spec in fragments:
                if any(
                    name in (c.get("resources", {}).get(section) or {})
                    and str(c["resources"][section][name]) != str(value)
                    for c in _containers(pod_spec)
                ):
                    out.append(f"resources.{section}[{name}] (podTemplateOverrides.{role})")
    for key, value in (profile.node_selector or {}).items():
        for role, pod_spec in fragments:
            if key in (pod_spec.get("nodeSelector") or {}) and pod_spec["nodeSelector"][key] != value:
                out.append(f"nodeSelector[{key}] (podTemplateOverrides.{role})")
    if profile.runtime_config is not None:
        path = profile.runtime_config.mount_path
        for role, pod_spec in fragments:
            if any(m.get("mountPath") == path for c in _containers(pod_spec) for m in c.get("volumeMounts", ())):
                out.append(f"runtimeConfig.mountPath {path} (podTemplateOverrides.{role})")
    retry = profile.retry_policy
    if retry is not None:
        own = trainer.run_policy
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


def decide(
    namespace: str,
    trainer: TrainerSpec,
    generation: int,
    found: FoundProfile | None,
    secrets: Mapping[str, bool] | None = None,
) -> Decision:
    """``secrets`` says which of ``needed_secrets(found.spec)`` exist in ``namespace``."""
    name = trainer.profile
    if not name:
        return Decision(status={}, conditions=(Desired.true(CONDITION, "NoProfile", "spec.profile is not set"),))
    if found is None:
        return _problem(
            {"name": name},
            "ProfileNotFound",
            f"no TrainingProfile {name!r} in namespace {namespace!r} and no ClusterTrainingProfile {name!r}; "
            "create one or change spec.profile (the Trainer waits, with no pods, until then)",
        )
    section: dict[str, Any] = {
        "name": found.name,
        "kind": found.kind,
        "generation": found.generation,
        "hash": spec_hash(found.spec),
    }
    blocking = clashes(trainer, found.spec)
    if blocking:
        return _problem(
            section,
            "ProfileConflict",
            f"{found.describe()} cannot be applied: " + "; ".join(blocking) + "; change one of them",
        )
    needed = needed_secrets(found.spec)
    missing = tuple(s for s in needed if not (secrets or {}).get(s, False))
    if missing:
        what = ", ".join(f"Secret {s!r} ({needed[s]})" for s in missing)
        return _problem(
            section,
            "SecretNotFound",
            f"{found.describe()} needs {what} in namespace {namespace!r}; create it there "
            "(the Trainer waits, with no new pods, until it exists)",
            missing,
        )
    lost = overrides(trainer, found.spec)
    section["contribution"] = contribution(found.spec, generation).to_k8s()
    if lost:
        section["overrides"] = lost
        condition = Desired.true(
            CONDITION,
            "ResolvedWithOverrides",
            f"{found.describe()} applied; the Trainer's own settings override its " + ", ".join(lost),
        )
    else:
        condition = Desired.true(CONDITION, "Resolved", f"{found.describe()} applied")
    return Decision(status={"profile": section}, conditions=(condition,), overrides=tuple(lost))


def _problem(section: dict[str, Any], reason: str, message: str, missing: Sequence[str] = ()) -> Decision:
    problem = Desired.false(CONDITION, reason, message)
    return Decision(status={"profile": section}, conditions=(problem,), problem=problem, missing_secrets=tuple(missing))
