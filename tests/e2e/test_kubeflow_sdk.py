"""Upstream's own SDK end-to-end tests against the kubeflow controller on the real node: the
Training Operator's Python SDK (kubeflow-training, at the version bench/kubeflow.py builds the
operator at) and its sdk/python/test/e2e/test_e2e_pytorchjob.py from the same Go module, run as
upstream's CI runs them (`pytest --namespace`, no gang scheduler), with only image names changed:
examples/pytorch's image for upstream's kubeflow/pytorch-dist-mnist and for the SDK's PyTorch base
image (a constant of the SDK, set in the copied conftest.py).

Recorded in docs/kubeflow.md ("Upstream's SDK tests"): the two plain PyTorchJob tests pass, the
gang-scheduling one skips itself, and the one from docker.io/hello-world is left out (a root image)."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench import kubeflow as upstream
from testbed import cluster as cluster_tool
from testbed import containerd, images
from tests.harness import Cluster

SDK = f"kubeflow-training=={upstream.VERSION.lstrip('v')}"
PINS = (SDK, "kubernetes==30.1.0", "pytest==9.2.0")  # the SDK asks for kubernetes>=27.2.0
UPSTREAM_IMAGE = "kubeflow/pytorch-dist-mnist:latest"
# The one test left out here: its image, docker.io/hello-world, runs as root, which the training
# pods' Pod Security "restricted" refuses (docs/kubeflow.md says so).
LEFT_OUT = "test/e2e/test_e2e_pytorchjob.py::test_sdk_e2e_create_from_image"


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
    """Upstream's sdk/python/test, its images ours: the example's in the test, the SDK's PyTorch
    base image in conftest.py (the SDK reads it when a job is made from a function)."""
    shutil.copytree(upstream.module_dir() / "sdk" / "python" / "test", into / "test")
    for copied in (into / "test").rglob("*"):
        copied.chmod(0o644 if copied.is_file() else 0o755)  # the module cache is read-only
    pytorch = into / "test" / "e2e" / "test_e2e_pytorchjob.py"
    source = pytorch.read_text()
    assert UPSTREAM_IMAGE in source, f"{UPSTREAM_IMAGE} is no longer upstream's image"
    pytorch.write_text(source.replace(UPSTREAM_IMAGE, image))
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
    argv = [str(python), "-m", "pytest", "-p", "no:cacheprovider", "-rA", f"--namespace={real_namespace}"]
    argv += ["test/e2e/test_e2e_pytorchjob.py", "--deselect", LEFT_OUT]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "KUBECONFIG": str(cluster.kubeconfig)}
    done = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True, timeout=1800)
    print(done.stdout[-6000:] + done.stderr[-3000:], flush=True)
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr
    assert done.returncode == 0, summary
    # Upstream's two plain PyTorchJob tests pass; its gang-scheduling test skips itself (no
    # GANG_SCHEDULER_NAME, as upstream's CI runs without one).
    counts = dict((word, int(n)) for n, word in re.findall(r"(\d+) (passed|skipped|deselected|failed)", summary))
    assert counts == {"passed": 2, "skipped": 1, "deselected": 1}, summary
    for name in ("test_sdk_e2e", "test_sdk_e2e_create_from_func"):
        assert f"PASSED test/e2e/test_e2e_pytorchjob.py::{name}" in done.stdout, done.stdout[-3000:]
