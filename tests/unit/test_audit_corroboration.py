"""When the API bears an admission review out (trainerop_audit.corroboration): a table over the
review, the object as read when it arrived (before) and as read after the answer (after)."""

import copy
from typing import Any

import pytest

from tests.factories import trainer_body
from trainerop_audit.corroboration import CORROBORATED, claim_of, doubt, identified
from trainerop_audit.record import IDENTITY

TRAINER = trainer_body("llama", "team-a", uid="abc", resource_version="7", epochs=1, topology={"workers": 2})


def request(operation: str, obj: Any = None, old: Any = None, **extra: Any) -> dict[str, Any]:
    resource = {"group": "trainer.operator.kubeflow.org", "version": "v1alpha1", "resource": "trainers"}
    return {"uid": "r-1", "resource": resource, "namespace": "team-a", "name": "llama", "operation": operation} | {
        "object": obj,
        "oldObject": old,
        **extra,
    }


def trainer(uid: str = "abc", version: str = "7", **changes: Any) -> dict[str, Any]:
    """TRAINER with another uid, resourceVersion, spec fields, or metadata (``metadata`` merged)."""
    body = copy.deepcopy(TRAINER)
    body["metadata"] |= {"uid": uid, "resourceVersion": version, **changes.pop("metadata", {})}
    body["spec"] |= changes
    return body


def scale(replicas: int, version: str = "7") -> dict[str, Any]:
    meta = {"name": "llama", "namespace": "team-a", "uid": "abc", "resourceVersion": version}
    return {"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": meta, "spec": {"replicas": replicas}}


def with_status(body: dict[str, Any], **status: Any) -> dict[str, Any]:
    return {**body, "status": status}


DELETING = {"deletionTimestamp": "2026-11-30T00:00:00Z"}
GOING = trainer(metadata=DELETING)
LABELLED = {"labels": {"app.kubernetes.io/team": "b"}}
NEW = trainer(uid="new", version="")  # what a create's review holds: the uid the API server generated
CREATE = request("CREATE", NEW)
UPDATE = request("UPDATE", trainer(epochs=2), TRAINER)
LABEL = request("UPDATE", trainer(metadata=LABELLED), TRAINER)
SCALE = request("UPDATE", scale(4), scale(2), subResource="scale")
STATUS = request("UPDATE", with_status(TRAINER, phase="Failed"), TRAINER, subResource="status")
DELETE = request("DELETE", None, TRAINER)

# (what happens, review request, before, after, None when corroborated, else a part of why not)
CASES = [
    ("genuine create", CREATE, None, trainer(uid="new", version="8"), None),
    ("create over one being deleted", CREATE, GOING, trainer("new"), None),
    ("forged create of an existing object", request("CREATE", trainer()), TRAINER, TRAINER, "exists already"),
    ("created object never appears", CREATE, None, None, "no object with the review's uid"),
    ("another object appears", CREATE, None, trainer("other"), "no object with the review's uid"),
    ("create naming no uid", request("CREATE", trainer(uid="")), None, None, "names no uid"),
    ("genuine update", UPDATE, TRAINER, trainer(version="8", epochs=2), None),
    ("update of a label", LABEL, TRAINER, trainer("abc", "8", metadata=LABELLED), None),
    ("stale resourceVersion", UPDATE, trainer(version="8"), trainer(version="9", epochs=2), "resourceVersion"),
    ("update of another object", UPDATE, trainer("other"), trainer("other", "8", epochs=2), "another uid"),
    ("update never stored", UPDATE, TRAINER, TRAINER, "has not changed"),
    # Claims a change to what the object already holds, from a value it never held: any later
    # write (a status write) moves the version on, and the claimed values are there.
    (
        "forged update from a made-up old value",
        request("UPDATE", TRAINER, trainer(epochs=99)),
        TRAINER,
        trainer(version="8"),
        "says it held",
    ),
    ("another change, not the claimed one", UPDATE, TRAINER, trainer(version="8", epochs=3), "spec.epochs"),
    ("updated object gone", UPDATE, TRAINER, None, "went before"),
    ("updated object replaced", UPDATE, TRAINER, trainer("other", "9", epochs=2), "went before"),
    ("genuine scale", SCALE, TRAINER, trainer(version="8", topology={"workers": 4}), None),
    ("scale not done", SCALE, TRAINER, trainer(version="8"), "spec.topology.workers"),
    ("genuine status write", STATUS, TRAINER, with_status(trainer(version="8"), phase="Failed"), None),
    ("status write not done", STATUS, TRAINER, trainer(version="8"), "status"),
    ("genuine delete", DELETE, TRAINER, None, None),
    ("delete held by a finalizer", DELETE, TRAINER, trainer(version="8", metadata=DELETING), None),
    ("deleted and created again", DELETE, TRAINER, trainer("new", "9"), None),
    ("forged delete of an object that stays", DELETE, TRAINER, TRAINER, "still there"),
    ("forged delete of one being deleted", request("DELETE", None, GOING), GOING, GOING, "still there"),
    ("delete of what does not exist", DELETE, None, None, "no such object"),
    ("delete naming another uid", request("DELETE", None, trainer("forged")), TRAINER, None, "another uid"),
]


@pytest.mark.parametrize(("req", "before", "after", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_review_is_corroborated_only_when_the_object_before_and_after_bears_it_out(
    req: dict[str, Any], before: dict[str, Any] | None, after: dict[str, Any] | None, expected: str | None
) -> None:
    why = doubt(claim_of(req), before, after)
    assert (why is None) == (expected is None), why
    assert expected is None or expected in str(why)


def test_a_record_says_how_its_identity_was_established_beside_its_details() -> None:
    record: dict[str, Any] = {
        "metadata": {"name": "r"},
        "spec": {"action": "Updated", "details": {"changed": "spec.epochs"}},
    }
    assert identified(record, CORROBORATED)["spec"]["details"] == {"changed": "spec.epochs", IDENTITY: "corroborated"}
    assert identified({"spec": {"action": "Deleted"}}, CORROBORATED)["spec"]["details"] == {IDENTITY: "corroborated"}
    assert "identity" not in record["spec"]["details"]
