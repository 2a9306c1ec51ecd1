"""What a user's request means for the audit trail: pure, table-tested, no I/O.

The audit webhook is a validating admission webhook that observes and never denies. The API
server sends it every create, update, scale and delete of Trainers and (Cluster)TrainingProfiles
and every delete of an AuditLog, after authenticating and authorising the user; this module turns
one ``AdmissionReview`` request into the AuditLog that records it (or nothing: a dry run, an
update that changes nothing a user controls, the audit controller's own retention).
"""

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from trainerop_common.api import GROUP

from .decide import created_name
from .record import audit_record, record_name

AUDITED = {
    "trainers": "Trainer",
    "trainingprofiles": "TrainingProfile",
    "clustertrainingprofiles": "ClusterTrainingProfile",
}
VERBS = {"CREATE": "create", "UPDATE": "update", "DELETE": "delete"}
MAX_GROUPS = 64
# Deletes every object of a namespace being deleted; its audit records go with the namespace (the
# namespace's deletion is in the API server's own audit log), so these are not recorded one by one.
NAMESPACE_CONTROLLER = "system:serviceaccount:kube-system:namespace-controller"
# Metadata a user does not control, or that mirrors the spec.
IGNORED_ANNOTATIONS = {"kubectl.kubernetes.io/last-applied-configuration"}


def changed_paths(old: Any, new: Any, path: str, depth: int = 3) -> list[str]:
    """Dotted paths (to ``depth`` levels) whose values differ; never the values themselves."""
    if old == new:
        return []
    if depth <= 0 or not isinstance(old, Mapping) or not isinstance(new, Mapping):
        return [path]
    out = []
    for key in sorted(set(old) | set(new)):
        out += changed_paths(old.get(key), new.get(key), f"{path}.{key}", depth - 1)
    return out


def _suspended(obj: Mapping[str, Any]) -> bool:
    return bool(((obj.get("spec") or {}).get("runPolicy") or {}).get("suspend"))


def _workers(obj: Mapping[str, Any]) -> Any:
    return ((obj.get("spec") or {}).get("topology") or {}).get("workers")


def _metadata_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    out = []
    for part in ("labels", "annotations"):
        before = {k: v for k, v in (old.get(part) or {}).items() if k not in IGNORED_ANNOTATIONS}
        after = {k: v for k, v in (new.get(part) or {}).items() if k not in IGNORED_ANNOTATIONS}
        out += changed_paths(before, after, f"metadata.{part}", 1)
    return out


def update_action(
    resource: str, subresource: str, old: Mapping[str, Any], new: Mapping[str, Any]
) -> tuple[str, dict[str, str]] | None:
    """(action, details) of an update, or None when nothing a user controls changed."""
    if subresource == "scale":
        before, after = (old.get("spec") or {}).get("replicas"), (new.get("spec") or {}).get("replicas")
        return None if before == after else ("Scaled", {"from": str(before), "to": str(after)})
    if subresource == "status":
        # The controllers' own status writes do not come here (the webhook's matchCondition); anyone
        # else writing status could fake an operator action, so that is recorded.
        changes = changed_paths(old.get("status"), new.get("status"), "status")
        return ("Updated", {"changed": ", ".join(changes)}) if changes else None
    if subresource:
        return None
    changes = changed_paths(old.get("spec"), new.get("spec"), "spec")
    changes += _metadata_changes(old.get("metadata") or {}, new.get("metadata") or {})
    if not changes:
        return None
    details = {"changed": ", ".join(changes)}
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


def observe(
    review: Mapping[str, Any], now: str, operator_namespace: str, self_user: str | None
) -> dict[str, Any] | None:
    """The AuditLog recording one admission request, or None when there is nothing to record."""
    req = review.get("request") or {}
    if req.get("dryRun"):
        return None
    resource = (req.get("resource") or {}).get("resource", "")
    operation = req.get("operation", "")
    user = req.get("userInfo") or {}
    if operation not in VERBS or (resource not in AUDITED and resource != "auditlogs"):
        return None
    if resource == "auditlogs" and (operation != "DELETE" or user.get("username") in (self_user, NAMESPACE_CONTROLLER)):
        return None  # retention by this controller is recorded by the controller itself
    old, new = req.get("oldObject") or {}, req.get("object") or {}
    subject = old if operation == "DELETE" else new
    meta = subject.get("metadata") or {}
    name = str(meta.get("name") or req.get("name") or "")
    uid = str(meta.get("uid") or "")
    subresource = str(req.get("subResource") or "")
    details: dict[str, str] = {}
    if operation == "CREATE":
        action = "Created"
    elif operation == "DELETE":
        action = "Deleted"
    else:
        found = update_action(resource, subresource, old, new)
        if found is None:
            return None
        action, details = found
    kind = AUDITED.get(resource, "AuditLog")
    namespace = str(req.get("namespace") or operator_namespace)
    ref: dict[str, Any] = {"resource": resource, "name": name, "apiGroup": GROUP}
    ref["apiVersion"] = (req.get("resource") or {}).get("version", "")
    if req.get("namespace"):
        ref["namespace"] = req["namespace"]
    if uid:
        ref["uid"] = uid
    if subresource:
        ref["subresource"] = subresource
    audit_id = str(req.get("uid") or "")
    if resource == "trainers" and action == "Created" and uid:
        record = created_name(name, uid)  # shared with the controller's record of an unobserved creation
    else:
        record = record_name(name, action, audit_id)
    who = {"username": str(user.get("username") or "unknown")}
    if user.get("uid"):
        who["uid"] = str(user["uid"])
    groups = [str(g)[:256] for g in user.get("groups") or []][:MAX_GROUPS]  # what the CRD holds
    said = f" from {details['from']} to {details['to']}" if "to" in details else ""
    said += f" ({details['changed']})" if details.get("changed") else ""
    return audit_record(
        name=record,
        namespace=namespace,
        audit_id=audit_id,
        stage="RequestReceived",
        verb=VERBS[operation],
        user={**who, **({"groups": groups} if groups else {})},
        object_ref=ref,
        received=now,
        stamp=now,
        action=action,
        reason=f"{kind}{action}",
        message=f"{who['username']} {action.lower()} {kind} {name}{said}",
        generation=int(meta.get("generation") or 0),
        details=details or None,
    )
