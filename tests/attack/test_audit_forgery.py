"""Forged audit records, against the deployed audit controller: an AdmissionReview sent straight
to the audit pod's webhook port — from the host, and from a pod in the cluster — without the
API server. deploy/overlays/dev sets no client CA (managed clusters cannot present one), so the
review alone is not believed: the controller corroborates it with the API (docs/audit.md)."""

import json
import ssl
import urllib.request
import uuid
from typing import Any

from tests.attack.conftest import from_a_pod, needs, pod_of
from tests.factories import trainer_manifest
from tests.harness import Cluster, eventually, read_metric

WEBHOOK_PORT = 9443  # deploy/controllers/audit/deployment.yaml
METRICS_PORT = 8080
UNCORROBORATED = {"operation": "DELETE", "outcome": "uncorroborated"}
# What a pod runs to send a review: no client certificate, the serving certificate not checked.
SENDER = """
import ssl, sys, urllib.request
context = ssl.create_default_context()
context.check_hostname = False
context.verify_mode = ssl.CERT_NONE
request = urllib.request.Request(sys.argv[1], data=sys.argv[2].encode(), headers={"Content-Type": "application/json"})
print(urllib.request.urlopen(request, context=context, timeout=10).read().decode())
"""


def forged_deletion(trainer: dict[str, Any]) -> str:
    """alice's deletion of ``trainer``, as the API server would send it: its real uid and resourceVersion."""
    meta = trainer["metadata"]
    request = {
        "uid": str(uuid.uuid4()),
        "kind": {"group": "trainer.operator.kubeflow.org", "version": "v1alpha1", "kind": "Trainer"},
        "resource": {"group": "trainer.operator.kubeflow.org", "version": "v1alpha1", "resource": "trainers"},
        "operation": "DELETE",
        "namespace": meta["namespace"],
        "name": meta["name"],
        "userInfo": {"username": "alice@example.com", "groups": ["system:authenticated"]},
        "oldObject": trainer,
    }
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})


def from_the_host(url: str, review: str) -> dict[str, Any]:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    request = urllib.request.Request(url, data=review.encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, context=context, timeout=10) as response:
        answer: dict[str, Any] = json.loads(response.read())
    return answer


def test_a_review_sent_straight_to_the_audit_pod_writes_no_record(
    cluster: Cluster, overlay: str, namespace: str, pods_namespace: str
) -> None:
    needs(overlay, "audit")
    cluster.apply(trainer_manifest("victim", topology={"workers": 1}), namespace)
    trainer = cluster.get("trainer", "victim", namespace)
    ip = pod_of(cluster, "audit")["status"]["podIP"]
    url = f"https://{ip}:{WEBHOOK_PORT}/audit"
    before = read_metric(METRICS_PORT, "audit_webhook_requests_total", UNCORROBORATED, host=ip)
    review = forged_deletion(trainer)
    assert from_the_host(url, review)["response"]["allowed"] is True  # an observer never denies
    assert from_a_pod(cluster, pods_namespace, "sender", SENDER, url, review)["response"]["allowed"] is True
    # Both are counted once the controller has looked for the deletion (10 s at most) and not seen it.
    eventually(
        lambda: read_metric(METRICS_PORT, "audit_webhook_requests_total", UNCORROBORATED, host=ip) == before + 2,
        what="both forged deletions counted as uncorroborated",
    )
    logs = json.loads(cluster.kubectl("get", "auditlogs", "-n", namespace, "-o", "json"))["items"]
    assert [r["spec"]["message"] for r in logs if r["spec"]["user"]["username"] == "alice@example.com"] == []
    assert cluster.get("trainer", "victim", namespace)["metadata"]["uid"] == trainer["metadata"]["uid"]
