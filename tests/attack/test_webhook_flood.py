"""A hostile caller of a webhook's port, against the deployed trainer controller: a pod that
floods it with the largest reviews the server takes (15 MiB each, 24 at a time). Each caller may
have 1024 reviews or 16 MiB in flight (trainerop_common.caller_budget); the rest are answered 429
before they are read, so the controller stays within its memory and the API server's own
reviews — a user's Trainer created meanwhile — are answered as ever."""

from typing import Any

from tests.attack.conftest import output_of, pod_of, start_a_pod
from tests.factories import trainer_manifest
from tests.harness import Cluster, eventually

# Prints "flooding", then ROUNDS rounds of AT_ONCE reviews of PADDING bytes sent together, then
# the HTTP statuses it was answered (0: the server closed the connection on an unread body).
FLOODER = """
import json, ssl, sys, urllib.error, urllib.request
from concurrent.futures import ThreadPoolExecutor
url, rounds, at_once, padding = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
trainer = {"apiVersion": "trainer.operator.kubeflow.org/v1alpha1", "kind": "Trainer",
           "metadata": {"name": "flood", "namespace": "anywhere", "annotations": {"padding": "x" * padding}},
           "spec": {"framework": "pytorch", "image": "busybox:1.36"}}
request = {"uid": "flood", "operation": "CREATE", "namespace": "anywhere", "userInfo": {"username": "mallory"},
           "kind": {"group": "trainer.operator.kubeflow.org", "version": "v1alpha1", "kind": "Trainer"},
           "resource": {"group": "trainer.operator.kubeflow.org", "version": "v1alpha1", "resource": "trainers"},
           "object": trainer}
body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}).encode()
context = ssl.create_default_context()
context.check_hostname = False
context.verify_mode = ssl.CERT_NONE
def send(_):
    try:
        req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, context=context, timeout=60) as response:
            return response.status
    except urllib.error.HTTPError as err:
        return err.code
    except (urllib.error.URLError, ConnectionError):
        return 0
print("flooding", flush=True)
statuses = []
with ThreadPoolExecutor(at_once) as pool:
    for _ in range(rounds):
        statuses += list(pool.map(send, range(at_once)))
print(json.dumps(statuses))
"""
ROUNDS, AT_ONCE, PADDING = 4, 24, 15 * 1024 * 1024


def restarts(pod: dict[str, Any]) -> int:
    return sum(int(s.get("restartCount") or 0) for s in pod["status"].get("containerStatuses") or ())


def test_a_flood_of_large_reviews_is_throttled_and_a_users_trainer_is_still_admitted(
    cluster: Cluster, namespace: str, pods_namespace: str
) -> None:
    before = pod_of(cluster, "trainer")
    url = f"https://{before['status']['podIP']}:9443/validate-trainer"  # deploy/controllers/trainer/webhook.yaml
    args = (url, str(ROUNDS), str(AT_ONCE), str(PADDING))
    start_a_pod(cluster, pods_namespace, "flooder", FLOODER, *args)
    eventually(
        lambda: "flooding" in cluster.kubectl("logs", "flooder", "-n", pods_namespace) or None,
        timeout=120,
        what="the flood to start",
    )
    cluster.apply(trainer_manifest("meanwhile", topology={"workers": 1}), namespace)  # the API server's review
    statuses = output_of(cluster, pods_namespace, "flooder")  # once the flood has ended
    assert cluster.get("trainer", "meanwhile", namespace)["metadata"]["uid"]
    assert 429 in statuses, statuses  # beyond the caller's budget, refused unread
    after = pod_of(cluster, "trainer")
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    assert restarts(after) == restarts(before)  # not killed for its memory
