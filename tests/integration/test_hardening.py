"""Hardening of what deploy/ installs, on the real API server: every controller's pod meets the
Pod Security Standard "restricted" (the API server's own PodSecurity admission judges it), the
NetworkPolicies let in exactly the webhook and metrics ports, each ServiceAccount's permissions
match a reviewed snapshot (kubectl auth can-i --list), so RBAC cannot widen unnoticed, and the
trainer controller's identity creates only what it makes (the admission policy
trainer-operator-trainer-creations) and only for Trainers that exist (its webhook
validate-creations).

Snapshots: tests/integration/rbac/<controller>.txt. After a deliberate RBAC change, rewrite them
with TRAINEROP_UPDATE_SNAPSHOTS=1 and review the diff like any other change."""

import functools
import ipaddress
import json
import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed import localdev
from tests.factories import trainer_manifest, trainer_spec
from tests.harness import REPO, Cluster, KubectlError, dry_run_pod, eventually
from trainerop_common.api import PodContribution
from trainerop_common.contracts import SAVE_AT_STEP_ANNOTATION, TRAINER_UID_LABEL
from trainerop_trainer.guard import guard_manifest
from trainerop_trainer.pods import (
    CONTAINER_SECURITY,
    NAMESPACE_OBJECT_LABELS,
    Owner,
    claim_manifest,
    pod_security,
    runner_manifests,
)
from trainerop_trainer.topology import Replica

SNAPSHOTS = Path(__file__).parent / "rbac"
SYSTEM = localdev.NAMESPACE
PROBE = "trainer-operator-rbac-probe"  # a tenant namespace without Trainers, for the snapshots


def build(cluster: Cluster, overlay: str) -> list[dict[str, Any]]:
    out = cluster.kubectl("kustomize", str(REPO / "deploy" / "overlays" / overlay))
    return [doc for doc in yaml.safe_load_all(out) if doc]


@pytest.mark.parametrize("overlay", ["dev", "cert-manager", "production"])
def test_every_controller_pod_meets_the_restricted_pod_security_standard(cluster: Cluster, overlay: str) -> None:
    namespace = cluster.get("namespace", SYSTEM)
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    deployments = [o for o in build(cluster, overlay) if o["kind"] == "Deployment"]
    components = {d["metadata"]["labels"]["app.kubernetes.io/component"] for d in deployments}
    opt_in = set() if overlay == "dev" else {"kubeflow"}  # the kubeflow component is in dev, not these
    assert components == set(localdev.CONTROLLERS) - opt_in
    for deployment in deployments:
        name = deployment["metadata"]["name"]
        code, output = dry_run_pod(cluster, f"pss-{name}", SYSTEM, deployment["spec"]["template"]["spec"])
        assert code == 0, f"{name}: {output}"
        assert "Warning" not in output, output  # PodSecurity warns about every violation


def test_network_policies_let_in_only_the_webhook_and_metrics_ports(cluster: Cluster) -> None:
    objects = build(cluster, "dev")
    policies = [o for o in objects if o["kind"] == "NetworkPolicy"]
    assert {p["metadata"]["name"] for p in policies} == {
        "trainer-operator-default-deny-ingress",
        "trainer-operator-webhooks",
        "trainer-operator-metrics",
        "trainer-operator-egress",
        "trainer-operator-checkpoint-storage",
        "trainer-operator-node-metrics",
        "trainer-operator-verify-registries",
    }
    for policy in policies:  # the API server validates them
        cluster.kubectl("apply", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump(policy))
    allowed: dict[str, set[str]] = {}
    for deployment in (o for o in objects if o["kind"] == "Deployment"):
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        ports = {p["name"] for c in deployment["spec"]["template"]["spec"]["containers"] for p in c.get("ports", ())}
        let_in = {
            port["port"]
            for policy in policies
            if selects(policy["spec"]["podSelector"], labels)
            for rule in policy["spec"].get("ingress", ())
            for port in rule.get("ports", ())
        }
        assert ports == let_in, (deployment["metadata"]["name"], ports, let_in)  # every port, and only those
        allowed[deployment["metadata"]["name"]] = let_in
    assert allowed["trainer-operator-checkpoint"] == {"metrics"}  # no webhook there
    assert allowed["trainer-operator-profile"] == {"metrics", "webhook"}
    metrics = next(p for p in policies if p["metadata"]["name"] == "trainer-operator-metrics")
    assert metrics["spec"]["ingress"][0]["from"] == [
        {"namespaceSelector": {"matchLabels": {"trainer.operator.kubeflow.org/metrics-scraper": "true"}}}
    ]


Destination = tuple[str, int, str]  # address, port, protocol


def egress_allows(policies: list[dict[str, Any]], labels: dict[str, str], destination: Destination) -> bool:
    """Whether a pod with ``labels`` may connect to ``destination`` (the union of the egress rules
    of every policy that selects it and has Egress in its policyTypes; none selects it: anything)."""
    selecting = [
        p for p in policies if "Egress" in p["spec"]["policyTypes"] and selects(p["spec"]["podSelector"], labels)
    ]
    address, port, protocol = destination
    ip = ipaddress.ip_address(address)

    def in_block(peer: dict[str, Any]) -> bool:
        assert set(peer) == {"ipBlock"}, peer  # the only peer deploy/ uses
        cidr = ipaddress.ip_network(peer["ipBlock"]["cidr"])
        excepted = [ipaddress.ip_network(e) for e in peer["ipBlock"].get("except", ())]
        if ip.version != cidr.version or ip not in cidr:
            return False
        return not any(ip in e for e in excepted if e.version == ip.version)

    def allows(rule: dict[str, Any]) -> bool:
        by_port = any(p["port"] == port and p.get("protocol", "TCP") == protocol for p in rule.get("ports", ()))
        return by_port and ("to" not in rule or any(in_block(peer) for peer in rule["to"]))

    return not selecting or any(allows(r) for p in selecting for r in p["spec"].get("egress", ()))


# destination, whether the checkpoint controller may connect there, the quota controller, the verify
# controller, every other
EGRESS: list[tuple[Destination, bool, bool, bool, bool]] = [
    (("10.96.0.10", 53, "UDP"), True, True, True, True),  # CoreDNS
    (("169.254.20.10", 53, "UDP"), True, True, True, True),  # a node-local DNS cache
    (("10.96.0.1", 443, "TCP"), True, True, True, True),  # the API server's Service
    (("192.168.10.4", 6443, "TCP"), True, True, True, True),  # the API server itself
    (("10.1.2.3", 4318, "TCP"), True, True, True, True),  # an OTLP collector
    (("52.216.0.1", 443, "TCP"), True, True, True, True),  # S3, a notification webhook
    (
        ("10.1.2.3", 8333, "TCP"),
        True,
        False,
        False,
        False,
    ),  # an in-cluster S3 (SeaweedFS): the checkpoint controller only
    (("10.1.2.3", 9000, "TCP"), True, False, False, False),  # MinIO
    (("10.1.2.3", 80, "TCP"), True, False, False, False),
    (("10.1.2.3", 9400, "TCP"), False, True, False, False),  # a node's DCGM exporter: the quota's proactive mode only
    (("10.1.2.3", 9100, "TCP"), False, True, False, False),  # its node exporter
    (("10.1.2.3", 9090, "TCP"), False, True, False, False),  # a Prometheus server
    (("10.1.2.3", 5000, "TCP"), False, False, True, False),  # a private registry: the verify controller only
    (
        ("169.254.169.254", 80, "TCP"),
        False,
        False,
        False,
        False,
    ),  # the cloud's instance metadata: the node's credentials
    (("169.254.169.254", 443, "TCP"), False, False, False, False),
    (("169.254.169.254", 9100, "TCP"), False, False, False, False),
    (("fd00:ec2::254", 80, "TCP"), False, False, False, False),
    (("10.1.2.3", 5432, "TCP"), False, False, False, False),  # anything else
]


def test_egress_reaches_dns_the_api_server_and_storage_never_instance_metadata(cluster: Cluster) -> None:
    objects = build(cluster, "dev")
    policies = [o for o in objects if o["kind"] == "NetworkPolicy"]
    wrong = []
    for deployment in (o for o in objects if o["kind"] == "Deployment"):
        name = deployment["metadata"]["name"]
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        for destination, checkpoint, quota, verify, others in EGRESS:
            own = {"trainer-operator-checkpoint": checkpoint, "trainer-operator-quota": quota}
            expected = (own | {"trainer-operator-verify": verify}).get(name, others)
            if egress_allows(policies, labels, destination) != expected:
                wrong.append((name, destination, expected))
    assert not wrong  # (controller, destination, whether it should be reachable)


def normalized(rule: str) -> str:
    def sort_items(match: re.Match[str]) -> str:
        return "[" + " ".join(sorted(match.group(1).split())) + "]"

    return re.sub(r"\[([^\]]*)\]", sort_items, " ".join(rule.split()))


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    ok = all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())
    for expression in selector.get("matchExpressions") or ():
        assert expression["operator"] == "In", expression  # the only operator deploy/ uses
        ok = ok and labels.get(expression["key"]) in expression["values"]
    return ok


@pytest.mark.parametrize("controller", localdev.CONTROLLERS)
def test_each_service_account_can_do_exactly_what_its_snapshot_says(cluster: Cluster, controller: str) -> None:
    account = f"system:serviceaccount:{SYSTEM}:trainer-operator-{controller}"
    sections = []
    # A namespace that never holds a Trainer: the trainer controller binds Secret reading where
    # Trainers are, which would make a snapshot of a shared namespace depend on the tests before.
    if PROBE not in cluster.kubectl("get", "namespaces", "-o", "name"):
        cluster.kubectl("create", "namespace", PROBE)
    for namespace in (SYSTEM, PROBE):
        header, *rules = cluster.kubectl("auth", "can-i", "--list", f"--as={account}", "-n", namespace).splitlines()
        # the API server lists rules (and merges their verbs) in the order it meets their
        # bindings, which may vary: rules and the items of each [list] sorted
        listing = "\n".join([" ".join(header.split()), *sorted(normalized(rule) for rule in rules)])
        sections.append(f"# kubectl auth can-i --list --as={account} -n {namespace}\n{listing}\n")
    actual = "\n".join(sections)
    snapshot = SNAPSHOTS / f"{controller}.txt"
    if os.environ.get("TRAINEROP_UPDATE_SNAPSHOTS") == "1":
        snapshot.parent.mkdir(exist_ok=True)
        snapshot.write_text(actual)
    assert snapshot.exists(), f"no snapshot {snapshot}: run with TRAINEROP_UPDATE_SNAPSHOTS=1 and review it"
    assert actual == snapshot.read_text(), (
        f"the permissions of {account} changed; if that is meant, run with TRAINEROP_UPDATE_SNAPSHOTS=1 "
        "and review the diff of the snapshot"
    )


def can(cluster: Cluster, controller: str, *request: str) -> bool:
    """kubectl auth can-i, asked as the controller's own ServiceAccount."""
    try:
        return cluster.kubectl("auth", "can-i", *request, as_controller=controller).strip() == "yes"
    except KubectlError:  # kubectl exits 1 for "no"
        return False


@pytest.mark.parametrize("controller", sorted(localdev.WEBHOOK_PORTS))
def test_a_webhook_controller_reads_only_its_own_ca_and_creates_no_secret(cluster: Cluster, controller: str) -> None:
    """--webhook-tls self-signed: each controller's CA key is readable by that controller alone,
    and none may create a Secret (a created token Secret would give it another account's rights)."""
    readable = {
        other: can(cluster, controller, "get", f"secret/trainer-operator-{other}-webhook-ca", "-n", SYSTEM)
        for other in localdev.WEBHOOK_PORTS
    }
    assert readable == {other: other == controller for other in localdev.WEBHOOK_PORTS}
    assert can(cluster, controller, "patch", f"secret/trainer-operator-{controller}-webhook-ca", "-n", SYSTEM)
    assert not can(cluster, controller, "create", "secrets", "-n", SYSTEM)


def as_trainer_controller(cluster: Cluster, namespace: str, obj: dict[str, Any]) -> str:
    """A server-side dry run of ``obj`` created with the trainer controller's own credentials: ""
    when the API server accepts it, else its refusal."""
    try:
        cluster.kubectl(
            "create", "--dry-run=server", "-n", namespace, "-f", "-", stdin=json.dumps(obj), as_controller="trainer"
        )
    except KubectlError as err:
        return str(err)
    return ""


def with_runner_account(cluster: Cluster, namespace: str) -> None:
    """The runner ServiceAccount the trainer applies before its first pod: without it the API
    server's ServiceAccount admission refuses every pod before the policy under test is asked."""
    account, _, _ = runner_manifests(namespace)
    cluster.apply(account, namespace)


def a_trainer(cluster: Cluster, namespace: str, name: str = "t", **spec: Any) -> str:
    """A suspended Trainer (its controller makes no pods for it): what the trainer controller's
    creations must belong to (its webhook validate-creations); its uid."""
    cluster.apply(trainer_manifest(name, runPolicy={"suspend": True}, **spec), namespace)
    uid: str = cluster.get("trainer", name, namespace)["metadata"]["uid"]
    return uid


MANAGED = dict(NAMESPACE_OBJECT_LABELS)
ROOTLESS_ADMIN = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"], "add": ["SYS_ADMIN"]}}


def training_pod(trainer_uid: str, **spec: Any) -> dict[str, Any]:
    """A pod of the shape the trainer makes (Pod Security restricted), with ``spec`` over it."""
    owner = {
        "apiVersion": "trainer.operator.kubeflow.org/v1alpha1",
        "kind": "Trainer",
        "name": "t",
        "uid": trainer_uid,
        "controller": True,
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "t-worker-0",
            "labels": {TRAINER_UID_LABEL: trainer_uid, **MANAGED},
            "ownerReferences": [owner],
        },
        "spec": {
            "serviceAccountName": "trainer-operator-runner",
            "securityContext": pod_security(PodContribution()),
            "containers": [{"name": "trainer", "image": "busybox:1.36", "securityContext": CONTAINER_SECURITY}],
            **spec,
        },
    }


@pytest.mark.parametrize(
    ("change", "refusal"),
    [
        ({}, ""),  # what the controller makes
        ({"hostNetwork": True}, "host's network, process or IPC namespace"),
        ({"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}, "may not mount a host path"),
        ({"serviceAccountName": "default"}, "run as trainer-operator-runner, not default"),
        ({"nodeName": "kwok-gpu-0"}, "never by nodeName"),
        (
            {"containers": [{"name": "t", "image": "i", "securityContext": {"privileged": True}}]},
            "privileged container",
        ),
        ({"containers": [{"name": "t", "image": "i", "ports": [{"containerPort": 80, "hostPort": 80}]}]}, "host port"),
        # Pod Security restricted, in a namespace that says no level of its own
        ({"securityContext": {"runAsUser": 0, "runAsNonRoot": False}}, "run as non-root"),
        ({"securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "Unconfined"}}}, "are confined"),
        ({"securityContext": {"runAsNonRoot": True}}, "RuntimeDefault or a Localhost seccomp profile"),
        (
            {"containers": [{"name": "t", "image": "i", "securityContext": ROOTLESS_ADMIN}]},
            "beyond Pod Security baseline",
        ),
        ({"containers": [{"name": "t", "image": "i"}]}, "drop every capability"),
        ({"volumes": [{"name": "v", "nfs": {"server": "nfs", "path": "/"}}]}, "volume types Pod Security restricted"),
        (
            {
                "securityContext": {
                    **pod_security(PodContribution()),
                    "sysctls": [{"name": "kernel.msgmax", "value": "1"}],
                }
            },
            "no sysctls",
        ),
        ({"securityContext": {**pod_security(PodContribution()), "seLinuxOptions": {"type": "spc_t"}}}, "SELinux"),
    ],
)
def test_the_trainer_controllers_identity_creates_only_the_pods_it_makes(
    cluster: Cluster, namespace: str, change: dict[str, Any], refusal: str
) -> None:
    trainer = a_trainer(cluster, namespace)
    with_runner_account(cluster, namespace)
    said = as_trainer_controller(cluster, namespace, training_pod(trainer, **change))
    assert (refusal in said) if refusal else said == "", said


def test_the_trainer_controllers_identity_makes_no_other_rbac_and_no_unowned_pods(
    cluster: Cluster, namespace: str
) -> None:
    trainer = a_trainer(cluster, namespace)
    with_runner_account(cluster, namespace)
    unowned = training_pod(trainer)
    unowned["metadata"].pop("ownerReferences")
    assert "only pods a Trainer controls" in as_trainer_controller(cluster, namespace, unowned)
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "admin", "labels": MANAGED}}
    assert "only the serviceaccounts trainer-operator-runner" in as_trainer_controller(cluster, namespace, account)
    _, role, _ = runner_manifests(namespace)
    cluster.apply(role, namespace)  # RBAC's own escalation check needs the Role to exist
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "trainer-operator-runner", "labels": MANAGED},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "trainer-operator-runner"},
        "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": namespace}],
    }
    assert "to that ServiceAccount of its namespace only" in as_trainer_controller(cluster, namespace, binding)
    wider = {**role, "rules": [*role["rules"], {"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}]}
    assert "the runner's Role grants only" in as_trainer_controller(cluster, namespace, wider)
    # The runner's own Role passes admission (and then exists already: it was applied above).
    assert "already exists" in as_trainer_controller(cluster, namespace, role)
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "t", **{k: training_pod(trainer)["metadata"][k] for k in ("labels", "ownerReferences")}},
        "spec": {"ports": [{"port": 80}], "externalIPs": ["1.2.3.4"]},
    }
    assert "headless Services without external IPs" in as_trainer_controller(cluster, namespace, service)


OWNERS = 'admission webhook "validate-creations.trainer.operator.kubeflow.org" denied the request'


def test_the_trainer_controllers_identity_creates_nothing_where_no_trainer_is(cluster: Cluster, namespace: str) -> None:
    """Objects of the shape the trainer makes (the creations policy accepts them), in a namespace
    without Trainers: one a Trainer would control, and one that no Trainer controls."""
    said = as_trainer_controller(cluster, namespace, headless_service("made-up"))
    assert OWNERS in said, said
    assert f"{namespace} holds no Trainer t of uid made-up" in said, said
    said = as_trainer_controller(cluster, namespace, grant(*PROFILE_GRANT))
    assert OWNERS in said, said
    assert f"only where Trainers are: {namespace} holds none" in said, said


def headless_service(trainer_uid: str) -> dict[str, Any]:
    """The Service the trainer makes for a Trainer t of ``trainer_uid``."""
    pod = training_pod(trainer_uid)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "t", **{k: pod["metadata"][k] for k in ("labels", "ownerReferences")}},
        "spec": {"clusterIP": "None"},
    }


def test_the_trainer_controllers_identity_creates_only_for_the_trainer_of_that_name_that_exists(
    cluster: Cluster, namespace: str
) -> None:
    a_trainer(cluster, namespace)
    with_runner_account(cluster, namespace)
    said = as_trainer_controller(cluster, namespace, training_pod("an-earlier-trainers-uid"))
    assert OWNERS in said, said
    assert "only for a Trainer that exists" in said, said


def test_the_trainer_controllers_identity_creates_nothing_for_a_trainer_name_that_does_not_exist(
    cluster: Cluster, namespace: str
) -> None:
    """A namespace that holds Trainers, and a pod owned by a made-up one mounting a Secret: the
    owner is looked up by its name, so the pod is refused before its containers could start."""
    a_trainer(cluster, namespace, name="real")
    with_runner_account(cluster, namespace)
    said = as_trainer_controller(cluster, namespace, with_secret(training_pod("made-up"), SECRET_VOLUME))
    assert OWNERS in said, said
    assert f"{namespace} holds no Trainer t of uid made-up" in said, said
    said = as_trainer_controller(cluster, namespace, headless_service("made-up"))
    assert f"{namespace} holds no Trainer t of uid made-up" in said, said


SECRET_VOLUME = {"name": "s", "secret": {"secretName": "team-secret"}}
SECRET_ENV = {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "team-secret", "key": "k"}}}
PROJECTED = {"name": "s", "projected": {"sources": [{"secret": {"name": "team-secret"}}]}}
ENV_FROM = {"secretRef": {"name": "team-secret"}}


def with_secret(
    pod: dict[str, Any], volume: dict[str, Any] | None = None, pull: str = "", **container: Any
) -> dict[str, Any]:
    if volume is not None:
        pod["spec"]["volumes"] = [volume]
    if pull:
        pod["spec"]["imagePullSecrets"] = [{"name": pull}]
    pod["spec"]["containers"][0].update(container)
    return pod


@pytest.mark.parametrize(
    ("trainer_names", "uses", "refusal"),
    [
        ({}, {"volume": SECRET_VOLUME}, "not team-secret"),
        ({}, {"volume": PROJECTED}, "not team-secret"),
        ({}, {"env": [SECRET_ENV]}, "not team-secret"),
        ({}, {"envFrom": [ENV_FROM]}, "not team-secret"),
        ({"podTemplateOverrides": {"worker": {"spec": {"volumes": [SECRET_VOLUME]}}}}, {"volume": SECRET_VOLUME}, ""),
        ({"podTemplateOverrides": {"worker": {"spec": {"volumes": [PROJECTED]}}}}, {"volume": PROJECTED}, ""),
        (
            {"podTemplateOverrides": {"master": {"spec": {"containers": [{"name": "c", "envFrom": [ENV_FROM]}]}}}},
            {"envFrom": [ENV_FROM]},
            "",
        ),
        ({"env": [SECRET_ENV]}, {"env": [SECRET_ENV]}, ""),
        ({}, {"pull": "team-secret"}, "not team-secret"),  # its credentials go to the image's registry
        (
            {"podTemplateOverrides": {"worker": {"spec": {"imagePullSecrets": [{"name": "team-secret"}]}}}},
            {"pull": "team-secret"},
            "",
        ),
        ({"env": [SECRET_ENV]}, {"volume": {"name": "s", "secret": {"secretName": "other"}}}, "not other"),
        (
            {"model": {"source": "hf://org/model@main", "cacheClaim": "models", "tokenSecret": "team-secret"}},
            {"env": [SECRET_ENV]},
            "",
        ),
    ],
)
def test_a_training_pod_uses_only_the_secrets_its_trainer_names(
    cluster: Cluster, namespace: str, trainer_names: dict[str, Any], uses: dict[str, Any], refusal: str
) -> None:
    """Creating a pod lets it read any Secret of its namespace, whoever may read Secrets: the
    trainer controller's pods may use only those their Trainer's spec, profile or checkpoint name."""
    trainer = a_trainer(cluster, namespace, **trainer_names)
    with_runner_account(cluster, namespace)
    said = as_trainer_controller(cluster, namespace, with_secret(training_pod(trainer), **uses))
    assert (OWNERS in said and refusal in said) if refusal else said == "", said


def test_a_training_pod_has_at_most_the_clusters_default_priority(cluster: Cluster, namespace: str) -> None:
    """A class preempts pods of every namespace on the nodes it needs: the trainer's identity may
    not give its pods one above the cluster's default (system-node-critical preempts nearly
    anything); a lower one preempts no one. (A class marked globalDefault, which the API server
    gives every pod, is allowed: tests/unit/test_trainer_creations.py. One is not made here, where
    other tests' pods would get it.)"""
    trainer = a_trainer(cluster, namespace)
    with_runner_account(cluster, namespace)
    urgent, low = f"urgent-{namespace}", f"low-{namespace}"
    for name, value in ((urgent, 1000), (low, -10)):
        cluster.apply(
            {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value}
        )

    def said(name: str) -> list[str] | None:
        """The verdict on a pod of that class ("": admitted), once the API server's priority
        admission knows the class."""
        verdict = as_trainer_controller(cluster, namespace, training_pod(trainer, priorityClassName=name))
        return None if "no PriorityClass with name" in verdict else [verdict]

    try:
        for name in ("system-node-critical", urgent):
            (refusal,) = eventually(functools.partial(said, name), what=f"a verdict on class {name}")
            assert OWNERS in refusal, refusal
            assert f"not priority class {name} (" in refusal, refusal
        assert eventually(lambda: said(low), what=f"a verdict on class {low}") == [""]
        assert as_trainer_controller(cluster, namespace, training_pod(trainer)) == ""
    finally:
        cluster.kubectl("delete", "priorityclass", urgent, low, "--ignore-not-found")


@pytest.mark.parametrize("section", ["profile", "checkpoint"])
def test_a_secret_a_concern_contributes_is_named_by_it_alone(cluster: Cluster, namespace: str, section: str) -> None:
    """The profile's and checkpoint's contributions name Secrets for the pods; only those
    controllers may write them (trainer-operator-status-sections), so the trainer's identity
    cannot name a Secret there for itself."""
    trainer = a_trainer(cluster, namespace)
    with_runner_account(cluster, namespace)
    pod = with_secret(training_pod(trainer), SECRET_VOLUME)
    assert "not team-secret" in as_trainer_controller(cluster, namespace, pod)
    status = {"status": {section: {"contribution": {"generation": 1, "pod": {"volumes": [SECRET_VOLUME]}}}}}
    patch = ("patch", "trainer", "t", "-n", namespace, "--subresource=status", "--type=merge", "-p", json.dumps(status))
    said = refusal_of(cluster, *patch)
    assert SECTIONS in said, said
    assert f"writes only its own section of a Trainer's status, not {section}" in said, said
    cluster.kubectl(*patch, as_controller=section)
    eventually(
        lambda: as_trainer_controller(cluster, namespace, pod) == "",
        timeout=30,
        what="the API server's policy to read the contribution",
    )


SECTIONS = "ValidatingAdmissionPolicy 'trainer-operator-status-sections'"
# A condition added to those the Trainer has (a JSON patch: a merge patch would replace the list).
PROFILE_RESOLVED = [
    {
        "op": "add",
        "path": "/status/conditions/-",
        "value": {
            "type": "ProfileResolved",
            "status": "True",
            "reason": "R",
            "message": "m",
            "lastTransitionTime": "2026-12-07T00:00:00Z",
        },
    }
]


@pytest.mark.parametrize(
    ("controller", "status", "refusal"),
    [
        ("trainer", {"phase": "Running"}, ""),
        ("trainer", {"quota": {"admitted": True}}, "not quota"),
        ("quota", {"phase": "Succeeded"}, "not phase"),
        ("verify", {"verify": {}}, ""),
        ("audit", {"message": "x", "checkpoint": {"latest": "x"}}, "not message, checkpoint"),
        ("trainer", PROFILE_RESOLVED, "own conditions of a Trainer, not ProfileResolved"),
        ("profile", PROFILE_RESOLVED, ""),
    ],
)
def test_each_controllers_identity_writes_only_its_own_section_of_a_trainers_status(
    cluster: Cluster, namespace: str, controller: str, status: dict[str, Any] | list[dict[str, Any]], refusal: str
) -> None:
    a_trainer(cluster, namespace)
    eventually(lambda: cluster.get("trainer", "t", namespace).get("status", {}).get("conditions"), what="conditions")
    kind = "json" if isinstance(status, list) else "merge"
    patch = json.dumps(status if isinstance(status, list) else {"status": status})
    said = refusal_of(
        cluster,
        *("patch", "trainer", "t", "-n", namespace, "--subresource=status", f"--type={kind}", "-p", patch),
        controller=controller,
    )
    assert (SECTIONS in said and refusal in said) if refusal else said == "", said


def refusal_of(cluster: Cluster, *request: str, controller: str = "trainer") -> str:
    """A server-side dry run of a kubectl request made with the controller's own credentials: ""
    when the API server accepts it, else its refusal."""
    try:
        cluster.kubectl(*request, "--dry-run=server", as_controller=controller)
    except KubectlError as err:
        return str(err)
    return ""


@pytest.mark.parametrize(
    ("level", "container", "refusal"),
    [
        ("baseline", {"securityContext": {"runAsUser": 0}}, ""),  # root: baseline allows it
        # refused by the API server's PodSecurity admission (the label) before this policy: both say baseline
        ("baseline", {"securityContext": ROOTLESS_ADMIN}, "baseline"),
        ("baseline", {"securityContext": {"seccompProfile": {"type": "Unconfined"}}}, "baseline"),
        ("privileged", {"securityContext": {"runAsUser": 0, "capabilities": {"add": ["CHOWN"]}}}, ""),
        # privileged lets the namespace's own users do more; the trainer's identity stays within baseline
        ("privileged", {"securityContext": {"runAsUser": 0, "capabilities": {"add": ["SYS_ADMIN"]}}}, "at any level"),
        ("privileged", {"securityContext": {"seccompProfile": {"type": "Unconfined"}}}, "training pods are confined"),
    ],
)
def test_a_namespaces_own_pod_security_level_lets_its_training_pods_do_more_up_to_baseline(
    cluster: Cluster, namespace: str, level: str, container: dict[str, Any], refusal: str
) -> None:
    cluster.kubectl("label", "namespace", namespace, f"pod-security.kubernetes.io/enforce={level}", "--overwrite")
    trainer = a_trainer(cluster, namespace)
    with_runner_account(cluster, namespace)
    pod = training_pod(trainer, securityContext={}, containers=[{"name": "t", "image": "i", **container}])
    said = as_trainer_controller(cluster, namespace, pod)
    assert (refusal in said) if refusal else said == "", said


@pytest.mark.parametrize("where", ["kube-system", SYSTEM])
def test_the_trainer_controllers_identity_stays_out_of_the_clusters_and_the_operators_namespaces(
    cluster: Cluster, where: str
) -> None:
    account = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": "trainer-operator-runner", "labels": MANAGED},
    }
    pod = training_pod("u", serviceAccountName="default")  # an account that exists there
    lease = json.loads(cluster.kubectl("get", "leases", "-n", "kube-system", "-o", "json"))["items"][0]["metadata"]
    said = [
        refusal_of(cluster, "patch", "lease", lease["name"], "-n", "kube-system", "--type=merge", "-p", "{}"),
        refusal_of(cluster, "delete", "lease", lease["name"], "-n", "kube-system"),
    ]
    for refusal in said:
        assert "acts only in tenants' namespaces" in refusal, refusal
    # (No Trainer there either, but the API server's policies are asked before the webhook.)
    refusal = as_trainer_controller(cluster, where, account)
    assert "acts only in tenants' namespaces" in refusal, refusal
    # Both policies refuse the pod (its account is not the runner either); the API server names one.
    assert "ValidatingAdmissionPolicy 'trainer-operator-trainer-" in as_trainer_controller(cluster, where, pod)


def test_the_trainer_controllers_identity_writes_no_lease_and_deletes_only_its_own(
    cluster: Cluster, namespace: str
) -> None:
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "t-worker-0", "labels": {"trainer-name": "t"}},
        "spec": {},
    }
    assert "writes no leases" in as_trainer_controller(cluster, namespace, lease)
    unlabelled = {**lease, "metadata": {"name": "someone-elses"}}
    cluster.apply(lease, namespace)
    cluster.apply(unlabelled, namespace)
    assert refusal_of(cluster, "delete", "lease", "t-worker-0", "-n", namespace) == ""  # a rank's heartbeat
    assert "heartbeat Leases" in refusal_of(cluster, "delete", "lease", "someone-elses", "-n", namespace)
    plain = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "database"},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }
    cluster.apply(plain, namespace)
    assert "deletes only pods a Trainer controls" in refusal_of(cluster, "delete", "pod", "database", "-n", namespace)
    cluster.apply(
        trainer_manifest("running", topology={"workers": 1}, runPolicy={"ttlSecondsAfterFinished": 0}), namespace
    )
    assert "only finished Trainers" in refusal_of(cluster, "delete", "trainer", "running", "-n", namespace)


def test_the_checkpoint_controllers_identity_writes_only_save_requests_on_ranks_leases(
    cluster: Cluster, namespace: str
) -> None:
    rank = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "t-worker-0", "labels": {"trainer-name": "t", TRAINER_UID_LABEL: "u-1"}},
        "spec": {"holderIdentity": "t-worker-0"},
    }
    cluster.apply(rank, namespace)
    save = {"annotations": {SAVE_AT_STEP_ANNOTATION: "40"}}
    control_plane = sorted(cluster.names("leases", "kube-system"))[0]

    def patch(name: str, where: str, metadata: dict[str, Any], spec: dict[str, Any] | None = None) -> str:
        """As the controller does: a patch without reading the Lease first (it may not get one)."""
        lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name, **metadata}}
        body = json.dumps(lease | ({"spec": spec} if spec else {}))
        try:
            cluster.kubectl(
                "apply",
                "--server-side",
                "--force-conflicts",
                "--field-manager=checkpoint",
                "--dry-run=server",
                "-n",
                where,
                "-f",
                "-",
                stdin=body,
                as_controller="checkpoint",
            )
        except KubectlError as err:
            return str(err)
        return ""

    assert patch("t-worker-0", namespace, save) == ""
    assert "only the save request" in patch("t-worker-0", namespace, {}, {"holderIdentity": "someone"})
    assert "heartbeat Leases" in patch(control_plane, "kube-system", save)


@pytest.mark.parametrize(
    ("patch", "refusal"),
    [
        ([{"op": "replace", "path": "/webhooks/0/clientConfig/caBundle", "value": "Zm9v"}], ""),
        ([{"op": "replace", "path": "/webhooks/0/rules/0/resources", "value": ["*"]}], "only the caBundle"),
        ([{"op": "replace", "path": "/webhooks/0/failurePolicy", "value": "Ignore"}], "only the caBundle"),
        (
            [{"op": "add", "path": "/webhooks/0/objectSelector", "value": {"matchLabels": {"a": "b"}}}],
            "only the caBundle",
        ),
        ([{"op": "add", "path": "/metadata/labels/x", "value": "y"}], "only the caBundle"),
    ],
)
def test_a_controller_changes_only_the_ca_bundle_of_its_webhook_configuration(
    cluster: Cluster, patch: list[dict[str, Any]], refusal: str
) -> None:
    said = refusal_of(
        cluster,
        "patch",
        "mutatingwebhookconfiguration",
        "trainer-operator-profile",
        "--type=json",
        "-p",
        json.dumps(patch),
        controller="profile",
    )
    assert (refusal in said) if refusal else said == "", said


def test_the_trainer_controllers_identity_guards_only_its_own_trainers_pods_from_drains(
    cluster: Cluster, namespace: str
) -> None:
    """A drain guard (trainerop_trainer.guard) over any other pods would hold up the drains of
    the cluster: only the pods of the Trainer that controls it."""
    owner = Owner("t", namespace, a_trainer(cluster, namespace), 1)
    assert as_trainer_controller(cluster, namespace, guard_manifest(owner, 3)) == ""
    others = guard_manifest(owner, 3)
    others["spec"]["selector"] = {"matchLabels": {"app": "database"}}
    unowned = guard_manifest(owner, 3)
    unowned["metadata"].pop("ownerReferences")
    another = guard_manifest(replace(owner, uid="another-uid"), 3)
    another["metadata"] = guard_manifest(owner, 3)["metadata"]  # its own Trainer's, guarding another's pods
    for budget in (others, another):
        assert "guards only the pods of the Trainer" in as_trainer_controller(cluster, namespace, budget)
    assert "only poddisruptionbudgets a Trainer controls" in as_trainer_controller(cluster, namespace, unowned)


def grant(role: str, account: str, kind: str = "ClusterRole") -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": role, "labels": MANAGED},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": SYSTEM}],
    }


PROFILE_GRANT = ("trainer-operator-profile-secret-check", "trainer-operator-profile")
CHECKPOINT_GRANT = ("trainer-operator-checkpoint-credentials", "trainer-operator-checkpoint")


@pytest.mark.parametrize(
    ("role", "account", "where", "refusal"),
    [
        (*PROFILE_GRANT, "tenant", ""),
        (*CHECKPOINT_GRANT, "tenant", ""),
        (PROFILE_GRANT[0], "trainer-operator-trainer", "tenant", "to the profile or checkpoint controller alone"),
        (PROFILE_GRANT[0], CHECKPOINT_GRANT[1], "tenant", "to the profile or checkpoint controller alone"),
        (*PROFILE_GRANT, SYSTEM, "outside the operator's namespace"),  # beside the CA Secrets
        (*CHECKPOINT_GRANT, "kube-system", "outside the operator's namespace"),
    ],
)
def test_the_trainer_controller_grants_secret_reading_only_to_those_controllers_in_tenants_namespaces(
    cluster: Cluster, namespace: str, role: str, account: str, where: str, refusal: str
) -> None:
    a_trainer(cluster, namespace)
    said = as_trainer_controller(cluster, namespace if where == "tenant" else where, grant(role, account))
    if not refusal:  # admitted: the controller may have made it already, for the Trainer
        assert said == "" or "already exists" in said, said
    elif where == "tenant":
        assert refusal in said, said
    else:  # no Trainer there either, but the API server's policies are asked before the webhook
        assert refusal in said, said


def test_secrets_are_readable_by_the_profile_and_checkpoint_controllers_only_where_trainers_are(
    cluster: Cluster, namespace: str
) -> None:
    """Nothing bound cluster-wide: the trainer controller binds the two ClusterRoles in a
    namespace when it meets a Trainer there (before its gates answer)."""
    for controller in ("profile", "checkpoint"):
        assert not can(cluster, controller, "get", "secrets", "-n", namespace)
        assert not can(cluster, controller, "get", "secrets", "-n", "kube-system")
    cluster.apply(trainer_manifest("granted", topology={"workers": 1}), namespace)
    eventually(
        lambda: all(can(cluster, c, "get", "secrets", "-n", namespace) for c in ("profile", "checkpoint")),
        timeout=30,
        what="the trainer controller's Secret grants in the Trainer's namespace",
    )
    assert not can(cluster, "profile", "list", "secrets", "-n", namespace)  # get by name only
    assert not can(cluster, "quota", "get", "secrets", "-n", namespace)  # reads none: granted nothing


def test_training_pods_pass_a_restricted_namespace_unless_a_profile_lets_them_run_as_root(
    cluster: Cluster, namespace: str
) -> None:
    cluster.kubectl("label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted", "--overwrite")
    cluster.apply(trainer_manifest("strict", topology={"workers": 2}), namespace)

    def pods_of(trainer: str) -> list[str]:
        listed = json.loads(
            cluster.kubectl("get", "pods", "-n", namespace, "-l", f"trainer-name={trainer}", "-o", "json")
        )
        return [p["metadata"]["name"] for p in listed["items"]]

    assert eventually(lambda: len(pods_of("strict")) == 2 or None, what="the restricted pods to be admitted")
    relaxed = {
        "apiVersion": "trainer.operator.kubeflow.org/v1alpha1",
        "kind": "TrainingProfile",
        "metadata": {"name": "root-ok"},
        "spec": {"securityContext": {"runAsNonRoot": False}},
    }
    cluster.apply(relaxed, namespace)
    cluster.apply(trainer_manifest("rooted", profile="root-ok", topology={"workers": 1}), namespace)

    def refused() -> bool:
        events = json.loads(cluster.kubectl("get", "events", "-n", namespace, "-o", "json"))["items"]
        return any(
            e["reason"] == "CreateRefused" and e["involvedObject"]["name"] == "rooted" and "PodSecurity" in e["message"]
            for e in events
        )

    eventually(refused, what="the namespace's Pod Security to refuse the relaxed pods, said in an Event")
    assert pods_of("rooted") == []


def test_a_root_template_is_refused_under_restricted_and_runs_as_root_once_the_namespace_says_baseline(
    cluster: Cluster, namespace: str
) -> None:
    """Issue 53: the namespace's own level, not the operator's. Under restricted (no label) the
    webhook refuses the root override, naming the level and the label; once the namespace is
    labelled baseline, the same Trainer is admitted at once (a refusal is confirmed on the API
    server's namespace) and its pod is created as root (no runAsNonRoot, no capability drop), the
    API server's own PodSecurity and the creations policy admitting it. A host path stays refused."""
    root = {"worker": {"spec": {"securityContext": {"runAsUser": 0}}}}
    rooted = trainer_manifest("rooted", topology={"workers": 1}, podTemplateOverrides=root)
    with pytest.raises(KubectlError) as refused:
        cluster.apply(rooted, namespace)
    assert 'Pod Security "restricted" forbids it' in refused.value.stderr
    assert "pod-security.kubernetes.io/enforce" in refused.value.stderr
    cluster.kubectl("label", "namespace", namespace, "pod-security.kubernetes.io/enforce=baseline")
    cluster.apply(rooted, namespace)  # the webhook reads the new level
    eventually(lambda: "rooted-worker-0" in cluster.names("pod", namespace), what="the root pod under baseline")
    pod = cluster.get("pod", "rooted-worker-0", namespace)
    assert pod["spec"]["securityContext"] == {"runAsUser": 0, "seccompProfile": {"type": "RuntimeDefault"}}
    assert "securityContext" not in pod["spec"]["containers"][0]
    host = {"worker": {"spec": {"volumes": [{"name": "h", "hostPath": {"path": "/"}}]}}}
    with pytest.raises(KubectlError) as bound:
        cluster.apply(trainer_manifest("host", topology={"workers": 1}, podTemplateOverrides=host), namespace)
    assert "no privileged or host-level pod" in bound.value.stderr


@pytest.mark.parametrize(
    ("change", "refusal"),
    [
        ({}, ""),  # what the controller makes
        ({"metadata": {"labels": None}}, "labels the persistentvolumeclaims it makes"),
        ({"metadata": {"ownerReferences": None}}, "only persistentvolumeclaims a Trainer controls"),
        ({"spec": {"volumeName": "someone-elses-volume"}}, "bind no chosen volume"),
        ({"spec": {"dataSource": {"kind": "PersistentVolumeClaim", "name": "other"}}}, "copy no data source"),
    ],
)
def test_the_trainer_controllers_identity_creates_only_the_claims_it_makes(
    cluster: Cluster, namespace: str, change: dict[str, Any], refusal: str
) -> None:
    trainer = a_trainer(cluster, namespace, storage={"size": "1Gi"})
    spec = trainer_spec(storage={"size": "1Gi"})
    claim = claim_manifest(Owner("t", namespace, trainer, 1), spec, Replica("worker", 0))
    for part, fields in change.items():
        claim[part] = {k: v for k, v in {**claim[part], **fields}.items() if v is not None}
    said = as_trainer_controller(cluster, namespace, claim)
    assert (refusal in said) if refusal else said == "", said
