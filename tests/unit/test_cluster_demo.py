"""hack/cluster_demo.py's decisions: whether a cluster can run the demo, and the seed Trainer sized
for any cluster (the demo itself runs on a cluster it did not make: tests/quickstart/test_demo.py)."""

from typing import Any

import pytest

from hack import cluster_demo
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
        (node(memory="16Mi"), False),
        (node(cpu="1500m", memory="33554432"), True),  # 32Mi in bytes
    ],
)
def test_a_node_runs_the_demos_pods(candidate: dict[str, Any], runs: bool) -> None:
    assert cluster_demo.runs_pods(candidate) is runs


@pytest.mark.parametrize("claim", [None, "demo-checkpoints"])
def test_the_demo_trainer_is_the_seeds_topology_in_cpu_sized_busybox_pods(claim: str | None) -> None:
    trainer = cluster_demo.demo_trainer(claim)
    spec = TrainerSpec.model_validate(trainer["spec"])  # what the API server's schema holds it to
    assert trainer["metadata"]["name"] == "llama-7b-finetune"
    assert (spec.topology.workers, spec.topology.parameter_servers) == (4, 1)
    assert spec.image == "busybox:1.36"
    assert "nvidia.com/gpu" not in trainer["spec"]["resources"]["limits"]
    assert (spec.checkpoint.bucket if spec.checkpoint else None) == claim


def test_the_checkpoint_claim_is_shared_by_every_replica() -> None:
    assert cluster_demo.checkpoint_claim(None) is None
    claim = cluster_demo.checkpoint_claim("nfs")
    assert claim is not None
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert claim["spec"]["storageClassName"] == "nfs"


def test_the_minimum_is_the_oldest_minor_ci_tests() -> None:
    from hack import release
    from testbed import versions

    assert versions.OLDEST.startswith(f"v{versions.MINIMUM}.")
    chart = release.chart("kind: ConfigMap\n", "r/trainer-operator:1", "1")
    assert f"kubeVersion: '>={versions.MINIMUM}.0-0'" in chart["Chart.yaml"]
