"""hack/cluster_demo.py's decisions: whether a cluster can run the demo, and the seed Trainer sized
for any cluster (the demo itself runs on a cluster it did not make: tests/quickstart/test_demo.py)."""

from typing import Any

import pytest
import yaml

from hack import cluster_demo, demo_storage
from trainerop_common.api.trainer import TrainerSpec


@pytest.mark.parametrize(
    ("server", "problem"),
    [
        ({"major": "1", "minor": "30", "gitVersion": "v1.30.14"}, None),
        ({"major": "1", "minor": "37", "gitVersion": "v1.37.2"}, None),
        ({"major": "1", "minor": "31+", "gitVersion": "v1.31.2-eks"}, None),  # a provider's minor
        ({"major": "1", "minor": "29", "gitVersion": "v1.29.6"}, "Kubernetes v1.29.6; the operator needs 1.30"),
    ],
)
def test_the_oldest_kubernetes_is_1_30(server: dict[str, str], problem: str | None) -> None:
    found = cluster_demo.version_problem(server)
    assert (found is None) if problem is None else (problem in str(found))


def node(
    ready: str = "True", taints: list[dict[str, str]] | None = None, cpu: str = "2", memory: str = "4Gi", **spec: Any
) -> dict[str, Any]:
    return {
        "spec": {"taints": taints or [], **spec},
        "status": {"conditions": [{"type": "Ready", "status": ready}], "allocatable": {"cpu": cpu, "memory": memory}},
    }


@pytest.mark.parametrize(
    ("candidate", "runs"),
    [
        (node(), True),
        (node(ready="False"), False),
        (node(unschedulable=True), False),
        (node(taints=[{"key": "gpu", "effect": "NoSchedule"}]), False),
        (node(taints=[{"key": "gpu", "effect": "PreferNoSchedule"}]), True),
        (node(cpu="20m"), False),
        (node(memory="64Mi"), False),
        (node(cpu="1500m", memory="134217728"), True),  # 128Mi in bytes
    ],
)
def test_a_node_runs_the_demos_pods(candidate: dict[str, Any], runs: bool) -> None:
    assert cluster_demo.runs_pods(candidate) is runs


@pytest.mark.parametrize(
    ("storage_class", "bucket", "secret"),
    [("nfs", "demo-checkpoints", None), (None, "s3://checkpoints/seed", "checkpoint-credentials")],
)
def test_the_demo_trainer_is_the_seeds_topology_in_cpu_sized_pods_that_checkpoint(
    storage_class: str | None, bucket: str, secret: str | None
) -> None:
    chosen = demo_storage.claim_storage("ns", storage_class) if storage_class else s3_storage()
    trainer = cluster_demo.demo_trainer("r/trainer-operator:1", chosen.checkpoint)
    spec = TrainerSpec.model_validate(trainer["spec"])  # what the API server's schema holds it to
    assert trainer["metadata"]["name"] == "llama-7b-finetune"
    assert (spec.topology.workers, spec.topology.parameter_servers) == (4, 1)
    assert spec.image == "r/trainer-operator:1"
    assert "nvidia.com/gpu" not in trainer["spec"]["resources"]["limits"]
    assert spec.checkpoint is not None
    assert (spec.checkpoint.bucket, spec.checkpoint.credentials_secret) == (bucket, secret)
    assert spec.checkpoint.max_retention == 3  # the seed's


def s3_storage() -> demo_storage.Storage:
    return demo_storage.s3_storage("ns", "mirror/seaweedfs:4.53", "k3y")


def test_the_checkpoint_claim_is_shared_by_every_replica() -> None:
    chosen = demo_storage.claim_storage("ns", "nfs")
    [claim] = chosen.objects
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert claim["spec"]["storageClassName"] == "nfs"
    assert chosen.s3_image is None


def test_the_demos_s3_server_takes_its_key_on_its_s3_port_only() -> None:
    chosen = s3_storage()
    kinds = {obj["kind"]: obj for obj in chosen.objects}
    credentials = next(o for o in chosen.objects if o["metadata"]["name"] == chosen.checkpoint["credentialsSecret"])
    assert credentials["stringData"]["AWS_ENDPOINT_URL"] == "http://demo-s3.ns.svc:8333"
    identities = next(o for o in chosen.objects if o["metadata"]["name"] == "demo-s3-identities")
    assert '"secretKey": "k3y"' in identities["stringData"]["s3.json"]
    [container] = kinds["Deployment"]["spec"]["template"]["spec"]["containers"]
    assert container["image"] == chosen.s3_image == "mirror/seaweedfs:4.53"
    assert container["securityContext"]["runAsNonRoot"] is True
    assert kinds["Service"]["spec"]["ports"][0]["port"] == 8333
    assert kinds["NetworkPolicy"]["spec"]["ingress"] == [{"ports": [{"port": 8333, "protocol": "TCP"}]}]
    assert "-bucket=checkpoints" in container["command"]  # SeaweedFS makes it: the key may not
    assert '"Admin"' not in identities["stringData"]["s3.json"]


@pytest.mark.parametrize(
    ("listed", "found"),
    [
        ("  checkpoints\tsize:0\tlogical:0\tchunk:0\n", True),
        ("  checkpoints-old\tsize:0\n  other\tsize:0\n", False),
        ("", False),
    ],
)
def test_the_bucket_is_found_in_seaweedfss_list(listed: str, found: bool) -> None:
    assert demo_storage.has_bucket(listed) is found


def test_the_s3_port_is_one_the_operators_egress_policy_allows_the_checkpoint_controller() -> None:
    policies = (cluster_demo.REPO / "deploy" / "components" / "network-policies" / "network-policies.yaml").read_text()
    storage = next(p for p in yaml.safe_load_all(policies) if p["metadata"]["name"].endswith("checkpoint-storage"))
    assert {"port": demo_storage.S3_PORT, "protocol": "TCP"} in storage["spec"]["egress"][0]["ports"]


def test_the_minimum_is_the_oldest_minor_ci_tests() -> None:
    from hack import release
    from testbed import versions

    assert versions.OLDEST.startswith(f"v{versions.MINIMUM}.")
    chart = release.chart("kind: ConfigMap\n", "r/trainer-operator:1", "1")
    assert f"kubeVersion: '>={versions.MINIMUM}.0-0'" in chart["Chart.yaml"]
