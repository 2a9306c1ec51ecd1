"""A run's model (spec.model, pure): the init container that fetches and checks it into the shared
cache, the read-only mount and ``MODEL_PATH`` of the training container, and the ``ModelVerified``
condition read from the initializers' termination messages (docs/models.md)."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from trainerop_common.api.base import Condition
from trainerop_common.api.model import ModelSpec
from trainerop_common.api.trainer import TrainerSpec, TrainerStatus
from trainerop_common.checkpoint_layout import S3_ENDPOINT_KEY, credential_env
from trainerop_common.conditions import Desired, find
from trainerop_common.models import INIT_CONTAINER, S3_SCHEME, VERIFIED, SourceError, parse, revision_dir

from .views import PodView

VOLUME = "model-cache"
CACHE_MOUNT = "/model-cache"  # the initializer's (read-write) view of the claim
CONDITION = "ModelVerified"
TOKEN_KEY = "HF_TOKEN"  # the key of spec.model.tokenSecret the initializer gets


@dataclass(frozen=True)
class ModelSettings:
    """Operator-wide settings of the initializer (controller flags)."""

    image: str = "trainer-operator:dev"  # the operator's image, which has trainerop-model-init
    endpoint: str = ""  # the Hub's address; empty: the initializer's default (huggingface.co)


def run_model(spec: TrainerSpec, status: TrainerStatus) -> ModelSpec | None:
    """The run's model: its own, else its profile's (passed on in status.profile)."""
    if spec.model is not None or not spec.profile or status.profile is None:
        return spec.model
    return status.profile.model


def model_problem(model: ModelSpec | None, where: str = "spec.model") -> str | None:
    """Why the model cannot be fetched as written (the schema's pattern is coarser), else None;
    ``where``: whose model it is, for the message."""
    if model is None:
        return None
    try:
        parse(model.source)
    except SourceError as err:
        return f"{where}.source: {err}"
    return None


def model_path(model: ModelSpec) -> str:
    """MODEL_PATH: the revision's directory as the training container sees it."""
    return str(PurePosixPath(model.mount_path) / revision_dir(parse(model.source), model.files or ()))


def init_container(
    model: ModelSpec, settings: ModelSettings, pull_policy: str, security: Mapping[str, Any]
) -> dict[str, Any]:
    """The initializer: fetches the revision into the claim once (an flock keeps the other ranks
    waiting, then finding it), checks every file, and reports in its termination message."""
    args = ["--source", model.source, "--cache", CACHE_MOUNT]
    for pattern in model.files or ():
        args += ["--files", pattern]
    env = source_env(model, settings)
    return {
        "name": INIT_CONTAINER,
        "image": settings.image,
        "imagePullPolicy": pull_policy,
        "command": ["trainerop-model-init", *args],
        **({"env": env} if env else {}),
        "volumeMounts": [{"name": VOLUME, "mountPath": CACHE_MOUNT}],
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
        # restricted, as the training container; its user the pod's runAsUser, else the image's
        # (65532), and what it writes is readable by every user (the training container's)
        "securityContext": dict(security),
        "terminationMessagePolicy": "FallbackToLogsOnError",  # a crash before the message: its log's tail
    }


def source_env(model: ModelSpec, settings: ModelSettings) -> list[dict[str, Any]]:
    """Where the initializer fetches from, and its credentials (from Secrets, never values)."""
    if model.source.startswith(S3_SCHEME):
        env = credential_env(model.credentials_secret)
        if model.endpoint:  # as the S3-specific variable: it wins over the Secret's endpoints
            over = {"name": S3_ENDPOINT_KEY, "value": model.endpoint}
            env = [e for e in env if e["name"] != S3_ENDPOINT_KEY] + [over]
        return env
    env = []
    endpoint = model.endpoint or settings.endpoint
    if endpoint:
        env.append({"name": "HF_ENDPOINT", "value": endpoint})
    if model.token_secret:
        ref = {"name": model.token_secret, "key": TOKEN_KEY}
        env.append({"name": TOKEN_KEY, "valueFrom": {"secretKeyRef": ref}})
    return env


def cache_volume(model: ModelSpec) -> dict[str, Any]:
    return {"name": VOLUME, "persistentVolumeClaim": {"claimName": model.cache_claim}}


def cache_mount(model: ModelSpec) -> dict[str, Any]:
    return {"name": VOLUME, "mountPath": model.mount_path, "readOnly": True}


def model_condition(
    model: ModelSpec | None, pods: Sequence[PodView], before: Sequence[Condition]
) -> tuple[Desired | None, Desired | None]:
    """The ``ModelVerified`` condition, and the same when it newly says a refusal (a Warning Event):
    a refusal any pod's initializer reported (pods replaced after it may still succeed), else a
    verification, else what it said before (no initializer has finished since). None: no model."""
    if model is None:
        return None, None
    said = sorted((p.name, p.model) for p in pods if p.model is not None)  # by name: the same word each time
    refused = [(name, m) for name, m in said if m[0] != VERIFIED]
    old = find(before, CONDITION)
    if refused:
        name, (reason, message) = refused[0]
        now = Desired.false(CONDITION, reason, f"pod {name}: {message}")
    elif said:
        now = Desired.true(CONDITION, VERIFIED, said[0][1][1])
    elif old is not None:
        return Desired(old.type, old.status, old.reason, old.message), None
    else:
        fetching = f"fetching {model.source} into claim {model.cache_claim}"
        return Desired(CONDITION, "Unknown", "Fetching", fetching), None
    new = old is None or (old.status, old.reason, old.message) != (now.status, now.reason, now.message)
    return now, now if new and now.status == "False" else None
