"""The Kubeflow Training Operator v1 (PyTorchJob) side by side, on the same cluster and load.

Built once from its Go module (github.com/kubeflow/training-operator, the module proxy serves
v1.8.1) into ~/.cache/trainer-operator/kubeflow-training-operator-v1.8.1 and run as a local
process with the admin kubeconfig (as the bench runs our controllers locally), PyTorchJob only.
Its validating webhook serves a certificate it makes for its in-cluster Service name
(training-operator.kubeflow.svc), which the API server cannot reach from here: the webhook is
registered by URL with failurePolicy Ignore, so PyTorchJobs are admitted without its validation
(which can only make it faster). N PyTorchJobs of 1 master + W-1 workers (W pods, as our Trainers
of W workers) are created at once; timed until every pod exists, runs, and every job is Running.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from lightkube import Client
from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.core_v1 import Pod

from bench.measure import Obj, Stalled, Timeline, api_requests, conflicts, create_all, writes
from bench.throughput import running
from testbed import cluster as cluster_tool
from tests.harness import Cluster, eventually

VERSION = "v1.8.1"
MODULE = "github.com/kubeflow/training-operator"
PYTORCHJOB = create_namespaced_resource("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs")
PORTS = (
    cluster_tool.PORT_BASE + 32,
    cluster_tool.PORT_BASE + 33,
    cluster_tool.PORT_BASE + 34,
)  # metrics, probes, webhook
WEBHOOK = "validator.training-operator.kubeflow.org"


def cache() -> Path:
    return Path.home() / ".cache" / "trainer-operator" / f"kubeflow-training-operator-{VERSION}"


def module_dir(version: str = VERSION) -> Path:
    root = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True, check=True).stdout.strip()
    return Path(root) / f"{MODULE}@{version}"


def upstream_file(relative: str, version: str = VERSION) -> Path:
    """A file of the upstream module's source at ``version`` (its examples, say), downloaded once
    from the Go module proxy."""
    hint = f"the upstream examples come from the Go module {MODULE}@{version}: install Go and reach its proxy"
    try:
        path = module_dir(version) / relative
        if not path.exists():
            subprocess.run(["go", "mod", "download", f"{MODULE}@{version}"], check=True)
    except (OSError, subprocess.CalledProcessError) as err:
        raise cluster_tool.ClusterError(f"{err}; {hint}") from err
    if not path.exists():
        raise cluster_tool.ClusterError(f"{relative} is not in {MODULE}@{version} ({path})")
    return path


# Upstream's own examples (paths in its module at VERSION), run on the real node by
# tests/e2e/test_kubeflow_frameworks.py and the main job with this repository's example images.
PYTORCH_EXAMPLE = "examples/pytorch/mnist/v1/pytorch_job_mnist_gloo.yaml"  # Master + Worker, DDP over gloo
TENSORFLOW_EXAMPLE = "examples/tensorflow/distribution_strategy/keras-API/multi_worker_tfjob.yaml"  # 2 Workers
XGBOOST_EXAMPLE = "examples/xgboost/xgboostjob.yaml"  # Master + 2 Workers, xgboost's collective tracker
# JAXJob came in v1.9 (the version of the served CRDs' schema): its example is read from that module.
JAX_VERSION = "v1.9.3"
JAX_EXAMPLE = "examples/jax/cpu-demo/demo.yaml"  # 2 Workers, `python3 train.py`, jax.distributed over gloo
# The loss lines those images print: examples/pytorch/mnist.py's per batch, examples/tensorflow's per epoch.
TORCH_LOSS = re.compile(r"Train Epoch: (\d+) \[\d+/\d+\]\tloss=([0-9.]+)")
KERAS_LOSS = re.compile(r"Epoch (\d+): loss=([0-9.]+)")


def upstream_example(relative: str, image: str, version: str = VERSION) -> Obj:
    """Upstream's example job with every container's image replaced by ``image`` and its
    ``nvidia.com/gpu`` limit dropped (its PyTorch example says to on CPU; no GPU here)."""
    job: Obj = yaml.safe_load(upstream_file(relative, version).read_text())
    specs = next(v for k, v in job["spec"].items() if k.endswith("ReplicaSpecs"))
    for spec in specs.values():
        for container in spec["template"]["spec"]["containers"]:
            container["image"] = image
            limits = container.get("resources", {}).get("limits", {})
            limits.pop("nvidia.com/gpu", None)
            if not limits:
                container.pop("resources", None)
    return job


def binary() -> Path:
    """The training-operator binary, built once (a few minutes on 2 cores)."""
    exe = cache() / "training-operator.v1"
    if not exe.exists():
        print(
            f"building the Kubeflow Training Operator {VERSION} from its Go module (once) ...",
            file=sys.stderr,
            flush=True,
        )
        t0 = time.monotonic()
        subprocess.run(
            ["go", "install", f"{MODULE}/cmd/training-operator.v1@{VERSION}"],
            env={**os.environ, "GOBIN": str(cache()), "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"},
            check=True,
        )
        subprocess.run(["go", "mod", "download", f"{MODULE}@{VERSION}"], check=True)
        print(f"built in {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    return exe


def webhook_configuration() -> Obj:
    """Its PyTorchJob webhook, reachable by URL, ignored when it fails (see the module's doc)."""
    manifests = list(yaml.safe_load_all((module_dir() / "manifests/base/webhook/manifests.yaml").read_text()))
    (hook,) = [copy.deepcopy(h) for h in manifests[0]["webhooks"] if "pytorchjob" in h["name"]]
    path = hook["clientConfig"]["service"]["path"]
    hook["clientConfig"] = {"url": f"https://127.0.0.1:{PORTS[2]}{path}"}
    hook["failurePolicy"] = "Ignore"
    hook["timeoutSeconds"] = 2
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": WEBHOOK},
        "webhooks": [hook],
    }


@contextmanager
def training_operator(c: Cluster) -> Iterator[int]:
    """The Kubeflow Training Operator running (PyTorchJob), its CRD installed; yields its pid."""
    exe = binary()
    crd = module_dir() / "manifests/base/crds/kubeflow.org_pytorchjobs.yaml"
    c.kubectl("apply", "--server-side", "-f", str(crd))
    established = '{.status.conditions[?(@.type=="Established")].status}'
    eventually(
        lambda: c.kubectl("get", "crd", "pytorchjobs.kubeflow.org", "-o", f"jsonpath={established}") == "True",
        what="the PyTorchJob CRD to be established",
    )
    c.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kubeflow"}})
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "training-operator-webhook-cert"}}
    c.apply(secret, "kubeflow")
    c.apply(webhook_configuration())
    log = cache() / "training-operator.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [
                str(exe),
                "--enable-scheme=pytorchjob",
                f"--metrics-bind-address=127.0.0.1:{PORTS[0]}",
                f"--health-probe-bind-address=127.0.0.1:{PORTS[1]}",
                f"--webhook-server-port={PORTS[2]}",
                "--zap-log-level=info",
            ],
            env={**os.environ, "KUBECONFIG": str(c.kubeconfig), "MY_POD_NAMESPACE": "kubeflow"},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        mount_certificate(c)
        deadline = time.monotonic() + 120
        while "Certs ready" not in log.read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the training operator did not start; see {log}")
            time.sleep(0.2)
        yield proc.pid
    finally:
        proc.terminate()
        proc.wait(30)
        c.kubectl("delete", "validatingwebhookconfiguration", WEBHOOK, "--ignore-not-found")


def mount_certificate(c: Cluster) -> None:
    """What the kubelet does for its pod: its cert-controller writes the webhook's certificate to
    its Secret and waits for the Secret's files in its certificate directory (a volume in-cluster)."""
    certs = Path("/tmp/k8s-webhook-server/serving-certs")
    certs.mkdir(parents=True, exist_ok=True)

    def issued() -> dict[str, str] | None:
        data = json.loads(c.kubectl("get", "secret", "training-operator-webhook-cert", "-n", "kubeflow", "-o", "json"))
        found: dict[str, str] = data.get("data") or {}
        return found if found.get("tls.crt") else None

    for key, value in eventually(issued, what="the training operator's webhook certificate").items():
        (certs / key).write_bytes(base64.b64decode(value))


def pytorchjob(name: str, pods: int, namespace: str) -> Obj:
    def replica(count: int) -> dict[str, Any]:
        container = {"name": "pytorch", "image": "bench:latest", "command": ["python", "train.py"]}
        return {"replicas": count, "restartPolicy": "OnFailure", "template": {"spec": {"containers": [container]}}}

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(pods - 1)}},
    }


def job_running(obj: Obj) -> bool:
    return any(
        c.get("type") == "Running" and c.get("status") == "True" for c in obj.get("status", {}).get("conditions") or ()
    )


def reach(waits: dict[str, Callable[[], float]]) -> tuple[dict[str, float | None], str | None]:
    """Each milestone's time, waited for in order, and the stall that ended the waiting: Kubeflow's
    operator has left a few of 1000 jobs short of Running for good; that milestone and the ones
    after it are None (the run's other figures are kept, not lost with the phase)."""
    reached: dict[str, float | None] = dict.fromkeys(waits)
    for name, wait in waits.items():
        try:
            reached[name] = wait()
        except Stalled as stall:
            return reached, str(stall.code)
    return reached, None


def run(
    c: Cluster,
    client: Client,
    namespace: str,
    count: int,
    pods_per_job: int,
    memory: Callable[[], Any],
    who: str = "kubeflow",
) -> dict[str, Any]:
    """``count`` PyTorchJobs of ``pods_per_job`` pods created at once, timed to every pod created,
    running, and every job Running, by whichever operator serves them (``who``: Kubeflow's, or
    ours through the kubeflow controller); ``memory`` reads the operator's RSS at the end."""
    pods = Timeline(client, Pod, namespace, running)
    jobs = Timeline(client, PYTORCHJOB, namespace, job_running)
    before = api_requests(c)
    jobs_to_create = [PYTORCHJOB.from_dict(pytorchjob(f"j{i:04d}", pods_per_job, namespace)) for i in range(count)]
    t0 = create_all(client, jobs_to_create)
    creates_done = time.monotonic()  # every create answered (through Kubeflow's webhook)
    reached, stalled = reach(
        {
            "all_pods_created_seconds": lambda: pods.wait(count * pods_per_job, f"{who}: pods created", ready=False),
            "all_pods_running_seconds": lambda: pods.wait(count * pods_per_job, f"{who}: pods running"),
            "all_jobs_running_seconds": lambda: jobs.wait(count, f"{who}: PyTorchJobs Running"),
        }
    )
    time.sleep(2)  # trailing status writes land before the snapshot (a measurement aid)
    after = api_requests(c)
    by_resource = writes(before, after)
    by_resource["pytorchjobs POST"] -= count
    for t in (pods, jobs):
        t.stop()
    return {
        "jobs": count,
        "pods_per_job": pods_per_job,
        "all_jobs_created_seconds": round(creates_done - t0, 2),
        **{name: None if at is None else round(at - t0, 2) for name, at in reached.items()},
        "stalled": stalled,
        "memory_mib": memory(),
        "writes_to_running_per_job": round(sum(by_resource.values()) / count, 1),
        "writes_by_resource": {k: round(v / count, 2) for k, v in sorted(by_resource.items()) if v},
        "conflicts_409": conflicts(before, after),
    }
