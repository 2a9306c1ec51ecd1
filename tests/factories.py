"""The one place tests build Trainers.

Every test that needs a Trainer (a validated spec, a manifest to apply, or a body as a watch or
an admission review delivers it) builds it here, so a change to the API changes one file. ``spec``
fields are written as the user writes them (camelCase keys); a Trainer is one epoch of
busybox:1.36 unless the test says otherwise. A test whose assertions depend on the epochs or the
image passes them explicitly.
"""

from __future__ import annotations

from typing import Any

from trainerop_common.api import API_VERSION, TrainerSpec

KIND = "Trainer"
DEFAULT_EPOCHS = 1
DEFAULT_IMAGE = "busybox:1.36"


def trainer_fields(**spec: Any) -> dict[str, Any]:
    """``spec.*`` as the user writes it: one epoch of busybox:1.36, with ``spec`` added or replaced."""
    return {"epochs": DEFAULT_EPOCHS, "image": DEFAULT_IMAGE, **spec}


def trainer_spec(**spec: Any) -> TrainerSpec:
    """The spec of :func:`trainer_fields`, validated by the real model (a bad field raises)."""
    return TrainerSpec.model_validate(trainer_fields(**spec))


def trainer_manifest(name: str, *, namespace: str | None = None, **spec: Any) -> dict[str, Any]:
    """A Trainer as ``kubectl apply`` takes it (namespace left to the command unless given)."""
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": trainer_fields(**spec)}


def trainer_body(
    name: str = "t",
    namespace: str = "ns",
    *,
    uid: str | None = None,
    generation: int = 1,
    resource_version: str | None = None,
    status: dict[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A Trainer as the API server delivers it (a watch event, an admission review's object): with
    its uid (``uid-<name>`` unless given) and generation, a resourceVersion and a status only if given."""
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": uid or f"uid-{name}",
        "generation": generation,
    }
    if resource_version is not None:
        metadata["resourceVersion"] = resource_version
    body: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": metadata,
        "spec": trainer_fields(**spec),
    }
    if status is not None:
        body["status"] = status
    return body


def quota_policy(name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    """A QuotaPolicy over ``namespace`` alone."""
    return {
        "apiVersion": API_VERSION,
        "kind": "QuotaPolicy",
        "metadata": {"name": name},
        "spec": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}, **spec},
    }
