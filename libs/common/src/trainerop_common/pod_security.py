"""Pod Security levels (pure): a namespace's, as the trainer controller applies it to the pods it
makes and to what a template or override may set (docs/security.md, "The cluster's rules").

A namespace says its level with the label the API server's PodSecurity admission reads. Where it
says none (or a value that is not a level) the operator applies "restricted", stricter than the
API server's own default (privileged): a tenant's namespace is held to the strictest level unless
its administrator labels it otherwise. The creations policy
(deploy/controllers/trainer/rbac/creations-policy.yaml) reads the same label the same way.
"""

from collections.abc import Mapping
from typing import Any

ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"
RESTRICTED = "restricted"
BASELINE = "baseline"
PRIVILEGED = "privileged"
LEVELS = (RESTRICTED, BASELINE, PRIVILEGED)  # the strictest first

# What "baseline" lets a container add (Kubernetes' Pod Security Standards); the creations policy
# names the same list (a unit test holds the two together).
BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
# The SELinux types "baseline" allows ("" and no type: the runtime's).
BASELINE_SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})


def level_of(labels: Mapping[str, Any] | None) -> str:
    """A namespace's Pod Security level from its labels: restricted unless it says baseline or
    privileged."""
    said = (labels or {}).get(ENFORCE_LABEL)
    return said if said in (BASELINE, PRIVILEGED) else RESTRICTED


def namespace_level(namespace: Mapping[str, Any] | None) -> str:
    """The level of a Namespace object (None, unknown: restricted)."""
    return level_of(((namespace or {}).get("metadata") or {}).get("labels"))
