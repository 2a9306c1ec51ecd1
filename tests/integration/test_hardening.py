"""Hardening of what deploy/ installs, on the real API server: every controller's pod meets the
Pod Security Standard "restricted" (the API server's own PodSecurity admission judges it), the
NetworkPolicies let in exactly the webhook and metrics ports, and each ServiceAccount's
permissions match a reviewed snapshot (kubectl auth can-i --list), so RBAC cannot widen unnoticed.

Snapshots: tests/integration/rbac/<controller>.txt. After a deliberate RBAC change, rewrite them
with TRAINEROP_UPDATE_SNAPSHOTS=1 and review the diff like any other change."""

import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed import localdev
from tests.harness import REPO, Cluster, dry_run_pod

SNAPSHOTS = Path(__file__).parent / "rbac"
SYSTEM = localdev.NAMESPACE


def build(cluster: Cluster, overlay: str) -> list[dict[str, Any]]:
    out = cluster.kubectl("kustomize", str(REPO / "deploy" / "overlays" / overlay))
    return [doc for doc in yaml.safe_load_all(out) if doc]


@pytest.mark.parametrize("overlay", ["dev", "cert-manager"])
def test_every_controller_pod_meets_the_restricted_pod_security_standard(cluster: Cluster, overlay: str) -> None:
    namespace = cluster.get("namespace", SYSTEM)
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    deployments = [o for o in build(cluster, overlay) if o["kind"] == "Deployment"]
    assert len(deployments) == 5
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
    for namespace in (SYSTEM, "default"):
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
