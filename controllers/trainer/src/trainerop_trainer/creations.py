"""What the trainer controller's identity may create, beyond the shape the admission policies hold
(pure; the adapter is ``TrainerController.admit_creation``, the webhook ``validate-creations`` in
deploy/controllers/trainer/webhook.yaml; docs/security.md):

- an object a Trainer controls belongs to a Trainer that exists: its owner reference names a
  Trainer of the namespace, with that Trainer's uid (not a made-up one, not an earlier Trainer's
  of the same name);
- an object no Trainer controls (the runner's account, Role and bindings) is made only in a
  namespace that holds a Trainer: never in kube-system or a tenant's namespace that runs no
  training;
- a pod uses only the Secrets its Trainer names: its spec (env, model, checkpoint credentials,
  role overrides) and the profile's and checkpoint's sections of its status, which only those
  controllers may write (trainer-operator-status-sections). "Uses" is every form a pod spec has:
  volumes of any type, projected volumes, ``secretKeyRef``, ``envFrom``, ``imagePullSecrets``;
- a pod's priority is at most the cluster's default (0 where no class is marked globalDefault):
  the controller names no priority class (a run's priority is its ``spec.scheduling``, which the
  quota judges), so its identity cannot start a pod of ``system-node-critical``, or of any class
  above the default, that would preempt other tenants' pods. The API server resolves a pod's
  ``priority`` before the webhook is asked; only a pod above 0 (a cluster whose default is above
  0, or a class the pod names) costs a read, of the PriorityClasses.

The webhook looks the owner up by its name (one read, whatever the namespace holds), so it costs
the same at a thousand Trainers as at one.
"""

from collections.abc import Iterator, Mapping
from typing import Any

from trainerop_common.api import GROUP

# Keys under which a pod spec names a Secret by an object's ``name``: envFrom's and CSI's
# references, env's key reference, a projected volume's source.
SECRET_REFERENCES = frozenset(
    {
        "secretRef",
        "secretKeyRef",
        "secret",
        "nodePublishSecretRef",
        "nodeStageSecretRef",
        "nodeExpandSecretRef",
        "controllerPublishSecretRef",
        "controllerExpandSecretRef",
    }
)
# What the trainer controller creates (group, version, plural): the webhook is asked about these.
CREATED = (
    ("", "v1", "pods"),
    ("", "v1", "services"),
    ("", "v1", "serviceaccounts"),
    ("", "v1", "persistentvolumeclaims"),
    ("rbac.authorization.k8s.io", "v1", "roles"),
    ("rbac.authorization.k8s.io", "v1", "rolebindings"),
    ("policy", "v1", "poddisruptionbudgets"),
)
# The status sections that name Secrets for the pods, each written by its controller alone.
NAMING_SECTIONS = ("profile", "checkpoint")


def _named_here(key: str, value: Any) -> Iterator[str]:
    """The Secret names ``key: value`` gives directly."""
    if isinstance(value, str) and (key == "secretName" or key.endswith("Secret")):
        yield value  # a secret volume's secretName; the Trainer's credentialsSecret, tokenSecret
    elif key in SECRET_REFERENCES and isinstance(value, Mapping) and isinstance(value.get("name"), str):
        yield value["name"]
    elif key == "imagePullSecrets" and isinstance(value, list):
        yield from (r["name"] for r in value if isinstance(r, Mapping) and isinstance(r.get("name"), str))


def secret_names(fragment: Any) -> set[str]:
    """Every Secret ``fragment`` names, at any depth: a pod spec, a role's override, a
    contribution, a Trainer's spec (its ``credentialsSecret`` and ``tokenSecret`` too)."""
    names: set[str] = set()
    stack = [fragment]
    while stack:
        item = stack.pop()
        if isinstance(item, Mapping):
            for key, value in item.items():
                names.update(_named_here(str(key), value))
                stack.append(value)
        elif isinstance(item, list):
            stack.extend(item)
    return {n for n in names if n}


def trainer_named_secrets(trainer: Mapping[str, Any]) -> set[str]:
    """The Secrets a Trainer's pods may use: those its spec names, and those the profile's and
    checkpoint's sections of its status name."""
    status = trainer.get("status") or {}
    return secret_names(trainer.get("spec") or {}) | secret_names([status.get(s) for s in NAMING_SECTIONS])


def trainer_owner(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The owner reference of the Trainer that controls ``obj``, if one does."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or ():
        trainer = ref.get("kind") == "Trainer" and str(ref.get("apiVersion", "")).startswith(f"{GROUP}/")
        if trainer and ref.get("controller"):
            return dict(ref)
    return None


def creation_problems(
    resource: str, obj: Mapping[str, Any], owner: Mapping[str, Any] | None, namespace_holds_trainers: bool
) -> tuple[str, ...]:
    """Why the trainer controller may not create ``obj`` (of ``resource``, a plural); ``owner``:
    the Trainer its owner reference names, as the namespace holds it (None: none of that name)."""
    namespace = str((obj.get("metadata") or {}).get("namespace") or "")
    ref = trainer_owner(obj)
    if ref is None:
        if namespace_holds_trainers:
            return ()
        return (f"the trainer controller creates {resource} only where Trainers are: {namespace} holds none",)
    name, uid = ref.get("name"), ref.get("uid")
    if owner is None or (owner.get("metadata") or {}).get("uid") != uid:
        return (
            f"the trainer controller creates {resource} only for a Trainer that exists: "
            f"{namespace} holds no Trainer {name} of uid {uid}",
        )
    if resource != "pods":
        return ()
    unnamed = sorted(secret_names(obj.get("spec") or {}) - trainer_named_secrets(owner))
    if not unnamed:
        return ()
    return (
        f"a pod of Trainer {name} uses only the Secrets its Trainer names (spec, profile, checkpoint): "
        f"not {', '.join(unnamed)}",
    )


def priority(obj: Mapping[str, Any]) -> int:
    """A pod's priority as the API server resolved it from its class (0: none)."""
    value = (obj.get("spec") or {}).get("priority")
    return value if isinstance(value, int) else 0


def priority_problems(obj: Mapping[str, Any], default_priority: int) -> tuple[str, ...]:
    """Why a training pod may not have its priority: above the cluster's default one
    (``default_priority``, the value of the class marked globalDefault; 0 where none is) and 0."""
    value, allowed = priority(obj), max(default_priority, 0)
    if value <= allowed:
        return ()
    named = (obj.get("spec") or {}).get("priorityClassName") or "its class"
    return (
        f"training pods have at most the cluster's default priority ({allowed}; a run's priority is its "
        f"spec.scheduling.priorityClassName, which the quota judges): not priority class {named} ({value})",
    )
