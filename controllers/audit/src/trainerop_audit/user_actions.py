"""What a user's request means for the audit trail: pure, table-tested, no I/O.

The audit webhook is a validating admission webhook that observes and never denies. The API
server sends it every create, update, scale and delete of Trainers and (Cluster)TrainingProfiles,
every create and delete of a Kubeflow v1 job (the Trainer the kubeflow controller makes for a job
names the job's creator: decide.creation_on_behalf) and every delete of an AuditLog, after
authenticating and authorising the user; this module turns one ``AdmissionReview`` request into
the AuditLog that records it (or nothing: a dry run, an update that changes nothing a user
controls, the audit controller's own retention).
"""

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from trainerop_common.api import GROUP, KINDS, KUBEFLOW_KINDS

from .decide import created_name
from .record import audit_record, record_name

# Kubeflow v1 jobs (group kubeflow.org): their creations and deletions only (the webhook's rules).
JOBS = {info.plural: info.kind for info in KUBEFLOW_KINDS}
JOB_OPERATIONS = ("CREATE", "DELETE")
# The API group of each resource the webhook is sent (the operator's own, or kubeflow.org), by resource
API_GROUPS = {info.plural: info.group for info in (*KINDS, *KUBEFLOW_KINDS)}
AUDITED = {
    "trainers": "Trainer",
    "trainingprofiles": "TrainingProfile",
    "clustertrainingprofiles": "ClusterTrainingProfile",
    **JOBS,
}
VERBS = {"CREATE": "create", "UPDATE": "update", "DELETE": "delete"}
MAX_GROUPS = 64
# Deletes every object of a namespace being deleted; its audit records go with the namespace (the
# namespace's deletion is in the API server's own audit log), so these are not recorded one by one.
NAMESPACE_CONTROLLER = "system:serviceaccount:kube-system:namespace-controller"
# Metadata a user does not control, or that mirrors the spec.
IGNORED_ANNOTATIONS = {"kubectl.kubernetes.io/last-applied-configuration"}


def changed_keys(old: Any, new: Any, path: tuple[str, ...], depth: int = 3) -> list[tuple[str, ...]]:
    """The keys (to ``depth`` levels below ``path``) whose values differ; never the values themselves."""
    if old == new:
        return []
    if depth <= 0 or not isinstance(old, Mapping) or not isinstance(new, Mapping):
        return [path]
    out = []
    for key in sorted(set(old) | set(new)):
        out += changed_keys(old.get(key), new.get(key), (*path, str(key)), depth - 1)
    return out


def changed_paths(old: Any, new: Any, path: str, depth: int = 3) -> list[str]:
    """Dotted paths (to ``depth`` levels) whose values differ; never the values themselves."""
    return [".".join(keys) for keys in changed_keys(old, new, (path,), depth)]


def _suspended(obj: Mapping[str, Any]) -> bool:
    return bool(((obj.get("spec") or {}).get("runPolicy") or {}).get("suspend"))


def _workers(obj: Mapping[str, Any]) -> Any:
    return ((obj.get("spec") or {}).get("topology") or {}).get("workers")


def _metadata_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[tuple[str, ...]]:
    out = []
    for part in ("labels", "annotations"):
        before = {k: v for k, v in (old.get(part) or {}).items() if k not in IGNORED_ANNOTATIONS}
        after = {k: v for k, v in (new.get(part) or {}).items() if k not in IGNORED_ANNOTATIONS}
        out += changed_keys(before, after, ("metadata", part), 1)
    return out


def changed_fields(subresource: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[tuple[str, ...]]:
    """What an update of an object (``subresource`` ""), or of its status ("status"), changes that
    a user controls: the keys of its spec, labels and annotations (other than kubectl's
    last-applied copy), or of its status."""
    if subresource == "status":
        return changed_keys(old.get("status"), new.get("status"), ("status",))
    keys = changed_keys(old.get("spec"), new.get("spec"), ("spec",))
    return keys + _metadata_changes(old.get("metadata") or {}, new.get("metadata") or {})


def update_action(
    resource: str, subresource: str, old: Mapping[str, Any], new: Mapping[str, Any]
) -> tuple[str, dict[str, str]] | None:
    """(action, details) of an update, or None when nothing a user controls changed."""
    if subresource == "scale":
        before, after = (old.get("spec") or {}).get("replicas"), (new.get("spec") or {}).get("replicas")
        return None if before == after else ("Scaled", {"from": str(before), "to": str(after)})
    if subresource not in ("", "status"):
        return None
    # The controllers' own status writes do not come here (the webhook's matchCondition); anyone
    # else writing status could fake an operator action, so that is recorded.
    changes = [".".join(keys) for keys in changed_fields(subresource, old, new)]
    if not changes:
        return None
    details = {"changed": ", ".join(changes)}
    if subresource == "status":
        return "Updated", details
    if resource == "trainers" and _suspended(old) != _suspended(new):
        return ("Suspended" if _suspended(new) else "Resumed"), details
    if resource == "trainers" and all(c.startswith("spec.topology.workers") for c in changes):
        return "Scaled", {**details, "from": str(_workers(old)), "to": str(_workers(new))}
    return "Updated", details


def transition_key(review: Mapping[str, Any]) -> str:
    """What a request makes of an object, from whose hand. The API server calls admission again,
    with a new request UID, when an update conflicts with another write (a status write, say) and
    is retried; its first attempt may even have started from a stale cached copy of the object, so
    only the new state identifies the request: a retry carries the same key and is recorded once."""
    req = review.get("request") or {}
    new = req.get("object")
    state = None
    if isinstance(new, Mapping):
        meta = new.get("metadata") or {}
        annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k not in IGNORED_ANNOTATIONS}
        state = [new.get("spec"), new.get("status") if req.get("subResource") == "status" else None]
        state += [meta.get("labels"), annotations]
    parts = [req.get("operation"), req.get("subResource"), (req.get("userInfo") or {}).get("username"), state]
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def recorded(req: Mapping[str, Any], self_user: str | None) -> bool:
    """Whether a request is recorded at all: not a dry run, an operation and a resource the trail
    covers; of Kubeflow jobs only creations and deletions; of AuditLogs only deletions, and not this
    controller's retention (it records that itself)."""
    resource = (req.get("resource") or {}).get("resource", "")
    operation = req.get("operation", "")
    if req.get("dryRun") or operation not in VERBS or (resource not in AUDITED and resource != "auditlogs"):
        return False
    if resource in JOBS:
        return operation in JOB_OPERATIONS
    username = (req.get("userInfo") or {}).get("username")
    return resource != "auditlogs" or (operation == "DELETE" and username not in (self_user, NAMESPACE_CONTROLLER))


def action_of(req: Mapping[str, Any]) -> tuple[str, dict[str, str]] | None:
    """(action, details) of a request, or None when an update changes nothing a user controls."""
    operation = req.get("operation", "")
    if operation == "CREATE":
        return "Created", {}
    if operation == "DELETE":
        return "Deleted", {}
    resource = (req.get("resource") or {}).get("resource", "")
    return update_action(
        resource, str(req.get("subResource") or ""), req.get("oldObject") or {}, req.get("object") or {}
    )


def object_ref(req: Mapping[str, Any], meta: Mapping[str, Any]) -> dict[str, Any]:
    """What was acted on, as the audit Event's objectRef (its API group the one that serves the
    resource: the operator's, or kubeflow.org for a Kubeflow job)."""
    resource = (req.get("resource") or {}).get("resource", "")
    ref: dict[str, Any] = {
        "resource": resource,
        "name": str(meta.get("name") or req.get("name") or ""),
        "apiGroup": API_GROUPS.get(resource, GROUP),
        "apiVersion": (req.get("resource") or {}).get("version", ""),
    }
    extra = {"namespace": req.get("namespace"), "uid": meta.get("uid"), "subresource": req.get("subResource")}
    return ref | {k: str(v) for k, v in extra.items() if v}


def requester(user: Mapping[str, Any]) -> dict[str, Any]:
    """Who asked, as the record holds it (at most 64 groups of 256 characters)."""
    who: dict[str, Any] = {"username": str(user.get("username") or "unknown")}
    if user.get("uid"):
        who["uid"] = str(user["uid"])
    groups = [str(g)[:256] for g in user.get("groups") or []][:MAX_GROUPS]
    return who | ({"groups": groups} if groups else {})


def observe(
    review: Mapping[str, Any], now: str, operator_namespace: str, self_user: str | None
) -> dict[str, Any] | None:
    """The AuditLog recording one admission request, or None when there is nothing to record."""
    req = review.get("request") or {}
    found = action_of(req) if recorded(req, self_user) else None
    if found is None:
        return None
    action, details = found
    meta = ((req.get("oldObject") if req.get("operation") == "DELETE" else req.get("object")) or {}).get(
        "metadata"
    ) or {}
    ref = object_ref(req, meta)
    name, kind, audit_id = ref["name"], AUDITED.get(ref["resource"], "AuditLog"), str(req.get("uid") or "")
    if ref["resource"] == "trainers" and action == "Created" and ref.get("uid"):
        record = created_name(name, ref["uid"])  # shared with the controller's record of an unobserved creation
    else:
        record = record_name(name, action, audit_id)
    who = requester(req.get("userInfo") or {})
    said = f" from {details['from']} to {details['to']}" if "to" in details else ""
    said += f" ({details['changed']})" if details.get("changed") else ""
    return audit_record(
        name=record,
        namespace=str(req.get("namespace") or operator_namespace),
        audit_id=audit_id,
        stage="RequestReceived",
        verb=VERBS[req["operation"]],
        user=who,
        object_ref=ref,
        received=now,
        stamp=now,
        action=action,
        reason=f"{kind}{action}",
        message=f"{who['username']} {action.lower()} {kind} {name}{said}",
        generation=int(meta.get("generation") or 0),
        details=details or None,
    )
