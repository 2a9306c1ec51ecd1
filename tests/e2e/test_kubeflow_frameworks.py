"""Kubeflow v1's own examples on the real node, served by the kubeflow controller (issue 22):
upstream's PyTorchJob of a Master and a Worker (DDP over gloo on CPU) and its TFJob of two Workers
(MultiWorkerMirroredStrategy on CPU), read from the upstream Go module's source at the version
bench/kubeflow.py builds (bench.kubeflow.PYTORCH_EXAMPLE, TENSORFLOW_EXAMPLE) and applied with only
their image changed to examples/pytorch's and examples/tensorflow's, which train on scikit-learn's
bundled digits (no download). Upstream's GPU limits go too: its PyTorch example says to remove
them on CPU, and this machine has no GPU. Each job reaches Succeeded with its loss falling, and
reads back as upstream's status."""

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench import kubeflow as upstream
from testbed import containerd, images
from testbed.cluster import ClusterError
from tests.e2e.volumes import node_volume
from tests.harness import REPO, Cluster, KubectlError, eventually, table
from trainerop_common.contracts import KUBEFLOW_JOB_NAME_LABEL


def finished(cluster: Cluster, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
    conditions = cluster.get(kind, name, namespace).get("status", {}).get("conditions", [])
    done = [c for c in conditions if c["type"] in ("Succeeded", "Failed") and c["status"] == "True"]
    return cluster.get(kind, name, namespace) if done else None


def ended(done: dict[str, Any], cluster: Cluster, namespace: str, pods: list[tuple[str, str]]) -> str:
    """The job's final condition type; a failure's message carries its status and the pods' last lines."""
    last = str(done["status"]["conditions"][-1]["type"])
    if last == "Succeeded":
        return last
    tails = []
    for pod, container in pods:
        try:
            tails.append(f"--- {pod}\n" + cluster.kubectl("logs", "-n", namespace, pod, "-c", container, "--tail=30"))
        except (ClusterError, KubectlError) as err:  # not started, or gone
            tails.append(f"--- {pod}: {err}")
    return "\n".join([json.dumps(done["status"], indent=1), *tails])


def falling(losses: list[tuple[int, float]]) -> bool:
    return len(losses) >= 2 and losses[-1][1] < losses[0][1]


FRAMEWORK_IMAGES = ("pytorch-example", "tensorflow-example", "xgboost-example")


@pytest.fixture(scope="module")
def framework_images(real_node: str, operator_in_cluster: None) -> dict[str, str]:
    """examples/pytorch's, examples/tensorflow's and examples/xgboost's images on the node (built
    once, by content)."""
    for name in FRAMEWORK_IMAGES:
        images.load(name, containerd.node_dir())
    return {name: images.IMAGES[name].ref for name in FRAMEWORK_IMAGES}


@pytest.fixture
def strategy_volume(cluster: Cluster, real_namespace: str) -> Iterator[Path]:
    """The claim upstream's TFJob mounts (strategy-volume; its README has users make it with their
    storage class), backed by a directory on the node."""
    with node_volume(cluster, real_namespace, "strategy-volume") as root:
        yield root


def test_upstreams_pytorchjob_trains_with_ddp_over_gloo_to_succeeded(
    cluster: Cluster, real_namespace: str, framework_images: dict[str, str]
) -> None:
    job = upstream.upstream_example(upstream.PYTORCH_EXAMPLE, framework_images["pytorch-example"])
    name = job["metadata"]["name"]  # pytorch-dist-mnist-gloo
    cluster.apply(job, real_namespace)
    done = eventually(
        lambda: finished(cluster, "pytorchjob", real_namespace, name), timeout=600, what="the PyTorchJob to finish"
    )
    pods = [(f"{name}-master-0", "pytorch"), (f"{name}-worker-0", "pytorch")]
    outcome = ended(done, cluster, real_namespace, pods)
    assert outcome == "Succeeded", outcome
    assert done["status"]["replicaStatuses"]["Master"].get("succeeded") == 1, done["status"]
    for pod, rank in ((f"{name}-master-0", 0), (f"{name}-worker-0", 1)):
        log = cluster.kubectl("logs", "-n", real_namespace, pod, "-c", "pytorch")
        # torch.distributed met on the Master through the variables the job's pods get.
        assert "Using distributed PyTorch with gloo backend" in log, log
        assert f"World Size: 2. Rank: {rank}" in log, log
        losses = [(int(e), float(loss)) for e, loss in upstream.TORCH_LOSS.findall(log)]
        assert falling(losses), losses
    rows = table(cluster.kubectl("get", "pytorchjobs", "-n", real_namespace))
    assert [(r["NAME"], r["STATE"]) for r in rows] == [(name, "Succeeded")], rows


def test_upstreams_tfjob_trains_with_multi_worker_mirrored_strategy_to_succeeded(
    cluster: Cluster, real_namespace: str, framework_images: dict[str, str], strategy_volume: Path
) -> None:
    job = upstream.upstream_example(upstream.TENSORFLOW_EXAMPLE, framework_images["tensorflow-example"])
    name = job["metadata"]["name"]  # multi-worker
    cluster.apply(job, real_namespace)
    done = eventually(lambda: finished(cluster, "tfjob", real_namespace, name), timeout=600, what="the TFJob to finish")
    pods = [(f"{name}-worker-{i}", "tensorflow") for i in range(2)]
    outcome = ended(done, cluster, real_namespace, pods)
    assert outcome == "Succeeded", outcome
    # Worker 0 ends the job (upstream's success policy without a chief); cleanPodPolicy None leaves
    # worker 1 to finish its last step and save its copy.
    assert done["status"]["replicaStatuses"]["Worker"].get("succeeded", 0) >= 1, done["status"]
    workers = [f"{name}-worker-{i}" for i in range(2)]

    def both_done() -> bool:
        phases = [cluster.get("pod", pod, real_namespace)["status"].get("phase") for pod in workers]
        return phases == ["Succeeded", "Succeeded"]

    assert eventually(both_done, timeout=120, what="both workers to finish")
    per_worker = []
    for index in range(2):
        log = cluster.kubectl("logs", "-n", real_namespace, f"{name}-worker-{index}", "-c", "tensorflow")
        assert f"Workers in sync: 2; this is worker {index}" in log, log
        losses = [(int(e), float(loss)) for e, loss in upstream.KERAS_LOSS.findall(log)]
        assert falling(losses), losses
        per_worker.append(losses)
    assert per_worker[0] == per_worker[1]  # one model: the gradients were all-reduced
    # Worker 0 saved the model on the claim, the other in a directory of its own (upstream's layout).
    assert (strategy_volume / "saved_model" / "model.keras").is_file()
    assert (strategy_volume / "saved_model" / "worker_tmp_1" / "model.keras").is_file()
    # cleanPodPolicy None: the pods stay after the job ends.
    left = cluster.kubectl("get", "pods", "-n", real_namespace, "-l", f"{KUBEFLOW_JOB_NAME_LABEL}={name}", "-o", "name")
    assert len(left.split()) == 2, left


XGBOOST_LOSS = re.compile(r"\[(\d+)\]\ttrain-mlogloss:([0-9.]+)")  # each round's metric, on the master


def parameter_server_example(file: str, image: str) -> dict[str, Any]:
    """examples/tensorflow's parameter-server run (a TFJob or a Trainer), with the node's image."""
    body: dict[str, Any] = yaml.safe_load((REPO / "examples" / "tensorflow" / file).read_text())
    if body["kind"] == "Trainer":
        body["spec"]["image"] = image
    for spec in body["spec"].get("tfReplicaSpecs", {}).values():
        for container in spec["template"]["spec"]["containers"]:
            container["image"] = image
    return body


def chief_trained(cluster: Cluster, namespace: str, chief: str) -> list[tuple[int, float]]:
    """The chief's epochs and losses, after it says it coordinated one parameter server and two workers."""
    log = cluster.kubectl("logs", "-n", namespace, chief, "-c", "tensorflow")
    assert "parameter servers: 1, workers: 2" in log, log
    assert "training done" in log, log
    return [(int(e), float(loss)) for e, loss in upstream.KERAS_LOSS.findall(log)]


def test_a_tfjob_of_a_chief_a_parameter_server_and_two_workers_trains_to_succeeded(
    cluster: Cluster, real_namespace: str, framework_images: dict[str, str]
) -> None:
    """Issue 53: parameter-server training (ParameterServerStrategy: the variables on the parameter
    server, the steps on the workers, the chief coordinating) as a TFJob with the three roles; the
    chief's success ends the job and cleanPodPolicy Running stops the servers."""
    job = parameter_server_example("parameter_server_tfjob.yaml", framework_images["tensorflow-example"])
    name = job["metadata"]["name"]
    cluster.apply(job, real_namespace)
    done = eventually(lambda: finished(cluster, "tfjob", real_namespace, name), timeout=600, what="the TFJob to finish")
    roles = [(f"{name}-chief-0", "tensorflow"), (f"{name}-ps-0", "tensorflow"), (f"{name}-worker-0", "tensorflow")]
    outcome = ended(done, cluster, real_namespace, roles)
    assert outcome == "Succeeded", outcome
    assert done["status"]["replicaStatuses"]["Chief"].get("succeeded") == 1, done["status"]
    losses = chief_trained(cluster, real_namespace, f"{name}-chief-0")
    assert len(losses) == 5, losses
    assert falling(losses), losses
    for server in (f"{name}-ps-0", f"{name}-worker-0", f"{name}-worker-1"):
        log = cluster.kubectl("logs", "-n", real_namespace, server, "-c", "tensorflow")
        assert f"serving as {server.split('-')[-2]} {server.split('-')[-1]}" in log, log

    def servers_stopped() -> bool:
        left = cluster.names("pods", real_namespace)
        return not {f"{name}-ps-0", f"{name}-worker-0", f"{name}-worker-1"} & left

    assert eventually(servers_stopped, timeout=120, what="cleanPodPolicy Running to stop the servers")


def test_the_same_parameter_server_run_as_a_trainer_trains_to_succeeded(
    cluster: Cluster, real_namespace: str, framework_images: dict[str, str]
) -> None:
    trainer = parameter_server_example("parameter_server_trainer.yaml", framework_images["tensorflow-example"])
    name = trainer["metadata"]["name"]
    cluster.apply(trainer, real_namespace)

    def over() -> str | None:
        phase = cluster.get("trainer", name, real_namespace).get("status", {}).get("phase")
        return phase if phase in ("Succeeded", "Failed") else None

    assert eventually(over, timeout=600, what="the Trainer to finish") == "Succeeded"
    losses = chief_trained(cluster, real_namespace, f"{name}-chief-0")
    assert falling(losses), losses


def test_upstreams_xgboostjob_trains_with_xgboosts_collective_to_succeeded(
    cluster: Cluster, real_namespace: str, framework_images: dict[str, str]
) -> None:
    """Issue 53: upstream's XGBoostJob (a Master and two Workers, its arguments unchanged, the quotes
    its Worker passes literally too) on examples/xgboost's image: the master runs xgboost's tracker
    on the port the job names, all three train together, and the master's success ends the job."""
    job = upstream.upstream_example(upstream.XGBOOST_EXAMPLE, framework_images["xgboost-example"])
    name = job["metadata"]["name"]  # xgboost-dist-iris-test-train
    cluster.apply(job, real_namespace)
    done = eventually(
        lambda: finished(cluster, "xgboostjob", real_namespace, name), timeout=600, what="the XGBoostJob to finish"
    )
    pods = [(f"{name}-master-0", "xgboost"), *((f"{name}-worker-{i}", "xgboost") for i in range(2))]
    outcome = ended(done, cluster, real_namespace, pods)
    assert outcome == "Succeeded", outcome
    assert done["status"]["replicaStatuses"]["Master"].get("succeeded") == 1, done["status"]
    for rank, (pod, _) in enumerate(pods):
        log = cluster.kubectl("logs", "-n", real_namespace, pod, "-c", "xgboost")
        assert f"world size 3, rank {rank}, tracker {name}-master-0.{name}:9991" in log, log
        assert "training done" in log, log
    master = cluster.kubectl("logs", "-n", real_namespace, f"{name}-master-0", "-c", "xgboost")
    losses = [(int(r), float(loss)) for r, loss in XGBOOST_LOSS.findall(master)]
    assert [r for r, _ in losses] == list(range(10)), master  # --n_estimators=10 rounds
    assert falling(losses), losses
    assert "model saved to /tmp/xgboost-model.json (10 rounds)" in master, master


JAX_EPOCH = re.compile(r"\[process (\d)\] epoch (\d+)/\d+ step \d+ loss ([0-9.]+)")


def test_upstreams_jaxjob_trains_with_jax_distributed_to_succeeded(
    cluster: Cluster, real_namespace: str, jax_image: str
) -> None:
    """Issue 53: upstream's JAXJob example (v1.9's examples/jax/cpu-demo/demo.yaml: two Workers
    running `python3 train.py`), with only its image changed (and its namespace, which it names):
    examples/jax's train.py meets over jax.distributed on worker 0 with the variables the job's
    pods get, all-reduces over gloo, and both processes end with the same loss."""
    job = upstream.upstream_example(upstream.JAX_EXAMPLE, jax_image, upstream.JAX_VERSION)
    job["metadata"].pop("namespace")  # kubeflow: applied in the test's own
    name = job["metadata"]["name"]  # jaxjob-simple
    cluster.apply(job, real_namespace)
    done = eventually(
        lambda: finished(cluster, "jaxjob", real_namespace, name), timeout=600, what="the JAXJob to finish"
    )
    pods = [(f"{name}-worker-{i}", "jax") for i in range(2)]
    outcome = ended(done, cluster, real_namespace, pods)
    assert outcome == "Succeeded", outcome
    per_process = []
    for index, (pod, container) in enumerate(pods):
        log = cluster.kubectl("logs", "-n", real_namespace, pod, "-c", container)
        assert f"[process {index}] joining 2 processes at {name}-worker-0.{name}:" in log, log
        epochs = [(int(e), float(loss)) for p, e, loss in JAX_EPOCH.findall(log) if int(p) == index]
        assert falling(epochs), log
        per_process.append(epochs)
    assert per_process[0] == per_process[1]  # one model: the gradients were all-reduced


ELASTIC_EPOCH = re.compile(r"epoch (\d+) world size (\d+) rank 0 loss ([0-9.]+)")


def test_an_elastic_pytorchjob_trains_with_torchruns_c10d_rendezvous_to_succeeded(
    cluster: Cluster, real_namespace: str, framework_images: dict[str, str]
) -> None:
    """Issue 53: elasticPolicy for real. examples/pytorch/elastic_pytorchjob.yaml (1 to 3 Workers,
    2 of them) trains under torchrun's c10d rendezvous, which worker 0 hosts (its endpoint is
    localhost there: its own name may not resolve to it yet when it starts), at world size 2, to
    Succeeded. (Scaling it while it trains restarts its workers today: not yet tested here.)"""
    job: dict[str, Any] = yaml.safe_load((REPO / "examples" / "pytorch" / "elastic_pytorchjob.yaml").read_text())
    container = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    container["image"] = framework_images["pytorch-example"]
    container["env"] = [{"name": "EPOCHS", "value": "6"}, {"name": "EPOCH_SECONDS", "value": "1"}]
    cluster.apply(job, real_namespace)

    def log() -> str:
        try:
            return cluster.kubectl("logs", "-n", real_namespace, "elastic-worker-0", "-c", "pytorch")
        except (ClusterError, KubectlError) as err:
            return str(err)  # not started yet

    def epochs() -> list[tuple[int, int]]:
        return [(int(e), int(w)) for e, w, _ in ELASTIC_EPOCH.findall(log())]

    try:
        # The first group may be worker 0 alone (min 1) until worker 1 joins; then both train.
        eventually(lambda: any(w == 2 for _, w in epochs()), timeout=600, what="two workers training")
        done = eventually(
            lambda: finished(cluster, "pytorchjob", real_namespace, "elastic"), timeout=600, what="the job to finish"
        )
    except AssertionError as err:
        listed = cluster.kubectl("get", "pods", "-n", real_namespace, "-o", "wide")
        raise AssertionError(f"{err}\n{listed}\n--- elastic-worker-0:\n{log()[-4000:]}") from err
    workers = [(f"elastic-worker-{i}", "pytorch") for i in range(2)]
    assert ended(done, cluster, real_namespace, workers) == "Succeeded"
    assert epochs()[-1] == (6, 2), epochs()
