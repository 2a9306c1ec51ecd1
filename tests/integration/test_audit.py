"""The audit trail: users' requests recorded with their identity by the audit webhook (believed
from the API server's client certificate, or, without one, corroborated by reading the object),
operator actions with the acting controller's identity, records nobody can change and only audit
admins delete, one JSON line per record on stdout, and retention that records itself."""

import json
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from testbed import cluster as cluster_tool
from testbed import localdev
from tests.factories import trainer_manifest
from tests.harness import Cluster, KubectlError, eventually
from tests.integration.test_kubeflow import job, replica

NAME = "audited"
API = "trainer.operator.kubeflow.org/v1alpha1"
TRAINER = trainer_manifest(NAME, topology={"workers": 1})
SA = "system:serviceaccount:trainer-operator-system:trainer-operator-"


@pytest.fixture(params=["api-server-certificate", "corroborated"])
def identity(request: pytest.FixtureRequest, cluster: Cluster) -> Iterator[str]:
    """How the audit webhook establishes who asked: the local controllers check the API server's
    client certificate; "corroborated": the audit controller restarted without
    --webhook-client-ca-file, as where client certificates are impossible."""
    if request.param == "corroborated":
        localdev.restart("audit", {"TRAINEROP_WEBHOOK_CLIENT_CA_FILE": ""})
    yield str(request.param)
    if request.param == "corroborated":
        localdev.restart("audit")


def records(cluster: Cluster, namespace: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads(cluster.kubectl("get", "auditlogs", "-n", namespace, "-o", "json"))[
        "items"
    ]
    return items


def find(cluster: Cluster, namespace: str, what: str, **want: Any) -> dict[str, Any]:
    """The first record whose spec has these values (``objectRef__resource`` reads objectRef.resource)."""

    def matches(spec: dict[str, Any]) -> bool:
        for key, value in want.items():
            node: Any = spec
            for part in key.split("__"):
                node = node.get(part) if isinstance(node, dict) else None
            if node != value:
                return False
        return True

    return eventually(lambda: next((r for r in records(cluster, namespace) if matches(r["spec"])), None), what=what)


def a_user(cluster: Cluster, namespace: str, role: str = "edit") -> str:
    user = f"dev-{uuid.uuid4().hex[:6]}"
    cluster.kubectl(
        "create", "rolebinding", f"{user}-{role}", "-n", namespace, f"--clusterrole={role}", f"--user={user}"
    )
    eventually(
        lambda: (
            cluster.kubectl("auth", "can-i", "create", "trainers", "-n", namespace, f"--as={user}").strip() == "yes"
        ),
        what="the edit role to aggregate the operator's rules",
    )
    return user


def first_record(cluster: Cluster, namespace: str) -> str:
    cluster.apply(TRAINER, namespace)
    return str(find(cluster, namespace, "the Trainer's creation record", action="Created")["metadata"]["name"])


def test_users_requests_are_recorded_with_their_identity_and_verb(
    cluster: Cluster, namespace: str, identity: str
) -> None:
    user = a_user(cluster, namespace)
    as_user = (f"--as={user}", "--as-group=team-a", "-n", namespace)
    cluster.kubectl("apply", "--dry-run=server", "-f", "-", *as_user, stdin=json.dumps(TRAINER))
    cluster.kubectl("create", "-f", "-", *as_user, stdin=json.dumps(TRAINER))
    uid = cluster.get("trainer", NAME, namespace)["metadata"]["uid"]
    created = find(cluster, namespace, "the creation", action="Created", objectRef__resource="trainers")
    spec = created["spec"]
    assert spec["user"]["username"] == user
    assert "team-a" in spec["user"]["groups"]
    assert (spec["verb"], spec["stage"]) == ("create", "RequestReceived")
    assert spec["objectRef"] == {
        "resource": "trainers",
        "namespace": namespace,
        "name": NAME,
        "uid": uid,
        "apiGroup": "trainer.operator.kubeflow.org",
        "apiVersion": "v1alpha1",
    }
    assert len(spec["auditID"]) == 36
    assert created["metadata"]["name"] == f"{NAME}-created-{uid[:8]}"  # one creation record, the webhook's
    assert created["spec"]["details"] == {"identity": identity}
    merge = ("patch", "trainer", NAME, "--type=merge", "-p")
    cluster.kubectl(*merge, '{"spec":{"epochs":2}}', *as_user)
    cluster.kubectl("scale", "trainer", NAME, "--replicas=2", *as_user)
    cluster.kubectl(*merge, '{"spec":{"runPolicy":{"suspend":true}}}', *as_user)
    cluster.kubectl(*merge, '{"spec":{"runPolicy":{"suspend":false}}}', *as_user)
    cluster.apply({"apiVersion": API, "kind": "TrainingProfile", "metadata": {"name": "p"}, "spec": {}}, namespace)
    cluster.kubectl("delete", "trainingprofile", "p", *as_user)
    cluster.kubectl("delete", "trainer", NAME, *as_user)
    expected = [
        ("Updated", "update", "trainers", None, {"changed": "spec.epochs"}),
        ("Scaled", "update", "trainers", "scale", {"from": "1", "to": "2"}),
        ("Suspended", "update", "trainers", None, {"changed": "spec.runPolicy.suspend"}),
        ("Resumed", "update", "trainers", None, {"changed": "spec.runPolicy.suspend"}),
        ("Deleted", "delete", "trainingprofiles", None, None),
        ("Deleted", "delete", "trainers", None, None),
    ]
    for action, verb, resource, subresource, details in expected:
        found = find(
            cluster,
            namespace,
            f"{action} {resource} by {user}",
            action=action,
            user__username=user,
            objectRef__resource=resource,
        )["spec"]
        assert (found["verb"], found["objectRef"].get("subresource"), found.get("details")) == (
            verb,
            subresource,
            {**(details or {}), "identity": identity},
        ), action
    # The admin's own profile creation is recorded too, and no dry run is.
    admin = find(cluster, namespace, "the admin's profile", action="Created", objectRef__resource="trainingprofiles")
    assert admin["spec"]["user"]["username"] == "trainer-operator-admin"
    creations = [r for r in records(cluster, namespace) if r["spec"]["action"] == "Created"]
    assert len(creations) == 2, [r["metadata"]["name"] for r in creations]


def test_a_namespace_deletion_leaves_its_trainers_deletion_on_record(
    cluster: Cluster, namespace: str, identity: str
) -> None:
    first_record(cluster, namespace)
    uid = cluster.get("trainer", NAME, namespace)["metadata"]["uid"]
    cluster.kubectl("delete", "namespace", namespace, "--wait=false")
    # Nothing can be created in a namespace being deleted: the record goes to the operator's.
    deleted = find(cluster, "trainer-operator-system", "the Trainer's deletion", action="Deleted", objectRef__uid=uid)
    assert deleted["spec"]["user"]["username"] == "system:serviceaccount:kube-system:namespace-controller"
    assert deleted["spec"]["objectRef"]["namespace"] == namespace
    assert deleted["spec"]["details"] == {"identity": identity}


def test_a_kubeflow_jobs_trainer_is_recorded_as_created_for_the_user_who_created_the_job(
    cluster: Cluster, namespace: str, identity: str
) -> None:
    """The kubeflow controller makes the Trainer (its own requests are not reviewed): the Trainer's
    creation record names the user the webhook recorded creating the job, as soon as that exists."""
    user, as_user = "alice@example.com", ("--as=alice@example.com", "-n", namespace)
    cluster.kubectl("create", "rolebinding", "alice-edit", "-n", namespace, "--clusterrole=edit", f"--user={user}")
    eventually(
        lambda: cluster.kubectl("auth", "can-i", "create", "pytorchjobs.kubeflow.org", *as_user).strip() == "yes",
        what="the edit role to aggregate the Kubeflow jobs' rules",
    )
    specs = {"Master": replica("pytorch"), "Worker": replica("pytorch")}
    cluster.kubectl("create", "-f", "-", *as_user, stdin=json.dumps(job("PyTorchJob", "mnist", specs)))
    job_uid = cluster.get("pytorchjob", "mnist", namespace)["metadata"]["uid"]
    trainer = eventually(lambda: cluster.get("trainer", "mnist", namespace), what="the job's Trainer")
    created = find(cluster, namespace, "the Trainer's creation", action="Created", objectRef__resource="trainers")
    spec = created["spec"]
    assert (spec["user"]["username"], spec["reason"]) == (user, "CreatedOnBehalf"), spec["message"]
    assert spec["objectRef"]["uid"] == trainer["metadata"]["uid"]
    assert spec["details"] == {"onBehalfOf": "PyTorchJob/mnist", "identity": identity}
    assert spec["message"] == f"Trainer mnist created by the kubeflow controller for PyTorchJob mnist of {user}"
    job_created = find(cluster, namespace, "the job's creation", action="Created", objectRef__uid=job_uid)["spec"]
    assert (job_created["user"], job_created["objectRef"]["apiGroup"]) == (spec["user"], "kubeflow.org")
    cluster.kubectl("delete", "pytorchjob", "mnist", *as_user, "--wait=false")
    deleted = find(cluster, namespace, "the job's deletion", action="Deleted", objectRef__uid=job_uid)["spec"]
    assert (deleted["user"]["username"], deleted["details"]) == (user, {"identity": identity})


def test_an_audit_record_cannot_be_changed_even_by_a_cluster_admin(cluster: Cluster, namespace: str) -> None:
    record = first_record(cluster, namespace)
    before = cluster.get("auditlog", record, namespace)
    for args in (
        ("label", "auditlog", record, "tampered=yes"),
        ("annotate", "auditlog", record, "note=changed"),
        ("patch", "auditlog", record, "--type=merge", "-p", json.dumps({"spec": {"user": {"username": "x"}}})),
    ):
        with pytest.raises(KubectlError) as refused:
            cluster.kubectl(*args, "-n", namespace)  # the admin kubeconfig: system:masters
        # The spec's own CEL rule answers first for a spec change; the admission policy for the rest.
        said = refused.value.stderr
        assert f"AuditLog {record} is an audit record and cannot be changed" in said or (
            "AuditLog records are immutable" in said
        ), args
    after = cluster.get("auditlog", record, namespace)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


def test_users_read_audit_records_and_only_audit_admins_delete_them(
    cluster: Cluster, namespace: str, identity: str
) -> None:
    record = first_record(cluster, namespace)
    user, auditor = a_user(cluster, namespace), f"auditor-{uuid.uuid4().hex[:6]}"
    assert record in cluster.kubectl("get", "auditlogs", "-n", namespace, "-o", "name", f"--as={user}")
    forged = cluster.get("auditlog", record, namespace)
    forged["metadata"] = {"name": "forged", "namespace": namespace}
    for args, stdin in (
        (("create", "-n", namespace, "-f", "-"), json.dumps(forged)),
        (("delete", "auditlog", record, "-n", namespace), None),
    ):
        with pytest.raises(KubectlError) as refused:
            cluster.kubectl(*args, f"--as={user}", stdin=stdin)
        assert "forbidden" in refused.value.stderr.lower(), args
    cluster.kubectl(
        "create",
        "rolebinding",
        "auditor",
        "-n",
        namespace,
        "--clusterrole=trainer-operator-audit-admin",
        f"--user={auditor}",
    )
    eventually(
        lambda: (
            cluster.kubectl("auth", "can-i", "delete", "auditlogs", "-n", namespace, f"--as={auditor}").strip() == "yes"
        ),
        what="the audit-admin binding",
    )
    with pytest.raises(KubectlError):
        cluster.kubectl("create", "-n", namespace, "-f", "-", f"--as={auditor}", stdin=json.dumps(forged))
    # Records outlive their Trainer (no owner reference); deleting old ones is the audit admin's
    # job, and that deletion is itself recorded.
    cluster.kubectl("delete", "trainer", NAME, "-n", namespace)
    cluster.kubectl("delete", "auditlog", record, "-n", namespace, f"--as={auditor}")
    assert record not in {r["metadata"]["name"] for r in records(cluster, namespace)}
    deletion = find(cluster, namespace, "the deletion of the record", action="Deleted", objectRef__name=record)
    assert deletion["spec"]["user"]["username"] == auditor
    assert deletion["spec"]["objectRef"]["resource"] == "auditlogs"
    assert deletion["spec"]["details"] == {"identity": identity}


def test_every_record_is_one_json_line_on_the_controllers_stdout(cluster: Cluster, namespace: str) -> None:
    record = first_record(cluster, namespace)
    stored = cluster.get("auditlog", record, namespace)

    def printed() -> dict[str, Any] | None:
        log = (localdev.state_dir() / "logs" / "controller-audit.log").read_text(errors="replace")
        for line in log.splitlines():
            if line.startswith('{"apiVersion"') and f'"name": "{record}"' in line:
                parsed: dict[str, Any] = json.loads(line)
                return parsed
        return None

    line = eventually(printed, what="the record's line in the audit controller's output")
    assert line["kind"] == "AuditLog"
    assert line["metadata"]["namespace"] == namespace
    assert line["spec"] == stored["spec"]


def test_operator_actions_are_recorded_with_the_controllers_identity(cluster: Cluster, namespace: str) -> None:
    cluster.apply(TRAINER, namespace)
    started = find(cluster, namespace, "the run's start recorded", action="Started")["spec"]
    assert started["user"]["username"] == SA + "trainer"
    assert (started["verb"], started["stage"]) == ("patch", "ResponseComplete")
    assert started["objectRef"]["name"] == NAME
    assert started["objectRef"]["subresource"] == "status"
    cluster.kubectl(
        "patch", "trainer", NAME, "-n", namespace, "--type=merge", "-p", '{"spec":{"runPolicy":{"suspend":true}}}'
    )
    suspended = find(cluster, namespace, "the suspension recorded", action="Suspended", user__username=SA + "trainer")
    assert suspended["spec"]["reason"] == "SuspendedByUser"
    assert suspended["spec"]["generation"] == 2

    def summarized() -> dict[str, Any] | None:  # status.audit may lag the records (--summary-delay-seconds)
        recorded: dict[str, Any] = cluster.get("trainer", NAME, namespace)["status"]["audit"]["recorded"]
        return recorded if set(recorded.get("conditions") or ()) >= {"Running", "Suspended"} else None

    recorded = eventually(summarized, what="status.audit to say what is recorded")
    assert recorded["created"] is True


@pytest.fixture
def strict_retention(cluster: Cluster) -> Iterator[int]:
    """The audit controller restarted to keep at most 3 records per namespace, checking every second."""
    limit = 3
    localdev.restart("audit", {"TRAINEROP_RETENTION_RECORDS": str(limit), "TRAINEROP_RETENTION_INTERVAL_SECONDS": "1"})
    yield limit
    localdev.restart("audit")


def test_retention_keeps_the_newest_records_and_records_what_it_deleted(
    cluster: Cluster, namespace: str, strict_retention: int
) -> None:
    cluster.apply(TRAINER, namespace)
    user = a_user(cluster, namespace)
    for epochs in range(2, 6):  # four users' updates: more records than the limit
        cluster.kubectl(
            "patch",
            "trainer",
            NAME,
            "-n",
            namespace,
            f"--as={user}",
            "--type=merge",
            "-p",
            json.dumps({"spec": {"epochs": epochs}}),
        )
    pruned = find(cluster, namespace, "a retention pass", action="Pruned")
    assert pruned["spec"]["user"]["username"] == SA + "audit"
    assert pruned["spec"]["objectRef"]["resource"] == "auditlogs"

    def settled() -> list[dict[str, Any]] | None:
        now = records(cluster, namespace)
        return now if len(now) <= strict_retention else None

    kept = eventually(settled, what=f"at most {strict_retention} records left")
    names = {r["metadata"]["name"] for r in kept}
    assert any(r["spec"]["action"] == "Pruned" for r in kept), names
    # What went is named in the retention records, and is not written again by the controller
    # although the Trainer's status still shows those actions.
    deleted = set()
    for r in records(cluster, namespace):
        if r["spec"]["action"] == "Pruned":
            deleted |= set(r["spec"]["message"].split(": ", 1)[1].split(", "))
    assert deleted
    assert not deleted & {r["metadata"]["name"] for r in records(cluster, namespace)}
    uid = cluster.get("trainer", NAME, namespace)["metadata"]["uid"]

    def counted() -> bool:
        # The controller has reconciled the Trainer since the deletions: its summary counts what is left.
        mine = [r for r in records(cluster, namespace) if r["spec"]["objectRef"].get("uid") == uid]
        return bool(cluster.get("trainer", NAME, namespace)["status"]["audit"]["records"] == len(mine))

    eventually(counted, what="the Trainer's audit summary to count what retention left")
    assert not deleted & {r["metadata"]["name"] for r in records(cluster, namespace)}


def admission_review(operation: str, namespace: str, username: str, **objects: Any) -> bytes:
    """What a pod could send the audit webhook pretending to be the API server: ``username``'s
    request on a Trainer (``object``, ``oldObject``)."""
    name = next(o["metadata"]["name"] for o in objects.values())
    request = {
        "uid": str(uuid.uuid4()),
        "kind": {"group": "trainer.operator.kubeflow.org", "version": "v1alpha1", "kind": "Trainer"},
        "resource": {"group": "trainer.operator.kubeflow.org", "version": "v1alpha1", "resource": "trainers"},
        "operation": operation,
        "namespace": namespace,
        "name": name,
        "userInfo": {"username": username},
    }
    return json.dumps(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request | objects}
    ).encode()


def forged_review(namespace: str, name: str) -> bytes:
    """A create by someone else, of a Trainer that does not exist."""
    trainer = {**trainer_manifest(name), "metadata": {"name": name, "namespace": namespace, "uid": "u"}}
    return admission_review("CREATE", namespace, "someone-else", object=trainer)


def post_to_audit_webhook(body: bytes, cert: tuple[str, str] | None = None) -> dict[str, Any]:
    context = ssl.create_default_context(cafile=str(cluster_tool.RUN_DIR / "pki" / "ca.crt"))
    if cert is not None:
        context.load_cert_chain(*cert)
    request = urllib.request.Request(
        f"https://127.0.0.1:{localdev.AUDIT_WEBHOOK_PORT}/audit",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, context=context, timeout=10) as response:
        answer: dict[str, Any] = json.loads(response.read())
    return answer


def test_a_forged_review_sent_straight_to_the_audit_webhook_writes_nothing(cluster: Cluster, namespace: str) -> None:
    """Only the API server, which presents its client certificate (testbed/cluster.py's
    AdmissionConfiguration; the controllers' --webhook-client-ca-file), causes a record."""
    ignored = {"webhook": "audit"}
    before = cluster.metric("audit", "operator_admission_unauthenticated_total", ignored)
    answer = post_to_audit_webhook(forged_review(namespace, "forged"))
    assert answer["response"]["allowed"] is True  # an observer never denies
    eventually(
        lambda: cluster.metric("audit", "operator_admission_unauthenticated_total", ignored) == before + 1,
        what="the forged review to be ignored",
    )
    # A certificate the cluster's CA signed (here the admin's) is not the API server's: refused at TLS.
    pki = cluster_tool.RUN_DIR / "pki"
    with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
        post_to_audit_webhook(
            forged_review(namespace, "forged-with-a-cert"), (str(pki / "admin.crt"), str(pki / "admin.key"))
        )
    # The real API server's reviews are still recorded.
    cluster.apply(trainer_manifest("genuine", topology={"workers": 1}), namespace)
    eventually(
        lambda: any(r["spec"]["objectRef"].get("name") == "genuine" for r in records(cluster, namespace)),
        what="the genuine record",
    )
    assert not [
        r for r in records(cluster, namespace) if str(r["spec"]["objectRef"].get("name", "")).startswith("forged")
    ]


@pytest.mark.parametrize("identity", ["corroborated"], indirect=True)
def test_without_the_certificate_a_forged_deletion_writes_nothing_and_a_real_one_is_corroborated(
    cluster: Cluster, namespace: str, identity: str
) -> None:
    """Where the API server cannot present a client certificate, a review is believed only when
    the object read from the API bears it out: a forged deletion of a Trainer that stays is not."""
    cluster.apply(TRAINER, namespace)
    trainer = cluster.get("trainer", NAME, namespace)  # its real uid and resourceVersion
    uid = trainer["metadata"]["uid"]
    find(cluster, namespace, "the creation, corroborated", action="Created", details__identity=identity)
    doubted = {"operation": "DELETE", "outcome": "uncorroborated"}
    before = cluster.metric("audit", "audit_webhook_requests_total", doubted)
    forged = admission_review("DELETE", namespace, "alice@example.com", oldObject=trainer)
    assert post_to_audit_webhook(forged)["response"]["allowed"] is True  # no client certificate
    # Counted once the controller has looked for the deletion (10 s at most) and not seen it.
    eventually(
        lambda: cluster.metric("audit", "audit_webhook_requests_total", doubted) == before + 1,
        what="the forged deletion counted as uncorroborated",
    )
    assert not [r for r in records(cluster, namespace) if r["spec"]["action"] == "Deleted"]
    assert cluster.get("trainer", NAME, namespace)["metadata"]["uid"] == uid
    # A user's real deletion, through the API server, is recorded and says how it was believed.
    user = a_user(cluster, namespace)
    cluster.kubectl("delete", "trainer", NAME, "-n", namespace, f"--as={user}", "--wait=false")
    deleted = find(cluster, namespace, "the real deletion", action="Deleted", objectRef__uid=uid)["spec"]
    assert (deleted["user"]["username"], deleted["details"]) == (user, {"identity": "corroborated"})
    assert not [r for r in records(cluster, namespace) if r["spec"]["user"]["username"] == "alice@example.com"]


def verify_trail(namespace: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trainerop_audit.verify", "-n", namespace], capture_output=True, text=True, check=False
    )


def test_the_trail_is_sealed_and_a_record_deleted_behind_retentions_back_is_reported(
    cluster: Cluster, namespace: str
) -> None:
    cluster.apply(TRAINER, namespace)
    record = first_record(cluster, namespace)

    def sealed() -> bool:
        seals = [r for r in records(cluster, namespace) if r["spec"]["action"] == "Sealed"]
        return any(record in s["spec"]["seal"]["records"] for s in seals)

    eventually(sealed, what="the first record sealed (--seal-seconds 5 here)")
    intact = verify_trail(namespace)
    assert intact.returncode == 0, intact.stdout + intact.stderr
    assert f"{namespace}: intact:" in intact.stdout
    # An audit admin (here the cluster admin) deletes a sealed record outside retention.
    cluster.kubectl("delete", "auditlog", record, "-n", namespace)
    broken = verify_trail(namespace)
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert f"BROKEN: record {record}, sealed by audit-seal-" in broken.stdout
    assert "is gone and was not pruned" in broken.stdout
