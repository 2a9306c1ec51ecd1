"""What the profile controller's webhooks decide (pure; the adapter is in controller.py).

- mutating: a Trainer created without ``spec.profile`` in a namespace labelled
  ``trainer.operator.kubeflow.org/default-profile=<name>`` gets that profile;
- validating: a Trainer naming a profile that exists neither in its namespace nor cluster-wide
  is refused (on create, and when an update changes the name).
"""

from collections.abc import Mapping

from trainerop_common.admission import Request, Verdict
from trainerop_common.api import GROUP

DEFAULT_PROFILE_LABEL = f"{GROUP}/default-profile"


def default_profile(request: Request, namespace_labels: Mapping[str, str] | None) -> Verdict:
    """The namespace's default profile for a Trainer created without one."""
    name = (namespace_labels or {}).get(DEFAULT_PROFILE_LABEL)
    if request.operation != "CREATE" or request.spec.get("profile") or not name:
        return Verdict()
    return Verdict(
        spec={"profile": name},
        warnings=(f"spec.profile set to {name!r}, the default profile of namespace {request.namespace!r}",),
    )


def check_profile(request: Request, found: bool, namespace_default: str | None = None) -> Verdict:
    """Refuse a Trainer whose newly named profile does not exist (``found``: it does);
    ``namespace_default``: the namespace's default profile, named when it is the missing one."""
    name = request.spec.get("profile")
    if not name or found or not request.changed("profile"):
        return Verdict()
    if name == namespace_default:
        fix = (
            f"it is namespace {request.namespace!r}'s default profile (its label {DEFAULT_PROFILE_LABEL}): "
            "create the profile, or correct or remove that label"
        )
    else:
        fix = (
            f"create the profile first (kubectl get trainingprofiles,clustertrainingprofiles -n "
            f"{request.namespace} lists those that exist) or remove spec.profile"
        )
    return Verdict(
        problems=(
            f"spec.profile: there is no TrainingProfile {name!r} in namespace {request.namespace!r} and no "
            f"ClusterTrainingProfile {name!r}; {fix}",
        )
    )
