"""The README's quickstart, command by command as written, on a bare cluster: the local cluster
with no fake nodes and the real node untainted (`testbed.node up --untainted`), nothing of the
test bed in it — no prepared namespace, no toleration, no S3 credentials, no operator. The
release's files are made as hack/release.py makes them, the operator's image named
docker.io/library/trainer-operator:<version> (the node pulls docker.io through the local
registry, as a cluster with internet access pulls from Docker Hub). Afterwards nothing of the
operator is left: no CRD, no cluster-wide object, no namespace of its own."""

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from hack import release
from testbed import cluster as cluster_tool
from testbed import containerd, images, node

README = Path(__file__).resolve().parents[2] / "README.md"
IMAGE = "docker.io/library/trainer-operator"  # where the node finds it (the registry mirrors docker.io)
CLUSTER_WIDE = (
    "customresourcedefinitions,clusterroles,clusterrolebindings,validatingwebhookconfigurations,"
    "mutatingwebhookconfigurations,validatingadmissionpolicies,validatingadmissionpolicybindings,namespaces"
)


def quickstart_commands(readme: str) -> list[str]:
    """The commands of the README's "Quickstart" section: every line of its sh blocks."""
    section = readme.split("\n## Quickstart\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.DOTALL)
    return [line for block in blocks for line in block.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def bare_cluster() -> Iterator[dict[str, str]]:
    """The local cluster, bare; the environment a user's shell has (KUBECONFIG, kubectl on PATH)."""
    if os.geteuid() != 0 and not os.environ.get("CI"):
        pytest.skip("the real node runs a kubelet and containerd: run the quickstart test as root (CI does)")
    cluster_tool.FAKE_NODES = 0
    if cluster_tool.main(["up"]) != 0 or node.main(["up", "--untainted"]) != 0:
        pytest.fail("the bare cluster did not come up; see the messages above")
    yield {
        **os.environ,
        "KUBECONFIG": str(cluster_tool.RUN_DIR / "admin.kubeconfig"),
        "PATH": f"{cluster_tool.bin_dir()}:{os.environ['PATH']}",
    }
    node.main(["down"])
    cluster_tool.main(["down"])


def release_files(folder: Path, version: str) -> None:
    """The two files the quickstart names, as hack/release.py writes them, and the operator's
    image on the node under the release's name."""
    built = images.build("controllers")
    images.buildah("tag", built, f"{IMAGE}:{version}")
    images.push(containerd.node_dir(), f"{IMAGE}:{version}")
    (folder / release.manifest_name("dev", version)).write_text(release.render("dev", f"{IMAGE}:{version}"))
    shutil.copyfile(release.QUICKSTART_TRAINER, folder / "quickstart-trainer.yaml")


def cluster_wide(env: dict[str, str]) -> set[str]:
    """Every cluster-wide object and namespace there is, by kind and name."""
    listed = subprocess.run(["kubectl", "get", CLUSTER_WIDE, "-o", "name"], env=env, capture_output=True, text=True)
    return set(listed.stdout.split())


def test_the_readme_quickstart_installs_runs_a_trainer_and_uninstalls(
    bare_cluster: dict[str, str], tmp_path: Path
) -> None:
    env = bare_cluster
    version = release.versions()["trainerop-trainer"]
    commands = quickstart_commands(README.read_text())
    assert any(release.manifest_name("dev", version) in c for c in commands), f"the README installs {version}"
    release_files(tmp_path, version)
    before = cluster_wide(env)
    outputs = []
    for command in commands:
        print(f"$ {command}", flush=True)
        done = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True)
        print(done.stdout + done.stderr, flush=True)
        assert done.returncode == 0, f"`{command}` failed: {done.stderr.strip()}"
        outputs.append(done.stdout)
    shown = outputs[commands.index("kubectl get trainers -n quickstart")]
    assert re.search(r"^hello\s.*\bSucceeded\b", shown, re.MULTILINE), shown
    assert cluster_wide(env) == before  # nothing of the operator left
