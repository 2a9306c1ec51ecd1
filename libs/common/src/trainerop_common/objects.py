"""What of a Kubernetes object a controller keeps (pure): never the field managers' record."""

from collections.abc import Callable, Mapping
from typing import Any

# What of an object a cache holds: a pure projection, applied to each object as it arrives.
Keep = Callable[[dict[str, Any]], dict[str, Any]]


def slim(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` without what no decision reads and every object carries: the field managers'
    record (often the largest part of a small object). The original is not changed."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or "managedFields" not in meta:
        return obj
    return {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}


def metadata_only(obj: dict[str, Any]) -> dict[str, Any]:
    """Only ``obj``'s metadata: a list read with this projection asks the API server for nothing
    else (:meth:`.kube.Kube.list_core`)."""
    return {"metadata": obj.get("metadata", {})}


def labels_only(obj: dict[str, Any]) -> dict[str, Any]:
    """Only ``obj``'s identity (name, namespace, uid) and labels: a cache of Namespaces read for
    their Pod Security label holds no more (their field managers' record is most of the rest).
    Listed with the metadata alone too (:meth:`.kube.Kube._list_pages`)."""
    meta = obj.get("metadata", {})
    return {"metadata": {k: meta[k] for k in ("name", "namespace", "uid", "labels") if k in meta}}


# Projections of the metadata alone: a list for one of them asks the API server for nothing else.
METADATA_KEEPS = (metadata_only, labels_only)

MANAGER_KEYS = ("manager", "operation", "subresource")


def managers_only(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` with its field managers named but not their fields (``fieldsV1``: about two thirds of
    a Trainer's bytes once five controllers write its status). Who created the spec stays readable
    (the audit controller names it for a creation its webhook missed). The original is not changed."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or not meta.get("managedFields"):
        return obj
    managers = [{k: e[k] for k in MANAGER_KEYS if k in e} for e in meta["managedFields"] if isinstance(e, dict)]
    return {**obj, "metadata": {**meta, "managedFields": managers}}


def holds(live: object, wanted: object) -> bool:
    """Whether ``live`` already says everything ``wanted`` says: each key of a mapping with a value
    that holds, lists item by item and of the same length, anything else equal. What the API
    server added (metadata, defaults) is ignored, so an apply of ``wanted`` would change nothing."""
    if isinstance(wanted, dict):
        return isinstance(live, dict) and all(k in live and holds(live[k], v) for k, v in wanted.items())
    if isinstance(wanted, list):
        return isinstance(live, list) and len(live) == len(wanted) and all(map(holds, live, wanted))
    return live == wanted


def removed_at_once(answer: object) -> bool:
    """Whether the API server's answer to a DELETE says the object is gone already, with nothing
    left to wait for: the object as it was, with no grace period running and no finalizer (the
    API server removes at once a pod not scheduled yet, a Failed or Succeeded one, or one deleted
    with grace 0), or a Status of success (kinds that do not return the object). Anything else
    (a graceful deletion under way, finalizers, no answer read) is not."""
    if not isinstance(answer, dict):
        return False
    if answer.get("kind") == "Status":
        return answer.get("status") == "Success"
    meta = answer.get("metadata")
    return isinstance(meta, dict) and not meta.get("finalizers") and not meta.get("deletionGracePeriodSeconds")


def controller_uid(obj: Mapping[str, Any]) -> str:
    """The uid of the object that controls ``obj`` (its owner reference marked controller), ""
    when none does."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or ()
    return next((str(r.get("uid") or "") for r in refs if r.get("controller")), "")
