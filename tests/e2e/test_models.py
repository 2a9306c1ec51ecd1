"""A model from the Hub on the real node (docs/models.md): the JAX example names spec.model, each
pod's initializer (the operator's image, the real huggingface_hub client) fetches it from a server
of the Hub's API on this machine (testbed/hfhub.py, reached by the pods as the Hub would be) into a
claim once, checks every file, and the training processes start from those weights, read-only; a
second run of the same revision downloads nothing; a tampered file is refused by name."""

import hashlib
import io
import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from testbed import node
from testbed.hfhub import HubServer
from tests.e2e.test_training import example, finished, last_lines, logs
from tests.e2e.volumes import node_volume
from tests.harness import Cluster, condition, eventually

REPO = "acme/spirals"
SHAPES = {"w1": (2, 64), "b1": (64,), "w2": (64, 64), "b2": (64,), "w3": (64, 4), "b3": (4,)}  # examples/jax


def weights() -> bytes:
    """Initial weights of the example's shapes, as a pre-trained model would have them."""
    rng = np.random.default_rng(7)
    buffer = io.BytesIO()
    arrays: dict[str, Any] = {name: rng.normal(0, 0.1, shape).astype(np.float32) for name, shape in SHAPES.items()}
    np.savez(buffer, **arrays)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def hub(real_node: str) -> Iterator[HubServer]:
    """The Hub's API on the machine's address, which the real node's pods reach."""
    address = node.host_ip()
    with HubServer(address, address) as server:
        yield server


@pytest.fixture
def cache_claim(cluster: Cluster, real_namespace: str) -> Iterator[str]:
    with node_volume(cluster, real_namespace, "models"):
        yield "models"


def run_with_model(name: str, hub: HubServer, revision: str, **run_policy: Any) -> dict[str, Any]:
    manifest = example(name)
    spec = manifest["spec"]
    spec.pop("checkpoint")
    spec["epochs"] = 2
    spec["topology"] = {"workers": 2}
    spec["env"] = [{"name": "MIN_EPOCH_SECONDS", "value": "0"}]
    spec["runPolicy"] |= run_policy
    spec["model"] = {"source": f"hf://{REPO}@{revision}", "cacheClaim": "models", "endpoint": hub.url}
    return manifest


def model_verified(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    return condition(cluster.get("trainer", name, namespace), "ModelVerified")


def test_runs_start_from_the_hubs_weights_fetched_once_and_checked(
    cluster: Cluster, real_namespace: str, jax_image: str, hub: HubServer, cache_claim: str
) -> None:
    content = weights()
    commit = hub.add(REPO, {"params.npz": content, "config.json": b'{"hidden": 64}\n'})
    cluster.apply(run_with_model("from-hub", hub, "main"), real_namespace)
    done = eventually(lambda: finished(cluster, real_namespace, "from-hub"), timeout=300, what="the run to finish")
    assert done["status"]["phase"] == "Succeeded", json.dumps(done["status"]) + last_lines(
        cluster, real_namespace, "from-hub", workers=2
    )
    verified = model_verified(cluster, real_namespace, "from-hub")
    assert (verified["status"], verified["reason"]) == ("True", "Verified")
    assert f"at commit {commit}: 2 files" in verified["message"]
    digest = hashlib.sha256(content).hexdigest()[:16]
    for index in range(2):  # every process trained from the checked weights, through a read-only mount
        log = logs(cluster, real_namespace, f"from-hub-worker-{index}")
        assert f"initial weights from /models/hf/acme/spirals/main/params.npz (sha256 {digest})" in log
    assert hub.downloads() == 2  # each file once, for both ranks

    # A second run of the same revision finds it in the claim: no file is downloaded again.
    cluster.apply(run_with_model("again", hub, commit), real_namespace)
    done = eventually(lambda: finished(cluster, real_namespace, "again"), timeout=300, what="the second run")
    assert done["status"]["phase"] == "Succeeded", json.dumps(done["status"])
    assert model_verified(cluster, real_namespace, "again")["message"].endswith("2 files found checked in the cache")
    assert hub.downloads() == 2


def test_a_tampered_file_is_refused_by_name_and_the_run_does_not_train(
    cluster: Cluster, real_namespace: str, jax_image: str, hub: HubServer, cache_claim: str
) -> None:
    hub.add(REPO, {"params.npz": weights(), "config.json": b"{}\n"}, branch="tampered")
    hub.tamper(REPO, "params.npz", b"not the weights the listing hashes")
    cluster.apply(run_with_model("tampered", hub, "tampered", backoffLimit=0), real_namespace)
    done = eventually(lambda: finished(cluster, real_namespace, "tampered"), timeout=300, what="the run to fail")
    assert done["status"]["phase"] == "Failed"
    refused = model_verified(cluster, real_namespace, "tampered")
    assert (refused["status"], refused["reason"]) == ("False", "HashMismatch")
    assert "refused: params.npz: " in refused["message"]
    assert "model initializer failed: HashMismatch: refused: params.npz" in condition(done, "Failed")["message"]
    events = json.loads(
        cluster.kubectl(
            "get", "events", "-n", real_namespace, "--field-selector", "involvedObject.name=tampered", "-o", "json"
        )
    )["items"]
    warnings = [e["message"] for e in events if e["reason"] == "HashMismatch" and e["type"] == "Warning"]
    assert warnings, events
    assert "params.npz" in warnings[0]
