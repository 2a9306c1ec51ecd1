"""Upstream's own SDK end-to-end tests against the kubeflow controller on the real node: the
Training Operator's Python SDK (kubeflow-training, at the version bench/kubeflow.py builds the
operator at) and its sdk/python/test/e2e/test_e2e_pytorchjob.py from the same Go module, run as
upstream's CI runs them (`pytest --namespace`, no gang scheduler), with only image names changed:
examples/pytorch's image for upstream's kubeflow/pytorch-dist-mnist and for the SDK's PyTorch base
image (a constant of the SDK, set in the copied conftest.py).

The namespace is labelled Pod Security baseline, as its administrator would label it for a root
image: upstream's test from docker.io/hello-world (a root image that prints and exits 0) runs the
node's busybox image (root, whose shell exits 0 on no input) unchanged otherwise. Recorded in
docs/kubeflow.md ("Upstream's SDK tests"): the three plain PyTorchJob tests pass and the
gang-scheduling one skips itself."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench import kubeflow as upstream
from testbed import cluster as cluster_tool
from testbed import containerd, images, node
from tests.harness import Cluster
from trainerop_common.pod_security import BASELINE, ENFORCE_LABEL

SDK = f"kubeflow-training=={upstream.VERSION.lstrip('v')}"
PINS = (SDK, "kubernetes==30.1.0", "pytest==9.2.0")  # the SDK asks for kubernetes>=27.2.0
UPSTREAM_IMAGE = "kubeflow/pytorch-dist-mnist:latest"
UPSTREAM_ROOT_IMAGE = '"docker.io/hello-world"'


def sdk_python() -> Path:
    """A virtualenv with upstream's SDK and pytest, made once into the cache."""
    target = cluster_tool.CACHE_ROOT / f"kubeflow-training-sdk-{'-'.join(p.split('==')[1] for p in PINS)}"

    def build() -> None:
        partial = target.with_name(target.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(partial)], check=True)
        pip = [str(partial / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", *PINS]
        subprocess.run(pip, check=True)
        partial.rename(target)

    return cluster_tool.built_once(target, build) / "bin" / "python"


def upstream_tests(into: Path, image: str) -> Path:
    """Upstream's sdk/python/test, its images ours: the example's and hello-world's in the test,
    the SDK's PyTorch base image in conftest.py (the SDK reads it when a job is made from a
    function)."""
    shutil.copytree(upstream.module_dir() / "sdk" / "python" / "test", into / "test")
    for copied in (into / "test").rglob("*"):
        copied.chmod(0o644 if copied.is_file() else 0o755)  # the module cache is read-only
    pytorch = into / "test" / "e2e" / "test_e2e_pytorchjob.py"
    source = pytorch.read_text()
    for upstreams in (UPSTREAM_IMAGE, UPSTREAM_ROOT_IMAGE):
        assert upstreams in source, f"{upstreams} is no longer upstream's image"
    pytorch.write_text(source.replace(UPSTREAM_IMAGE, image).replace(UPSTREAM_ROOT_IMAGE, repr(node.BUSYBOX_IMAGE)))
    with (into / "test" / "conftest.py").open("a") as conftest:
        conftest.write(
            "\n\n# Trainer Operator's e2e tier: this machine's image for the SDK's PyTorch base image.\n"
            "from kubeflow.training.constants import constants\n\n"
            f"constants.JOB_PARAMETERS[constants.PYTORCHJOB_KIND]['base_image'] = {image!r}\n"
        )
    return into


@pytest.fixture(scope="module")
def pytorch_image(real_node: str, operator_in_cluster: None) -> str:
    images.load("pytorch-example", containerd.node_dir())
    return images.IMAGES["pytorch-example"].ref


def test_upstreams_pytorchjob_sdk_tests_pass(
    cluster: Cluster, real_namespace: str, pytorch_image: str, tmp_path: Path
) -> None:
    python = sdk_python()
    root = upstream_tests(tmp_path, pytorch_image)
    cluster.kubectl("label", "namespace", real_namespace, f"{ENFORCE_LABEL}={BASELINE}")
    argv = [str(python), "-m", "pytest", "-p", "no:cacheprovider", "-rA", f"--namespace={real_namespace}"]
    argv += ["test/e2e/test_e2e_pytorchjob.py"]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "KUBECONFIG": str(cluster.kubeconfig)}
    done = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True, timeout=1800)
    print(done.stdout[-6000:] + done.stderr[-3000:], flush=True)
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr
    assert done.returncode == 0, summary
    # Upstream's three plain PyTorchJob tests pass (the root image's in the baseline namespace);
    # its gang-scheduling test skips itself (no GANG_SCHEDULER_NAME, as upstream's CI runs without one).
    counts = dict((word, int(n)) for n, word in re.findall(r"(\d+) (passed|skipped|deselected|failed)", summary))
    assert counts == {"passed": 3, "skipped": 1}, summary
    for name in ("test_sdk_e2e", "test_sdk_e2e_create_from_func", "test_sdk_e2e_create_from_image"):
        assert f"PASSED test/e2e/test_e2e_pytorchjob.py::{name}" in done.stdout, done.stdout[-3000:]
