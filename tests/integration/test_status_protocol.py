"""The status protocol between the controllers (docs/design/status-protocol.md) against the real API server."""

import json
from typing import Any

import pytest
import yaml

from tests.factories import trainer_manifest
from tests.harness import REPO, Cluster, KubectlError, condition, eventually
from tests.integration.test_seed_examples import converged
from trainerop_audit.record import TRAINER_LABEL

SEED_TRAINER: dict[str, Any] = yaml.safe_load((REPO / "examples" / "seed" / "trainer.yaml").read_text())
NAME = SEED_TRAINER["metadata"]["name"]

# What each controller may own in Trainer.status (top-level fields, condition types).
OWNERSHIP = {
    "trainer": (
        {"phase", "reason", "message", "topology", "progress"},
        {"Created", "Suspended", "Running", "Restarting", "Stalled", "Succeeded", "Failed"},
    ),
    "profile": ({"profile"}, {"ProfileResolved"}),
    "quota": ({"quota"}, {"QuotaAdmitted"}),
    "checkpoint": ({"checkpoint"}, {"CheckpointReady", "CheckpointOverdue"}),
    "audit": ({"audit"}, set()),
    "verify": ({"verify"}, {"ImagesVerified"}),
}


def owned_status_fields(entry: dict[str, Any]) -> tuple[set[str], set[str]]:
    """Top-level status fields and condition types one managedFields entry owns."""
    status = entry["fieldsV1"].get("f:status", {})
    fields = {k[2:] for k in status if k.startswith("f:") and k != "f:conditions"}
    types = {json.loads(k[2:])["type"] for k in status.get("f:conditions", {}) if k.startswith("k:")}
    return fields, types


def status_managers(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["manager"]: e for e in obj["metadata"]["managedFields"] if e.get("subresource") == "status"}


def apply_profiled(cluster: Cluster, namespace: str) -> None:
    """The seed Trainer naming the seed profile (and the Secret the profile mounts): every
    concern has something to decide."""
    cluster.kubectl("create", "secret", "generic", "mistral-vault", "-n", namespace, "--from-literal=a=b")
    cluster.kubectl("apply", "-n", namespace, "-f", str(REPO / "examples" / "seed" / "trainingprofile.yaml"))
    cluster.apply({**SEED_TRAINER, "spec": {**SEED_TRAINER["spec"], "profile": "cost-optimized-32gpu"}}, namespace)


@pytest.mark.smoke
def test_each_controller_writes_only_its_own_status_section(cluster: Cluster, namespace: str) -> None:
    apply_profiled(cluster, namespace)
    eventually(lambda: converged(cluster, namespace, NAME), what="every controller to report")
    obj = cluster.get("trainer", NAME, namespace, managed_fields=True)

    managers = status_managers(obj)
    assert set(managers) == {f"trainer-operator/{c}" for c in OWNERSHIP}
    for controller, (fields, types) in OWNERSHIP.items():
        entry = managers[f"trainer-operator/{controller}"]
        assert entry["operation"] == "Apply"
        got_fields, got_types = owned_status_fields(entry)
        assert got_fields <= fields, f"{controller} owns {got_fields - fields}"
        assert got_types <= types, f"{controller} owns conditions {got_types - types}"
        assert got_fields or got_types, f"{controller} wrote nothing"


def test_a_concern_the_spec_stops_asking_takes_back_what_it_said(cluster: Cluster, namespace: str) -> None:
    """spec.profile removed from a started run: the profile controller's section and condition go
    (an apply of nothing), the run goes on under the other gates, and nothing else is written by
    the profile controller about it."""
    apply_profiled(cluster, namespace)
    obj = eventually(lambda: converged(cluster, namespace, NAME), what="every controller to report")
    assert condition(obj, "ProfileResolved")["reason"] == "Resolved"
    cluster.kubectl("patch", "trainer", NAME, "-n", namespace, "--type=merge", "-p", '{"spec":{"profile":null}}')

    def taken_back() -> dict[str, Any] | None:
        now = converged(cluster, namespace, NAME)
        return now if now and not condition(now, "ProfileResolved") and "profile" not in now["status"] else None

    now = eventually(taken_back, what="the profile's section and condition to go, the other gates to answer again")
    assert now["metadata"]["generation"] == obj["metadata"]["generation"] + 1
    assert condition(now, "Created")["status"] == "True"  # its pods stay
    assert owned_status_fields(
        status_managers(cluster.get("trainer", NAME, namespace, managed_fields=True)).get(
            "trainer-operator/profile", {"fieldsV1": {}}
        )
    ) == (set(), set())


def test_the_api_server_refuses_a_controller_writing_another_section(cluster: Cluster, namespace: str) -> None:
    cluster.apply(SEED_TRAINER, namespace)
    eventually(lambda: converged(cluster, namespace, NAME), what="every controller to report")
    intrusion = trainer_manifest(NAME, namespace=namespace)
    del intrusion["spec"]  # an apply to the status subresource carries only the status it sets
    intrusion["status"] = {"phase": "Succeeded"}  # differs from what the trainer wrote: a real conflict
    with pytest.raises(KubectlError) as refused:
        cluster.kubectl(
            "apply",
            "--server-side",
            "--subresource=status",
            "--field-manager=trainer-operator/profile",
            "-f",
            "-",
            stdin=json.dumps(intrusion),
            as_controller="profile",
        )
    assert "conflict" in refused.value.stderr.lower()
    assert "trainer-operator/trainer" in refused.value.stderr


@pytest.mark.parametrize(
    ("controller", "verb", "resource", "allowed"),
    [
        ("profile", "patch", "trainers", False),
        ("profile", "patch", "trainers/status", True),
        ("profile", "list", "quotapolicies", False),
        ("quota", "list", "quotapolicies", True),
        ("audit", "create", "auditlogs", True),
        ("audit", "update", "auditlogs", False),
        ("audit", "delete", "auditlogs", True),  # its retention, each pass recorded
        ("trainer", "list", "trainingprofiles", False),
        ("checkpoint", "list", "secrets", False),
        # by name, metadata only, and only where Trainers are (bound there by the trainer controller:
        # test_hardening); not in the controller's own namespace, where this is asked
        ("profile", "get", "secrets", False),
        ("checkpoint", "get", "secrets", False),
        ("profile", "list", "secrets", False),
        ("profile", "watch", "secrets", False),
        ("profile", "list", "clustertrainingprofiles", True),
        ("profile", "create", "clustertrainingprofiles", False),
        ("verify", "list", "imagepolicies", True),
        ("verify", "patch", "imagepolicies", False),  # the policies are the admins'; only their status is its
        ("verify", "get", "secrets", False),  # public keys are in the policy
    ],
)
def test_controllers_have_least_privilege(
    cluster: Cluster, controller: str, verb: str, resource: str, allowed: bool
) -> None:
    """Asked as the controller's own ServiceAccount (the identity the processes run with)."""
    kind, _, subresource = resource.partition("/")
    target = kind if kind == "secrets" else f"{kind}.trainer.operator.kubeflow.org"
    extra = [f"--subresource={subresource}"] if subresource else []
    try:
        answer = cluster.kubectl("auth", "can-i", verb, target, *extra, as_controller=controller)
    except KubectlError as err:  # kubectl exits 1 for "no"
        answer = err.stderr or "no"
    assert answer.strip().startswith("yes") is allowed


def test_a_no_op_reconcile_makes_zero_api_writes(cluster: Cluster, namespace: str) -> None:
    # The write counters are per controller, not per Trainer: let earlier tests' namespaces finish
    # terminating first (their Trainers legitimately write while their pods go away).
    def alone() -> bool:
        listed = cluster.kubectl("get", "namespaces", "-l", "trainer-operator-test=true", "-o", "name").split()
        return listed == [f"namespace/{namespace}"]

    eventually(alone, timeout=120, what="other test namespaces to be deleted")
    cluster.apply(SEED_TRAINER, namespace)
    # Steady: every pod running and ready, as the trainer reports it.
    eventually(
        lambda: (
            (o := converged(cluster, namespace, NAME))
            and o["status"]["phase"] == "Running"
            and all(r.get("ready", 0) == r.get("desired", 0) for r in o["status"]["topology"]["replicas"].values())
        ),
        what="the run to be steady (every pod running and ready)",
    )

    def trainer_requests(verb: str) -> float:
        return cluster.metric(
            "trainer", "operator_api_requests_total", {"controller": "trainer", "verb": verb, "code": "ok"}
        )

    pod_writes = (trainer_requests("create"), trainer_requests("delete"))

    def skipped(controller: str) -> float:
        return cluster.metric(
            controller,
            "operator_status_writes_total",
            {"controller": controller, "kind": "Trainer", "outcome": "skipped"},
        )

    def written(controller: str) -> float:
        return cluster.metric(
            controller,
            "operator_status_writes_total",
            {"controller": controller, "kind": "Trainer", "outcome": "written"},
        )

    def handled(controller: str) -> float:
        """Evidence the controller processed the event: a skipped status write, or for the quota
        controller (it plans only when a field it reads changes) a reconcile."""
        if controller == "quota":
            ok = {"controller": "quota", "kind": "Trainer", "result": "ok"}
            return cluster.metric("quota", "operator_reconcile_duration_seconds_count", ok)
        return skipped(controller)

    def records() -> int:
        listed = cluster.kubectl("get", "auditlogs", "-n", namespace, "-l", f"{TRAINER_LABEL}={NAME}", "-o", "name")
        return len(listed.split())

    def poke(value: str) -> str:
        """A label change does not bump the generation but does send every controller an event. It
        is a user's action, so the audit trail gains its record and status.audit counts it (once
        --summary-delay-seconds has passed: the count may lag the records)."""
        before = {c: handled(c) for c in OWNERSHIP}
        existing = records()
        cluster.kubectl("label", "--overwrite", "trainer", NAME, "-n", namespace, f"poke={value}")
        eventually(
            lambda: cluster.get("trainer", NAME, namespace)["status"]["audit"]["records"] == records() > existing,
            what="the label change's audit record counted",
        )
        version: str = cluster.get("trainer", NAME, namespace)["metadata"]["resourceVersion"]
        eventually(
            lambda: all(handled(c) > before[c] for c in OWNERSHIP),
            what="every controller to reconcile the labelled Trainer",
        )
        return version

    # The first poke settles: every controller has reconciled the run as it is now (each Trainer's
    # events are handled in order), so what the second one counts is its own doing.
    poke("settle")
    before_written = {c: written(c) for c in OWNERSHIP}
    status = cluster.get("trainer", NAME, namespace)["status"]
    version = poke("measure")
    now = cluster.get("trainer", NAME, namespace)
    changed = {k: (status.get(k), v) for k, v in now["status"].items() if status.get(k) != v}
    # One write: the audit record's count.
    assert {c: written(c) for c in OWNERSHIP} == {**before_written, "audit": before_written["audit"] + 1}, changed
    assert (trainer_requests("create"), trainer_requests("delete")) == pod_writes
    assert now["metadata"]["resourceVersion"] == version  # nothing written after the audit's count


def test_a_missing_profile_closes_the_gate_until_it_exists(cluster: Cluster, namespace: str) -> None:
    """Admitted while the profile existed (the webhook refuses a Trainer naming a missing one),
    then the profile is deleted before the Trainer could start (its Secret is missing)."""
    profile = str(REPO / "examples" / "seed" / "trainingprofile.yaml")
    cluster.kubectl("apply", "-n", namespace, "-f", profile)
    trainer = {**SEED_TRAINER, "spec": {**SEED_TRAINER["spec"], "profile": "cost-optimized-32gpu"}}
    cluster.apply(trainer, namespace)
    cluster.kubectl("delete", "-n", namespace, "-f", profile)

    def waiting() -> dict[str, Any] | None:
        obj = cluster.get("trainer", NAME, namespace)
        created, resolved = condition(obj, "Created"), condition(obj, "ProfileResolved")
        closed = created is not None and "ProfileResolved (ProfileNotFound" in created["message"]
        return obj if closed and resolved and resolved["reason"] == "ProfileNotFound" else None

    obj = eventually(waiting, what="the gate to close on the missing profile")
    message = condition(obj, "Created")["message"]
    assert "ProfileResolved (ProfileNotFound" in message
    assert "create one or change spec.profile" in condition(obj, "ProfileResolved")["message"]
    events = eventually(
        lambda: [
            e
            for e in json.loads(cluster.kubectl("get", "events", "-n", namespace, "-o", "json"))["items"]
            if e["reason"] == "ProfileNotFound"
        ],
        what="a Warning event about the missing profile",
    )
    assert events[0]["type"] == "Warning"
    assert events[0]["involvedObject"]["name"] == NAME

    cluster.kubectl("create", "secret", "generic", "mistral-vault", "-n", namespace, "--from-literal=a=b")
    cluster.kubectl("apply", "-n", namespace, "-f", str(REPO / "examples" / "seed" / "trainingprofile.yaml"))
    obj = eventually(lambda: converged(cluster, namespace, NAME), what="the gate to open once the profile exists")
    contribution = obj["status"]["profile"]["contribution"]
    assert contribution["generation"] == obj["metadata"]["generation"]
    pod = contribution["pod"]
    assert pod["nodeSelector"] == {"gpu-type": "nvidia-tesla-a100"}
    assert pod["env"] == [{"name": "NCCL_IB_TIMEOUT", "value": "22"}]
    assert pod["volumes"][0]["secret"]["secretName"] == "mistral-vault"
    assert pod["volumeMounts"][0]["mountPath"] == "/etc/secrets"


def test_a_quota_policy_that_is_too_small_closes_the_gate(cluster: Cluster, namespace: str) -> None:
    policy_name = f"quota-{namespace}"
    policy = {
        "apiVersion": "trainer.operator.kubeflow.org/v1alpha1",
        "kind": "QuotaPolicy",
        "metadata": {"name": policy_name},
        "spec": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "budgets": {"spot": {"nvidia.com/gpu": 16}, "onDemand": {"nvidia.com/gpu": 16}},
        },
    }
    cluster.apply(policy)
    try:
        cluster.apply(SEED_TRAINER, namespace)

        def refused() -> dict[str, Any] | None:
            cond = condition(cluster.get("trainer", NAME, namespace), "QuotaAdmitted")
            return cond if cond and cond["reason"] == "ExceedsQuota" else None

        cond = eventually(refused, what="the quota controller to refuse the run")
        assert cond["status"] == "False"
        assert cond["reason"] == "ExceedsQuota"
        assert "needs 5 pods (" in cond["message"]
        assert "40 nvidia.com/gpu" in cond["message"]
        assert f"QuotaPolicy {policy_name} allows less per namespace" in cond["message"]
        assert "spot: more than the budget (16 nvidia.com/gpu)" in cond["message"]
        # The trainer's own first status write may land after the quota's refusal.
        created = eventually(
            lambda: condition(cluster.get("trainer", NAME, namespace), "Created"), what="the Created condition"
        )
        assert created["reason"] == "WaitingForGates"
        assert cluster.kubectl("get", "pods", "-n", namespace, "-o", "name") == ""

        # Scaling down to fit re-opens the gate for the new generation.
        cluster.kubectl("scale", "trainer", NAME, "-n", namespace, "--replicas=1")
        admitted = eventually(
            lambda: (
                (c := condition(cluster.get("trainer", NAME, namespace), "QuotaAdmitted"))
                and c["reason"] == "Admitted"
                and c
            ),
            what="admission after scaling down",
        )
        assert admitted["observedGeneration"] == 2
    finally:
        cluster.kubectl("delete", "quotapolicy", policy_name)


def test_kubectl_scale_changes_workers_through_the_scale_subresource(cluster: Cluster, namespace: str) -> None:
    cluster.apply(SEED_TRAINER, namespace)
    eventually(lambda: converged(cluster, namespace, NAME), what="every controller to report")
    cluster.kubectl("scale", "trainer", NAME, "-n", namespace, "--replicas=6")
    obj = cluster.get("trainer", NAME, namespace)
    assert obj["spec"]["topology"]["workers"] == 6
    assert obj["metadata"]["generation"] == 2
    scale = json.loads(
        cluster.kubectl(
            "get", "--raw", f"/apis/trainer.operator.kubeflow.org/v1alpha1/namespaces/{namespace}/trainers/{NAME}/scale"
        )
    )
    assert scale["spec"]["replicas"] == 6
    assert scale["status"]["selector"].startswith(f"trainer-name={NAME}")
    # Every gate is re-evaluated for the new generation.
    obj = eventually(lambda: converged(cluster, namespace, NAME), what="gates for generation 2")
    assert all(c["observedGeneration"] == 2 for c in obj["status"]["conditions"])


def test_suspend_is_reported(cluster: Cluster, namespace: str) -> None:
    trainer = {**SEED_TRAINER, "spec": {**SEED_TRAINER["spec"], "runPolicy": {"suspend": True}}}
    cluster.apply(trainer, namespace)
    obj = eventually(
        lambda: (o := cluster.get("trainer", NAME, namespace)).get("status", {}).get("phase") == "Suspended" and o,
        what="the Suspended phase",
    )
    assert condition(obj, "Suspended")["status"] == "True"
    assert condition(obj, "Created")["reason"] == "Suspended"
