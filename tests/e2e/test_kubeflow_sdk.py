"""Upstream's own SDK end-to-end tests against the kubeflow controller on the real node: the
Training Operator's Python SDK (kubeflow-training, at the version bench/kubeflow.py builds the
operator at) and its sdk/python/test/e2e/test_e2e_pytorchjob.py, test_e2e_tfjob.py and
test_e2e_xgboostjob.py from the same Go module, run as upstream's CI runs them (`pytest
--namespace`, no gang scheduler), with only image names changed (:func:`swaps`): examples/pytorch's
image for upstream's kubeflow/pytorch-dist-mnist and for the SDK's PyTorch base image (a constant
of the SDK, set in the copied conftest.py), examples/tensorflow's for tf-mnist-with-summaries (its
program at the same path) and examples/xgboost's for kubeflow/xgboost-dist-iris (the same
arguments).

The namespace is labelled Pod Security baseline, as its administrator would label it for a root
image: upstream's test from docker.io/hello-world (a root image that prints and exits 0) runs the
node's busybox image (root, whose shell exits 0 on no input). Recorded in docs/kubeflow.md
("Upstream's SDK tests"): the three plain PyTorchJob tests and the plain TFJob and XGBoostJob tests
pass, and the gang-scheduling ones skip themselves."""

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
UPSTREAM_XGBOOST_IMAGE = '"docker.io/kubeflow/xgboost-dist-iris:latest"'
UPSTREAM_TENSORFLOW_IMAGE = '"gcr.io/kubeflow-ci/tf-mnist-with-summaries:1.0"'
FILES = ("test_e2e_pytorchjob.py", "test_e2e_tfjob.py", "test_e2e_xgboostjob.py")  # upstream's, run here
EXAMPLES = ("pytorch-example", "tensorflow-example", "xgboost-example")  # the images standing for theirs


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


def swaps(images_here: dict[str, str]) -> dict[str, dict[str, str]]:
    """Per upstream test file, each image it names and this machine's image standing for it."""
    pytorch, xgboost = images_here["pytorch-example"], images_here["xgboost-example"]
    return {
        "test_e2e_pytorchjob.py": {UPSTREAM_IMAGE: pytorch, UPSTREAM_ROOT_IMAGE: repr(node.BUSYBOX_IMAGE)},
        "test_e2e_tfjob.py": {UPSTREAM_TENSORFLOW_IMAGE: repr(images_here["tensorflow-example"])},
        "test_e2e_xgboostjob.py": {UPSTREAM_XGBOOST_IMAGE: repr(xgboost)},
    }


def upstream_tests(into: Path, images_here: dict[str, str]) -> Path:
    """Upstream's sdk/python/test, its images ours (:func:`swaps`), and the SDK's PyTorch base
    image in conftest.py (the SDK reads it when a job is made from a function)."""
    shutil.copytree(upstream.module_dir() / "sdk" / "python" / "test", into / "test")
    for copied in (into / "test").rglob("*"):
        copied.chmod(0o644 if copied.is_file() else 0o755)  # the module cache is read-only
    for file, replaced in swaps(images_here).items():
        path = into / "test" / "e2e" / file
        source = path.read_text()
        for upstreams, ours in replaced.items():
            assert upstreams in source, f"{upstreams} is no longer the image of upstream's {file}"
            source = source.replace(upstreams, ours)
        path.write_text(source)
    with (into / "test" / "conftest.py").open("a") as conftest:
        conftest.write(
            "\n\n# Trainer Operator's e2e tier: this machine's image for the SDK's PyTorch base image.\n"
            "from kubeflow.training.constants import constants\n\n"
            f"constants.JOB_PARAMETERS[constants.PYTORCHJOB_KIND]['base_image'] = {images_here['pytorch-example']!r}\n"
        )
    return into


@pytest.fixture(scope="module")
def images_here(real_node: str, operator_in_cluster: None) -> dict[str, str]:
    """examples/pytorch's, examples/tensorflow's and examples/xgboost's images on the node."""
    for name in EXAMPLES:
        images.load(name, containerd.node_dir())
    return {name: images.IMAGES[name].ref for name in EXAMPLES}


def test_upstreams_pytorchjob_sdk_tests_pass(
    cluster: Cluster, real_namespace: str, images_here: dict[str, str], tmp_path: Path
) -> None:
    python = sdk_python()
    root = upstream_tests(tmp_path, images_here)
    cluster.kubectl("label", "namespace", real_namespace, f"{ENFORCE_LABEL}={BASELINE}")
    argv = [str(python), "-m", "pytest", "-p", "no:cacheprovider", "-rA", f"--namespace={real_namespace}"]
    argv += [f"test/e2e/{file}" for file in FILES]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "KUBECONFIG": str(cluster.kubeconfig)}
    done = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True, timeout=1800)
    print(done.stdout[-6000:] + done.stderr[-3000:], flush=True)
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr
    assert done.returncode == 0, summary
    # Upstream's three plain PyTorchJob tests pass (the root image's in the baseline namespace), its
    # plain TFJob and XGBoostJob tests too; each file's gang-scheduling test skips itself (no
    # GANG_SCHEDULER_NAME, as upstream's CI runs without one).
    counts = dict((word, int(n)) for n, word in re.findall(r"(\d+) (passed|skipped|deselected|failed)", summary))
    assert counts == {"passed": 5, "skipped": 3}, summary
    for name in ("test_sdk_e2e", "test_sdk_e2e_create_from_func", "test_sdk_e2e_create_from_image"):
        assert f"PASSED test/e2e/test_e2e_pytorchjob.py::{name}" in done.stdout, done.stdout[-3000:]
    for file in ("test_e2e_tfjob.py", "test_e2e_xgboostjob.py"):
        assert f"PASSED test/e2e/{file}::test_sdk_e2e" in done.stdout, done.stdout[-3000:]
