"""Whether the API server's own reading of the object bears out an admission review: pure,
table-tested, no I/O (:mod:`user_recorder` reads the object).

Without the API server's client certificate anyone who reaches the webhook's port can send a
review, so a review alone is not believed. The API server calls a validating webhook before it
stores the change, so the object as read from the API when the review arrives (``before``) and
as read once the review is answered (``after``) must both agree with it:

- CREATE: at receipt no object of that name, or one with another uid (a forger cannot know the
  uid the API server is about to generate); afterwards the object exists with the review's uid.
- UPDATE (scale and status too): at receipt the object has the review's uid and oldObject's
  resourceVersion; afterwards a newer resourceVersion, and what the review says changed holds
  the review's values (for a scale: the Trainer's workers are the Scale's replicas).
- DELETE: at receipt the object has oldObject's uid; afterwards it is gone, replaced by an
  object with another uid, or being deleted (a deletionTimestamp it did not have at receipt).

Each record says how its identity was established (:data:`IDENTITY` in its details).
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trainerop_common.api import kind_info

from .record import IDENTITY
from .user_actions import changed_fields

CERTIFICATE = "api-server-certificate"  # the review came with the API server's client certificate
CORROBORATED = "corroborated"  # the object read from the API before and after bears the review out
# Where a Scale's replicas go in a Trainer (the CRD's scale subresource).
SCALE_REPLICAS = tuple(str((kind_info("Trainer").scale or {})["specReplicasPath"]).lstrip(".").split("."))

Keys = tuple[str, ...]


@dataclass(frozen=True)
class Claim:
    """What a review says of its object."""

    operation: str
    uid: str
    version: str = ""  # oldObject's resourceVersion (an update)
    values: tuple[tuple[Keys, Any], ...] = ()  # what an update says the object holds afterwards
    was: tuple[tuple[Keys, Any], ...] = ()  # what it says the object held before, at those keys


def value_at(obj: Any, keys: Keys) -> Any:
    """The value at ``keys`` in nested mappings; None where there is none."""
    for key in keys:
        obj = obj.get(key) if isinstance(obj, Mapping) else None
    return obj


def _meta(obj: Any) -> Mapping[str, Any]:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    return meta if isinstance(meta, Mapping) else {}


def claim_of(req: Mapping[str, Any]) -> Claim:
    """The claim of one review request (``request`` of an AdmissionReview)."""
    operation = str(req.get("operation") or "")
    old, new = req.get("oldObject") or {}, req.get("object") or {}
    if operation == "CREATE":
        return Claim(operation, str(_meta(new).get("uid") or ""))
    if operation == "DELETE":
        return Claim(operation, str(_meta(old).get("uid") or ""))
    subresource = str(req.get("subResource") or "")
    if subresource == "scale":
        values: tuple[tuple[Keys, Any], ...] = ((SCALE_REPLICAS, value_at(new, ("spec", "replicas"))),)
        was: tuple[tuple[Keys, Any], ...] = ((SCALE_REPLICAS, value_at(old, ("spec", "replicas"))),)
    else:
        keys = changed_fields(subresource, old, new)
        values = tuple((k, value_at(new, k)) for k in keys)
        was = tuple((k, value_at(old, k)) for k in keys)
    version = str(_meta(old).get("resourceVersion") or "")
    return Claim(operation, str(_meta(old).get("uid") or _meta(new).get("uid") or ""), version, values, was)


def before_doubt(claim: Claim, before: Mapping[str, Any] | None) -> str | None:
    """Why the object as read when the review arrived does not bear it out; None if it does."""
    if not claim.uid:
        return "the review names no uid"
    uid = str(_meta(before).get("uid") or "") if before is not None else None
    if claim.operation == "CREATE":
        return "an object of that name with that uid exists already" if uid == claim.uid else None
    if uid is None:
        return "there is no such object"
    if uid != claim.uid:
        return "the object has another uid"
    if claim.operation == "UPDATE" and str(_meta(before).get("resourceVersion") or "") != claim.version:
        return "the object's resourceVersion is not the review's oldObject's"
    # The same version is the same object: what the review says it held must be what it holds.
    wrong = [".".join(keys) for keys, value in claim.was if value_at(before, keys) != value]
    return f"the object does not hold what the review says it held ({', '.join(wrong)})" if wrong else None


def _change_doubt(claim: Claim, after: Mapping[str, Any]) -> str | None:
    if str(_meta(after).get("resourceVersion") or "") == claim.version:
        return "the object has not changed"
    wrong = [".".join(keys) for keys, value in claim.values if value_at(after, keys) != value]
    return f"the object does not hold what the review says changed ({', '.join(wrong)})" if wrong else None


def after_doubt(claim: Claim, before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> str | None:
    """Why the object as read after the answer does not (yet) show the review's effect; None if it does."""
    uid = str(_meta(after).get("uid") or "") if after is not None else None
    if claim.operation == "CREATE":
        return None if uid == claim.uid else "no object with the review's uid appeared"
    if claim.operation == "DELETE":
        if uid != claim.uid:  # gone, or replaced by another object of that name
            return None
        deleting = bool(_meta(after).get("deletionTimestamp")) and not _meta(before).get("deletionTimestamp")
        return None if deleting else "the object is still there"
    if after is None or uid != claim.uid:
        return "the object went before its change was seen"
    return _change_doubt(claim, after)


def doubt(claim: Claim, before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> str | None:
    """Why a review is not corroborated by the object read before and after it; None: it is."""
    return before_doubt(claim, before) or after_doubt(claim, before, after)


def identified(record: dict[str, Any], how: str) -> dict[str, Any]:
    """The record, saying in its details how its requester's identity was established."""
    spec = record["spec"]
    return {**record, "spec": {**spec, "details": {**(spec.get("details") or {}), IDENTITY: how}}}
