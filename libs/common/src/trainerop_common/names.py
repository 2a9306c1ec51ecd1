"""Names the operator builds from users' names (pure): valid for every legal input.

An object named after another (an audit record after the Trainer or profile it records, a storage
pod after its checkpoint) is ``<base>-<suffix>``: the base is cut to fit the limit, and a cut never
leaves a '.' or '-' before the suffix, which the API server would refuse.
"""

import re

from trainerop_sdk.names import DNS_LABEL, MAX_NAME

_SUFFIX = re.compile(DNS_LABEL)


def child_name(base: str, *suffix: str, limit: int = MAX_NAME) -> str:
    """``base`` (a valid DNS subdomain) followed by the ``suffix`` parts (DNS labels), at most
    ``limit`` characters: a valid DNS subdomain."""
    for part in suffix:
        if not _SUFFIX.match(part):
            raise ValueError(f"{part!r} is not a DNS label: a name suffix must be one")
    tail = "".join(f"-{part}" for part in suffix)
    room = limit - len(tail)
    if room < 1:
        raise ValueError(f"the suffix {tail!r} leaves no room for a name within {limit} characters")
    head = base[:room].rstrip(".-")
    return head + tail


# The operator's own names: its namespace, and each controller's Deployment, ServiceAccount,
# peering object, webhook configurations and Event source (component), and field manager.
OPERATOR = "trainer-operator"
OPERATOR_NAMESPACE = f"{OPERATOR}-system"
PART_OF = {"app.kubernetes.io/part-of": OPERATOR}
# On every object the trainer controller makes in tenants' namespaces (the creations policy,
# deploy/controllers/trainer/rbac, requires it): what the operator made, for anyone to select.
MANAGED_BY = {"app.kubernetes.io/managed-by": OPERATOR}


def component(controller: str) -> str:
    return f"{OPERATOR}-{controller}"


def field_manager(controller: str) -> str:
    """The server-side-apply field manager of a controller's writes (its status section's owner)."""
    return f"{OPERATOR}/{controller}"


def service_account_user(controller: str) -> str:
    """The username the API server authenticates a controller's ServiceAccount as."""
    return f"system:serviceaccount:{OPERATOR_NAMESPACE}:{component(controller)}"


def replica_name(trainer: str, role: str, index: int) -> str:
    """A replica's pod name and hostname: <trainer>-<role>-<index>, as Kubeflow names them."""
    return f"{trainer}-{role}-{index}"


def replica_claim_name(trainer: str, role: str, index: int) -> str:
    """The PersistentVolumeClaim of a replica's own storage (spec.storage), which outlives its pods."""
    return f"{replica_name(trainer, role, index)}-data"
