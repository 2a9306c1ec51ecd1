"""Which ImagePolicies govern an image, and the images a run pulls (pure)."""

import fnmatch
import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from trainerop_common.api.images import ImagePolicy, PolicyMode
from trainerop_common.api.trainer import TrainerSpec
from trainerop_common.image_fields import image_slots
from trainerop_common.topology import role_counts, role_override


@dataclass(frozen=True)
class Policy:
    name: str
    mode: PolicyMode
    globs: tuple[str, ...]
    keys: tuple[tuple[str, str], ...]  # (name, PEM)

    @classmethod
    def of(cls, raw: Mapping[str, Any]) -> "Policy":
        spec = ImagePolicy.model_validate(raw).spec
        return cls(raw["metadata"]["name"], spec.mode, tuple(spec.images), tuple((k.name, k.pem) for k in spec.keys))

    def governs(self, name: str) -> bool:
        """Whether the normalized image name (docker.io/library/jax) is one of its globs'."""
        return any(fnmatch.fnmatchcase(name, glob) for glob in self.globs)

    def describe(self) -> str:
        return f"ImagePolicy {self.name!r} ({self.mode})"


def fingerprint(policies: Iterable[Policy]) -> str:
    """A short hash of the policies applied: a changed policy checks the runs again."""
    text = json.dumps(sorted((p.name, p.mode, p.globs, p.keys) for p in policies))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def run_images(spec: TrainerSpec) -> tuple[str, ...]:
    """The images the Trainer names for its pods: spec.image, and every container, init container
    and image volume (``volumes[].image.reference``) of the podTemplateOverrides of the roles it
    has (sorted, once each)."""
    found = {spec.image}
    for role, count in role_counts(spec).items():
        pod = (role_override(spec, role) or {}).get("spec") if count else None
        if isinstance(pod, Mapping):
            found.update(holder[key] for holder, key in image_slots(pod))
    return tuple(sorted(found))
