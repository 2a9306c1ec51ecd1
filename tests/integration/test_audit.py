"""AuditLog records cannot be changed by anyone, and only audit admins may delete them."""

import json
import uuid
from typing import Any

import pytest
from hack import localdev

from tests.harness import Cluster, KubectlError, eventually

NAME = "audited"
TRAINER: dict[str, Any] = {
    "apiVersion": "trainer.operator.kubeflow.org/v1alpha1",
    "kind": "Trainer",
    "metadata": {"name": NAME},
    "spec": {"epochs": 1, "image": "busybox"},
}


def first_record(cluster: Cluster, namespace: str) -> str:
    def listed() -> str | None:
        names = cluster.kubectl("get", "auditlogs", "-n", namespace, "-o", "name").split()
        return names[0].split("/", 1)[1] if names else None

    cluster.apply(TRAINER, namespace)
    return eventually(listed, what="the Trainer's creation record")


def test_an_audit_record_cannot_be_changed_even_by_a_cluster_admin(cluster: Cluster, namespace: str) -> None:
    record = first_record(cluster, namespace)
    before = cluster.get("auditlog", record, namespace)
    for args in (
        ("label", "auditlog", record, "tampered=yes"),
        ("annotate", "auditlog", record, "note=changed"),
        ("patch", "auditlog", record, "--type=merge", "-p", json.dumps({"spec": {"actor": "someone-else"}})),
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


def test_users_read_audit_records_and_only_audit_admins_delete_them(cluster: Cluster, namespace: str) -> None:
    record = first_record(cluster, namespace)
    user, auditor = f"dev-{uuid.uuid4().hex[:6]}", f"auditor-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "rolebinding", "dev-edit", "-n", namespace, "--clusterrole=edit", f"--user={user}")
    eventually(
        lambda: cluster.kubectl("auth", "can-i", "list", "auditlogs", "-n", namespace, f"--as={user}").strip() == "yes",
        what="the edit role to aggregate the operator's rules",
    )
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
    # Records outlive their Trainer (no owner reference); deleting old ones is the audit admin's job.
    cluster.kubectl("delete", "trainer", NAME, "-n", namespace)
    cluster.kubectl("delete", "auditlog", record, "-n", namespace, f"--as={auditor}")
    assert record not in cluster.kubectl("get", "auditlogs", "-n", namespace, "-o", "name")


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
    sa = "system:serviceaccount:trainer-operator-system:trainer-operator-"

    def action(name: str) -> dict[str, Any] | None:
        items = json.loads(cluster.kubectl("get", "auditlogs", "-n", namespace, "-o", "json"))["items"]
        return next((r["spec"] for r in items if r["spec"]["action"] == name), None)

    started = eventually(lambda: action("Started"), what="the run's start recorded")
    assert started["actor"] == sa + "trainer"
    assert started["trainer"]["name"] == NAME
    cluster.kubectl(
        "patch", "trainer", NAME, "-n", namespace, "--type=merge", "-p", '{"spec":{"runPolicy":{"suspend":true}}}'
    )
    suspended = eventually(lambda: action("Suspended"), what="the suspension recorded")
    assert (suspended["actor"], suspended["reason"]) == (sa + "trainer", "SuspendedByUser")
    assert suspended["generation"] == 2
