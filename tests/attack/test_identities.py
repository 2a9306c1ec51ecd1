"""A controller's identity taken over (its token stolen, its image compromised): what it may no
longer do, on the deployed operator. Each refusal names the admission policy that stopped it
(docs/security.md lists each identity's remaining powers)."""

import json
from typing import Any

import pytest

from tests.attack.conftest import SELF_SIGNED, account, attempt, needs
from tests.factories import trainer_manifest
from tests.harness import Cluster, KubectlError
from trainerop_common.api import PodContribution
from trainerop_common.names import MANAGED_BY
from trainerop_sdk.names import TRAINER_UID_LABEL
from trainerop_trainer.pods import CONTAINER_SECURITY, pod_security, runner_manifests

TRAINER = account("trainer")
BOUNDS = "ValidatingAdmissionPolicy 'trainer-operator-trainer-bounds'"
CREATIONS = "ValidatingAdmissionPolicy 'trainer-operator-trainer-creations'"
CA_ONLY = "ValidatingAdmissionPolicy 'trainer-operator-webhook-ca-only'"
SECTIONS = "ValidatingAdmissionPolicy 'trainer-operator-status-sections'"
OWNERS = 'admission webhook "validate-creations.trainer.operator.kubeflow.org" denied the request'


def privileged_pod(account_name: str) -> dict[str, Any]:
    """A pod that would own its node: owned by a made-up Trainer, root with SYS_ADMIN and
    NET_ADMIN, no seccomp, its namespace's Secret mounted."""
    owner = {
        "apiVersion": "trainer.operator.kubeflow.org/v1alpha1",
        "kind": "Trainer",
        "name": "made-up",
        "uid": "00000000-0000-0000-0000-000000000000",
        "controller": True,
    }
    root = {"runAsUser": 0, "capabilities": {"add": ["SYS_ADMIN", "NET_ADMIN"]}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "made-up-worker-0", "ownerReferences": [owner]},
        "spec": {
            "serviceAccountName": account_name,
            "securityContext": {"runAsUser": 0, "seccompProfile": {"type": "Unconfined"}},
            "containers": [
                {
                    "name": "x",
                    "image": "busybox:1.36",
                    "securityContext": root,
                    "volumeMounts": [{"name": "loot", "mountPath": "/loot"}],
                }
            ],
            "volumes": [{"name": "loot", "secret": {"secretName": "team-secret"}}],
        },
    }


def test_the_trainers_identity_makes_no_account_in_kube_system(cluster: Cluster) -> None:
    said = attempt(cluster, TRAINER, "create", "serviceaccount", "trainer-operator-runner", "-n", "kube-system")
    assert BOUNDS in said or CREATIONS in said, said  # both refuse it; the API server names one
    # Of the very shape the controller makes (its label too): still kube-system, where no Trainer is.
    account = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": "trainer-operator-runner", "labels": MANAGED_BY},
    }
    said = attempt(cluster, TRAINER, "create", "-n", "kube-system", "-f", "-", stdin=json.dumps(account))
    assert BOUNDS in said, said
    assert "trainer-operator-runner" not in cluster.names("serviceaccounts", "kube-system")


def test_the_trainers_identity_starts_no_privileged_pod_in_kube_system(cluster: Cluster) -> None:
    pod = json.dumps(privileged_pod("default"))
    said = attempt(cluster, TRAINER, "create", "--dry-run=server", "-n", "kube-system", "-f", "-", stdin=pod)
    assert BOUNDS in said or CREATIONS in said, said  # both refuse it; the API server names one


def test_the_trainers_identity_starts_no_privileged_pod_in_a_tenants_namespace(
    cluster: Cluster, namespace: str
) -> None:
    runner = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "trainer-operator-runner"}}
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "team-secret"}, "stringData": {"k": "v"}}
    cluster.apply({"apiVersion": "v1", "kind": "List", "items": [runner, secret]}, namespace)
    pod = json.dumps(privileged_pod("trainer-operator-runner"))
    said = attempt(cluster, TRAINER, "create", "--dry-run=server", "-n", namespace, "-f", "-", stdin=pod)
    assert CREATIONS in said, said


def restricted_pod_of(trainer: dict[str, Any], secret: str) -> dict[str, Any]:
    """A pod of the shape the trainer makes (Pod Security restricted, its Trainer's labels and
    owner), mounting ``secret``: what a stolen trainer identity would make to read a Secret."""
    meta = trainer["metadata"]
    owner = {"apiVersion": trainer["apiVersion"], "kind": "Trainer", "name": meta["name"], "uid": meta["uid"]}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{meta['name']}-worker-9",
            "labels": {TRAINER_UID_LABEL: meta["uid"], **MANAGED_BY},
            "ownerReferences": [{**owner, "controller": True}],
        },
        "spec": {
            "serviceAccountName": "trainer-operator-runner",
            "securityContext": pod_security(PodContribution()),
            "containers": [
                {
                    "name": "x",
                    "image": "busybox:1.36",
                    "securityContext": CONTAINER_SECURITY,
                    "volumeMounts": [{"name": "loot", "mountPath": "/loot"}],
                }
            ],
            "volumes": [{"name": "loot", "secret": {"secretName": secret}}],
        },
    }


def dry_run(cluster: Cluster, namespace: str, obj: dict[str, Any]) -> str:
    """``obj`` created (server dry run) as the trainer's identity: "" or the refusal."""
    return attempt(cluster, TRAINER, "create", "--dry-run=server", "-n", namespace, "-f", "-", stdin=json.dumps(obj))


def test_the_trainers_identity_mounts_no_secret_its_trainer_does_not_name(cluster: Cluster, namespace: str) -> None:
    """A Trainer of the namespace exists (suspended: no pods of its own); the stolen identity
    makes a pod of it, then one of a made-up Trainer, that mount the namespace's Secret."""
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "team-secret"}, "stringData": {"k": "v"}}
    cluster.apply(secret, namespace)
    cluster.apply(trainer_manifest("victim", runPolicy={"suspend": True}), namespace)
    cluster.apply(runner_manifests(namespace)[0], namespace)  # the pods' account, as the trainer makes it
    trainer = cluster.get("trainer", "victim", namespace)
    said = dry_run(cluster, namespace, restricted_pod_of(trainer, "team-secret"))
    assert OWNERS in said, said
    assert "uses only the Secrets its Trainer names" in said, said
    assert "not team-secret" in said, said
    made_up = {**trainer, "metadata": {"name": "made-up", "uid": "00000000-0000-0000-0000-000000000000"}}
    said = dry_run(cluster, namespace, restricted_pod_of(made_up, "team-secret"))
    assert OWNERS in said, said
    assert "holds no Trainer made-up" in said, said


def test_the_trainers_identity_starts_no_pod_that_preempts_other_tenants(cluster: Cluster, namespace: str) -> None:
    """system-node-critical preempts nearly any pod on the nodes it needs, whatever their
    namespace; any namespace may use it. A stolen trainer identity makes a pod of a real
    Trainer of the tenant with it."""
    cluster.apply(trainer_manifest("victim", runPolicy={"suspend": True}), namespace)
    cluster.apply(runner_manifests(namespace)[0], namespace)
    pod = restricted_pod_of(cluster.get("trainer", "victim", namespace), "unused")
    container = {k: v for k, v in pod["spec"]["containers"][0].items() if k != "volumeMounts"}
    pod["spec"] = {**pod["spec"], "volumes": [], "containers": [container]}
    assert dry_run(cluster, namespace, pod) == ""  # the default priority
    said = dry_run(cluster, namespace, {**pod, "spec": {**pod["spec"], "priorityClassName": "system-node-critical"}})
    assert OWNERS in said, said
    assert "not priority class system-node-critical" in said, said


HOST_LEVEL: list[dict[str, Any]] = [
    {"hostNetwork": True},
    {"hostPID": True},
    {"volumes": [{"name": "root", "hostPath": {"path": "/"}}]},
    {"containers": [{"name": "x", "image": "busybox:1.36", "securityContext": {"privileged": True}}]},
    {"containers": [{"name": "x", "image": "busybox:1.36", "ports": [{"containerPort": 22, "hostPort": 22}]}]},
]
# Beyond Pod Security baseline: what a namespace labelled privileged would admit, the operator never makes.
BEYOND_BASELINE: list[dict[str, Any]] = [
    {
        "containers": [
            {"name": "x", "image": "busybox:1.36", "securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}
        ]
    },
    {"securityContext": {"seccompProfile": {"type": "Unconfined"}}},
    {"securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "65536"}]}},
]


def test_a_namespace_labelled_privileged_opens_no_host_level_pod_to_the_trainers_identity_or_a_tenant(
    cluster: Cluster, namespace: str
) -> None:
    """Issue 53 loosened what the trainer makes to the namespace's own Pod Security level; a
    namespace labelled privileged still gets no host-level pod, nor one beyond baseline (another
    capability, an Unconfined profile, a sysctl), from the operator's identity (a stolen token
    there), nor through a tenant's Trainer, whose webhook refusal says no level allows it
    (docs/security.md, "The cluster's rules")."""
    cluster.kubectl("label", "namespace", namespace, "pod-security.kubernetes.io/enforce=privileged")
    cluster.apply(trainer_manifest("victim", runPolicy={"suspend": True}), namespace)
    cluster.apply(runner_manifests(namespace)[0], namespace)
    pod = restricted_pod_of(cluster.get("trainer", "victim", namespace), "unused")
    spec: dict[str, Any] = {**pod["spec"], "volumes": [], "containers": [{"name": "x", "image": "busybox:1.36"}]}
    pod["spec"] = spec | {"securityContext": {}}
    assert dry_run(cluster, namespace, pod) == ""  # root with the runtime's capabilities: baseline allows it
    for change in HOST_LEVEL + BEYOND_BASELINE:
        said = dry_run(cluster, namespace, {**pod, "spec": {**spec, "securityContext": {}, **change}})
        assert CREATIONS in said, (change, said)
    for change in HOST_LEVEL + BEYOND_BASELINE:
        hostile = trainer_manifest("hostile", podTemplateOverrides={"worker": {"spec": change}})
        with pytest.raises(KubectlError) as refused:
            cluster.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", "-", stdin=json.dumps(hostile))
        said = str(refused.value)
        # sysctls: no override may set them at all, which the refusal says instead
        assert any(why in said for why in ("no privileged or host-level pod", "not a securityContext field")), (
            change,
            said,
        )


def test_the_trainers_identity_creates_nothing_where_no_trainer_is(cluster: Cluster, namespace: str) -> None:
    """Even of the shape it makes: a tenant's namespace that runs no training, like kube-system."""
    made_up = {"apiVersion": "trainer.operator.kubeflow.org/v1", "metadata": {"name": "made-up", "uid": "0"}}
    pod = restricted_pod_of(made_up, "x")
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {key: pod["metadata"][key] for key in ("name", "labels", "ownerReferences")},
        "spec": {"clusterIP": "None"},
    }
    said = dry_run(cluster, namespace, service)
    assert OWNERS in said, said
    assert "holds no Trainer made-up" in said, said
    runner = runner_manifests(namespace)[0]
    said = dry_run(cluster, namespace, runner)
    assert OWNERS in said, said
    assert f"only where Trainers are: {namespace} holds none" in said, said


def test_the_trainers_identity_cannot_write_another_controllers_part_of_a_trainers_status(
    cluster: Cluster, namespace: str
) -> None:
    """The profile's contribution names the Secrets the pods mount: the stolen identity tries to
    name the namespace's Secret there for a Trainer's pods."""
    cluster.apply(trainer_manifest("victim", runPolicy={"suspend": True}), namespace)
    volumes = {"volumes": [{"name": "profile-runtime-secret", "secret": {"secretName": "team-secret"}}]}
    named = json.dumps({"status": {"profile": {"contribution": {"generation": 1, "pod": volumes}}}})
    patch = ("patch", "trainer", "victim", "-n", namespace, "--subresource=status", "--type=merge", "-p", named)
    said = attempt(cluster, TRAINER, *patch)
    assert SECTIONS in said, said
    assert "profile" not in cluster.get("trainer", "victim", namespace).get("status", {})


def test_the_trainers_identity_takes_no_lease_of_the_control_plane(cluster: Cluster) -> None:
    lease = sorted(cluster.names("leases", "kube-system"))[0]
    label = '{"metadata":{"labels":{"taken":"yes"}}}'
    said = attempt(cluster, TRAINER, "patch", "lease", lease, "-n", "kube-system", "--type=merge", "-p", label)
    assert BOUNDS in said, said
    assert "taken" not in (cluster.get("lease", lease, "kube-system")["metadata"].get("labels") or {})


@pytest.mark.parametrize(
    ("controller", "kind"),
    [
        ("profile", "mutatingwebhookconfiguration"),
        ("trainer", "validatingwebhookconfiguration"),
        ("quota", "validatingwebhookconfiguration"),
        ("audit", "validatingwebhookconfiguration"),
    ],
)
def test_a_controllers_identity_cannot_widen_its_webhook(
    cluster: Cluster, overlay: str, controller: str, kind: str
) -> None:
    """Where controllers put their own CA into their webhook configurations (self-signed-tls),
    RBAC lets them patch those: an admission policy holds them to the caBundle. Where
    cert-manager injects it, they may not patch them at all."""
    needs(overlay, controller)
    name = f"trainer-operator-{controller}"
    before = cluster.get(kind, name)["webhooks"]
    every_pod = [
        {
            "op": "replace",
            "path": "/webhooks/0/rules",
            "value": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}],
        },
        {"op": "replace", "path": "/webhooks/0/failurePolicy", "value": "Fail"},
    ]
    said = attempt(cluster, account(controller), "patch", kind, name, "--type=json", "-p", json.dumps(every_pod))
    if overlay in SELF_SIGNED:
        assert CA_ONLY in said, said
    else:  # RBAC lets it neither read nor patch them (kubectl reads before it patches)
        assert f'cannot get resource "{kind}s"' in said or f'cannot patch resource "{kind}s"' in said, said
    assert cluster.get(kind, name)["webhooks"] == before
