"""The audit webhook also observes Kubeflow v1 jobs (group kubeflow.org): kopf's admission engine
hands a PyTorchJob's review to the audit observer through the very handler that serves the
operator's own kinds, so only a review from the API server's certificate is observed where that is
required (trainerop_common.webhooks.register_observer's ``others``, as the audit controller registers them)."""

from collections.abc import Mapping
from typing import Any

import kopf
import pytest
from kopf._cogs.structs import ids, references
from kopf._core.engines import admission as kopf_admission
from kopf._core.engines import indexing
from kopf._core.reactor import inventory

from trainerop_audit.user_recorder import JOB_RESOURCES, RESOURCES, WEBHOOK
from trainerop_common.api import KINDS, KUBEFLOW_KINDS
from trainerop_common.api.kubeflow import KUBEFLOW_GROUP, KUBEFLOW_VERSION
from trainerop_common.webhooks import REVIEW, register_observer


def job_review() -> dict[str, Any]:
    job = {"metadata": {"name": "mnist", "namespace": "team-a", "uid": "j-1"}, "spec": {}}
    request = {
        "uid": "r-1",
        "resource": {"group": "kubeflow.org", "version": "v1", "resource": "pytorchjobs"},
        "namespace": "team-a",
        "operation": "CREATE",
        "userInfo": {"username": "alice@example.com"},
        "object": job,
    }
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


async def observed_by_the_audit_webhook(review: dict[str, Any], authenticated: bool, peer: bool) -> list[Any]:
    """The reviews the audit observer saw of one review served by kopf's admission engine."""
    seen: list[Mapping[str, Any]] = []

    async def observer(r: Mapping[str, Any]) -> None:
        seen.append(r)

    registry = kopf.OperatorRegistry()
    jobs = [(KUBEFLOW_GROUP, KUBEFLOW_VERSION, plural) for plural in JOB_RESOURCES]
    register_observer(registry, WEBHOOK, RESOURCES, observer, authenticated, jobs)
    insights = references.Insights()
    insights.webhook_resources.update(
        references.Resource(k.group, k.version, k.plural, kind=k.kind, namespaced=k.scope == "Namespaced")
        for k in (*KINDS, *KUBEFLOW_KINDS)
    )
    token = REVIEW.set(review)
    try:
        await kopf_admission.serve_admission_request(
            review,  # type: ignore[arg-type]  # an AdmissionReview as the API server sends it
            sslpeer={"subject": "kube-apiserver"} if peer else None,
            webhook=ids.HandlerId(WEBHOOK),
            settings=kopf.OperatorSettings(),
            memories=inventory.ResourceMemories(),
            memobase=kopf.Memo(),  # type: ignore[arg-type]  # kopf's own default memo
            registry=registry,
            insights=insights,
            indices=indexing.OperatorIndices(indexing.OperatorIndexers()),
        )
    finally:
        REVIEW.reset(token)
    return seen


@pytest.mark.parametrize(
    ("authenticated", "peer", "seen"),
    [
        (False, False, True),  # corroborated later by the recorder
        (True, True, True),  # from the API server's certificate
        (True, False, False),  # anyone else reaching the port: ignored, as for a Trainer's review
    ],
)
async def test_a_pytorchjobs_review_reaches_the_audit_observer(authenticated: bool, peer: bool, seen: bool) -> None:
    review = job_review()
    assert (await observed_by_the_audit_webhook(review, authenticated, peer) == [review]) is seen
