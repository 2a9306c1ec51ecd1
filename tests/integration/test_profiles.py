"""TrainingProfile resolution, merging and tenant isolation on the local cluster (issue 4)."""

import copy
import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import yaml

from testbed import localdev
from tests.harness import REPO, Cluster, KubectlError, NotYetError, condition, eventually

SEED = REPO / "examples" / "seed"
SEED_TRAINER: dict[str, Any] = yaml.safe_load((SEED / "trainer.yaml").read_text())
SEED_PROFILE: dict[str, Any] = yaml.safe_load((SEED / "trainingprofile.yaml").read_text())
PROFILE = SEED_PROFILE["metadata"]["name"]
NAME = "profiled"
SECRET_VALUE = "never-print-this-9f3c1"


def profiled_trainer(workers: int = 2, **spec: Any) -> dict[str, Any]:
    """The seed Trainer, smaller, pointing at the seed profile as the seed README says."""
    body = copy.deepcopy(SEED_TRAINER)
    body["metadata"] = {"name": NAME}
    body["spec"]["topology"] = {"workers": workers}
    body["spec"]["profile"] = PROFILE
    body["spec"].update(spec)
    return body


def create_secret(cluster: Cluster, namespace: str, name: str = "mistral-vault") -> None:
    cluster.kubectl("create", "secret", "generic", name, "-n", namespace, f"--from-literal=api-key={SECRET_VALUE}")


def trainer(cluster: Cluster, namespace: str) -> dict[str, Any]:
    return cluster.get("trainer", NAME, namespace)


def resolved(cluster: Cluster, namespace: str, reason: str) -> dict[str, Any] | None:
    obj = trainer(cluster, namespace)
    found = [c for c in obj.get("status", {}).get("conditions", []) if c["type"] == "ProfileResolved"]
    return obj if found and found[0]["reason"] == reason else None


def pods(cluster: Cluster, namespace: str) -> dict[str, dict[str, Any]]:
    listed = json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-l", f"trainer-name={NAME}", "-o", "json"))
    return {p["metadata"]["name"]: p for p in listed["items"] if not p["metadata"].get("deletionTimestamp")}


def running(cluster: Cluster, namespace: str, workers: int) -> dict[str, Any]:
    obj = trainer(cluster, namespace)
    status = obj.get("status", {})
    if status.get("phase") == "Running" and status.get("topology", {}).get("readyWorkers") == workers:
        return obj
    said = {
        c["type"]: f"{c['status']} {c.get('reason', '')}: {c.get('message', '')}" for c in status.get("conditions", ())
    }
    raise NotYetError(f"phase {status.get('phase')}, {status.get('topology', {}).get('readyWorkers')} ready; {said}")


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0]["env"]}


def events(cluster: Cluster, namespace: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads(cluster.kubectl("get", "events", "-n", namespace, "-o", "json"))["items"]
    return items


def test_the_seed_profile_shapes_the_pods(cluster: Cluster, namespace: str) -> None:
    create_secret(cluster, namespace)
    cluster.kubectl("apply", "-n", namespace, "-f", str(SEED / "trainingprofile.yaml"))  # as written
    # The user's own token, in the Trainer's spec: it goes to the pods and nowhere else.
    cluster.apply(profiled_trainer(env=[{"name": "HF_TOKEN", "value": SECRET_VALUE}]), namespace)
    obj = eventually(lambda: running(cluster, namespace, 2), what="the profiled run to be Running")

    section = obj["status"]["profile"]
    profile = cluster.get("trainingprofile", PROFILE, namespace)
    assert (section["name"], section["kind"]) == (PROFILE, "TrainingProfile")
    assert section["generation"] == profile["metadata"]["generation"]
    assert len(section["hash"]) == 16
    assert condition(obj, "ProfileResolved")["reason"] == "Resolved"
    for pod in pods(cluster, namespace).values():
        spec = pod["spec"]
        assert spec["nodeSelector"] == {"gpu-type": "nvidia-tesla-a100"}
        assert {"key": "usage", "operator": "Equal", "value": "training", "effect": "NoSchedule"} in spec["tolerations"]
        assert env_of(pod)["NCCL_IB_TIMEOUT"] == "22"
        (volume,) = [v for v in spec["volumes"] if v.get("secret")]
        assert volume["secret"]["secretName"] == "mistral-vault"
        (mount,) = [m for m in spec["containers"][0]["volumeMounts"] if m["name"] == volume["name"]]
        assert (mount["mountPath"], mount["readOnly"]) == ("/etc/secrets", True)
    # Secret values reach neither the status, the Events nor the controllers' logs.
    assert SECRET_VALUE not in json.dumps(obj["status"])
    assert SECRET_VALUE not in json.dumps(events(cluster, namespace))
    for log in (localdev.state_dir() / "logs").glob("controller-*.log"):
        assert SECRET_VALUE not in log.read_text(errors="replace"), log


def test_the_profiles_retry_policy_applies(cluster: Cluster, namespace: str) -> None:
    create_secret(cluster, namespace)
    cluster.apply(SEED_PROFILE, namespace)
    failing = {"worker": {"metadata": {"annotations": {"sim.trainer.operator.kubeflow.org/fail-after": "200ms"}}}}
    cluster.apply(profiled_trainer(workers=1, podTemplateOverrides=failing), namespace)
    obj = eventually(
        lambda: (o := trainer(cluster, namespace))["status"].get("phase") == "Failed" and o,
        timeout=120,
        what="the run to fail after the profile's backoffLimit",
    )
    failed = condition(obj, "Failed")
    assert failed["reason"] == "BackoffLimitExceeded"
    assert "the profile's backoffLimit is 5" in failed["message"]
    assert obj["status"]["topology"]["replicas"]["worker"]["restarts"] == 5
    assert "restartPolicy" not in obj["spec"]["runPolicy"]  # OnFailure came from the profile


def test_a_profile_deleted_under_a_waiting_trainer_holds_it_until_it_is_back(cluster: Cluster, namespace: str) -> None:
    """The webhook refuses a Trainer naming a missing profile (test_admission); one deleted after
    the Trainer was admitted closes the gate, with a condition and an Event saying so."""
    cluster.apply(SEED_PROFILE, namespace)
    cluster.apply(profiled_trainer(), namespace)  # held by the missing Secret meanwhile
    eventually(lambda: resolved(cluster, namespace, "SecretNotFound"), what="SecretNotFound")
    cluster.kubectl("delete", "trainingprofile", PROFILE, "-n", namespace)
    obj = eventually(lambda: resolved(cluster, namespace, "ProfileNotFound"), what="ProfileNotFound")
    cond = condition(obj, "ProfileResolved")
    assert cond["status"] == "False"
    assert f"no TrainingProfile '{PROFILE}' in namespace '{namespace}'" in cond["message"]
    created = eventually(  # the trainer's status write, not the profile controller's
        lambda: condition(cluster.get("trainer", NAME, namespace), "Created"), what="the Created condition"
    )
    assert created["reason"] == "WaitingForGates"
    assert pods(cluster, namespace) == {}
    eventually(
        lambda: any(e["reason"] == "ProfileNotFound" and e["type"] == "Warning" for e in events(cluster, namespace)),
        what="a Warning Event",
    )

    create_secret(cluster, namespace)
    cluster.apply(SEED_PROFILE, namespace)
    running_obj = eventually(lambda: running(cluster, namespace, 2), what="the run to start once the profile exists")
    assert condition(running_obj, "ProfileResolved")["reason"] == "Resolved"


def test_a_missing_secret_is_named_and_the_trainer_proceeds_once_it_exists(cluster: Cluster, namespace: str) -> None:
    cluster.apply(SEED_PROFILE, namespace)
    cluster.apply(profiled_trainer(), namespace)
    obj = eventually(lambda: resolved(cluster, namespace, "SecretNotFound"), what="SecretNotFound")
    message = condition(obj, "ProfileResolved")["message"]
    assert f"Secret 'mistral-vault' (runtimeConfig.secret) in namespace '{namespace}'" in message
    assert pods(cluster, namespace) == {}

    create_secret(cluster, namespace)
    eventually(lambda: running(cluster, namespace, 2), what="the run to start once the Secret exists")


def test_a_trainer_cannot_use_another_namespaces_profile_or_secret(
    cluster: Cluster, namespace: str, other_namespace: str
) -> None:
    # Team B has the profile and the Secret; Team A's Trainer names them.
    create_secret(cluster, other_namespace)
    cluster.apply(SEED_PROFILE, other_namespace)
    with pytest.raises(KubectlError) as missing:
        cluster.apply(profiled_trainer(), namespace)
    assert f"spec.profile: there is no TrainingProfile '{PROFILE}' in namespace '{namespace}'" in missing.value.stderr
    assert other_namespace not in missing.value.stderr  # nothing about team B leaks
    with pytest.raises(KubectlError) as refused:
        cluster.apply(profiled_trainer(profile=f"{other_namespace}/{PROFILE}"), namespace)
    assert "spec.profile" in refused.value.stderr

    # A cluster-wide profile mounts Secrets from the Trainer's own namespace only.
    cluster_profile = f"shared-{uuid.uuid4().hex[:6]}"
    with cluster_scoped(cluster, cluster_profile, SEED_PROFILE["spec"]):
        cluster.apply(profiled_trainer(profile=cluster_profile), namespace)
        obj = eventually(lambda: resolved(cluster, namespace, "SecretNotFound"), what="SecretNotFound")
        assert f"in namespace '{namespace}'" in condition(obj, "ProfileResolved")["message"]
        assert obj["status"]["profile"]["kind"] == "ClusterTrainingProfile"
        assert pods(cluster, namespace) == {}


@contextmanager
def cluster_scoped(cluster: Cluster, name: str, spec: dict[str, Any]) -> Iterator[None]:
    """A ClusterTrainingProfile for the duration of a ``with`` block (it outlives namespaces)."""
    body = {"apiVersion": SEED_PROFILE["apiVersion"], "kind": "ClusterTrainingProfile", "metadata": {"name": name}}
    cluster.apply({**body, "spec": spec})
    try:
        yield
    finally:
        cluster.kubectl("delete", "clustertrainingprofile", name, "--wait=false")


def test_a_cluster_profile_serves_every_namespace_and_a_namespaced_one_shadows_it(
    cluster: Cluster, namespace: str
) -> None:
    create_secret(cluster, namespace)
    name = f"platform-{uuid.uuid4().hex[:6]}"
    spec = {**SEED_PROFILE["spec"], "envVars": [{"name": "NCCL_IB_TIMEOUT", "value": "40"}]}
    with cluster_scoped(cluster, name, spec):
        cluster.apply(profiled_trainer(profile=name), namespace)
        obj = eventually(lambda: running(cluster, namespace, 2), what="the run to start with the cluster profile")
        assert obj["status"]["profile"]["kind"] == "ClusterTrainingProfile"
        assert {env_of(p)["NCCL_IB_TIMEOUT"] for p in pods(cluster, namespace).values()} == {"40"}
        marked = cluster.get("clustertrainingprofile", name)
        assert condition(marked, "Valid")["status"] == "True"

        # The team's own profile of that name takes over for pods created from then on.
        cluster.apply({**SEED_PROFILE, "metadata": {"name": name}}, namespace)
        obj = eventually(
            lambda: (o := trainer(cluster, namespace))["status"]["profile"].get("kind") == "TrainingProfile" and o,
            what="the namespaced profile to shadow the cluster one",
        )
        assert obj["status"]["profile"]["contribution"]["pod"]["env"] == [{"name": "NCCL_IB_TIMEOUT", "value": "22"}]


def test_a_profile_update_reaches_new_pods_and_leaves_running_ones_alone(cluster: Cluster, namespace: str) -> None:
    create_secret(cluster, namespace)
    cluster.apply(SEED_PROFILE, namespace)
    cluster.apply(profiled_trainer(), namespace)
    obj = eventually(lambda: running(cluster, namespace, 2), what="the profiled run to be Running")
    before = {n: (p["metadata"]["uid"], env_of(p)["NCCL_IB_TIMEOUT"]) for n, p in pods(cluster, namespace).items()}
    assert {v for _, v in before.values()} == {"22"}
    old_hash = obj["status"]["profile"]["hash"]

    updated = copy.deepcopy(SEED_PROFILE)
    updated["spec"]["envVars"] = [{"name": "NCCL_IB_TIMEOUT", "value": "30"}]
    cluster.apply(updated, namespace)
    obj = eventually(
        lambda: (o := trainer(cluster, namespace))["status"]["profile"]["hash"] != old_hash and o,
        what="the profile to be re-resolved",
    )
    assert (
        obj["status"]["profile"]["generation"]
        == cluster.get("trainingprofile", PROFILE, namespace)["metadata"]["generation"]
    )
    cluster.kubectl("scale", "trainer", NAME, "-n", namespace, "--replicas=3")
    eventually(lambda: running(cluster, namespace, 3), what="3 running workers")
    after = pods(cluster, namespace)
    assert env_of(after[f"{NAME}-worker-2"])["NCCL_IB_TIMEOUT"] == "30"
    for name, (uid, value) in before.items():
        assert (after[name]["metadata"]["uid"], env_of(after[name])["NCCL_IB_TIMEOUT"]) == (uid, value)


def test_what_the_trainer_overrides_is_reported_not_dropped(cluster: Cluster, namespace: str) -> None:
    create_secret(cluster, namespace)
    cluster.apply(SEED_PROFILE, namespace)
    own = profiled_trainer(
        env=[{"name": "NCCL_IB_TIMEOUT", "value": "99"}],
        runPolicy={"backoffLimit": 2},
        podTemplateOverrides={"worker": {"spec": {"nodeSelector": {"kubernetes.io/os": "linux"}}}},
    )
    cluster.apply(own, namespace)
    obj = eventually(lambda: running(cluster, namespace, 2), what="the run to be Running")
    cond = condition(obj, "ProfileResolved")
    assert cond["reason"] == "ResolvedWithOverrides"
    assert obj["status"]["profile"]["overrides"] == [
        "env NCCL_IB_TIMEOUT (spec.env)",
        "retryPolicy.backoffLimit (spec.runPolicy.backoffLimit)",
    ]
    assert "env NCCL_IB_TIMEOUT (spec.env)" in cond["message"]
    for pod in pods(cluster, namespace).values():
        assert env_of(pod)["NCCL_IB_TIMEOUT"] == "99"
        # The override's selector adds to the profile's: both hold.
        assert pod["spec"]["nodeSelector"] == {
            "gpu-type": "nvidia-tesla-a100",
            "kubernetes.io/os": "linux",
        }


def test_a_secret_mounted_over_the_replica_volume_is_a_conflict(cluster: Cluster, namespace: str) -> None:
    create_secret(cluster, namespace)
    cluster.apply(SEED_PROFILE, namespace)
    cluster.apply(profiled_trainer(storage={"size": "1Gi", "mountPath": "/etc/secrets"}), namespace)
    obj = eventually(lambda: resolved(cluster, namespace, "ProfileConflict"), what="ProfileConflict")
    assert (
        "runtimeConfig.mountPath /etc/secrets is also spec.storage.mountPath"
        in condition(obj, "ProfileResolved")["message"]
    )
    assert pods(cluster, namespace) == {}


def test_rbac_keeps_teams_to_their_own_namespace(cluster: Cluster, namespace: str, other_namespace: str) -> None:
    user = f"alice-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "rolebinding", "alice-edit", "-n", namespace, "--clusterrole=edit", f"--user={user}")

    def as_user(*args: str, stdin: str | None = None) -> str:
        return cluster.kubectl(*args, f"--as={user}", stdin=stdin)

    profile = json.dumps(SEED_PROFILE)
    eventually(
        lambda: as_user("auth", "can-i", "create", "trainingprofiles", "-n", namespace).strip() == "yes",
        what="the edit role to aggregate the operator's rules",
    )
    as_user("apply", "-n", namespace, "-f", "-", stdin=profile)
    as_user("apply", "-n", namespace, "-f", "-", stdin=json.dumps(profiled_trainer()))
    as_user("get", "trainers", "-n", namespace)
    as_user("get", "clustertrainingprofiles")  # platform profiles are visible to everyone
    for args, stdin in (
        (("apply", "-n", other_namespace, "-f", "-"), profile),
        (("get", "trainers", "-n", other_namespace), None),
        (("get", "trainingprofiles", "-n", other_namespace), None),
        (
            ("apply", "-f", "-"),
            json.dumps({**SEED_PROFILE, "kind": "ClusterTrainingProfile", "metadata": {"name": f"x-{user}"}}),
        ),
    ):
        with pytest.raises(KubectlError) as refused:
            as_user(*args, stdin=stdin)
        assert "forbidden" in refused.value.stderr.lower(), args


def test_the_profile_examples_are_accepted_by_the_api_server(cluster: Cluster, namespace: str) -> None:
    # the example Trainer names the seed's profile, which the profile webhook wants to exist
    cluster.kubectl("apply", "-n", namespace, "-f", str(REPO / "examples" / "seed" / "trainingprofile.yaml"))
    examples = sorted((REPO / "examples" / "profiles").glob("*.yaml"))
    assert examples
    for path in examples:
        out = cluster.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", str(path))
        assert "(server dry run)" in out, f"{path.name}: {out}"


def test_where_it_may_not_look_for_secrets_it_says_so(cluster: Cluster, namespace: str) -> None:
    """The trainer controller without its right to bind the Secret check in namespaces (an install
    whose RBAC is older than its image): the Trainer is not held back, and after the wait for the
    grant the profile controller says it could not check the Secret, and what grants that."""
    role = "trainer-operator-trainer"
    saved = cluster.get("clusterrole", role)
    narrowed = {**saved, "rules": [r for r in saved["rules"] if "bind" not in r["verbs"]]}
    assert len(narrowed["rules"]) == len(saved["rules"]) - 1
    cluster.apply(without_server_fields(narrowed))
    try:
        cluster.apply(SEED_PROFILE, namespace)
        cluster.apply(profiled_trainer(), namespace)
        obj = eventually(lambda: running(cluster, namespace, 2), what="the run to start without the Secret check")
        message = condition(obj, "ProfileResolved")["message"]
        assert "not checked that Secret 'mistral-vault' exists" in message
        assert f"namespace '{namespace}'" in message
        assert "RoleBinding trainer-operator-profile-secret-check" in message
    finally:
        cluster.apply(without_server_fields(saved))


def without_server_fields(obj: dict[str, Any]) -> dict[str, Any]:
    meta = {
        k: v
        for k, v in obj["metadata"].items()
        if k not in ("resourceVersion", "uid", "creationTimestamp", "managedFields")
    }
    return {**obj, "metadata": meta}
