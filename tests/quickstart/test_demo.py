"""hack/demo.sh on a cluster it did not make (the bare cluster, $KUBECONFIG naming it): the main job
runs there with nothing of the test bed assumed — the operator from the release's image, the seed
Trainer sized for the cluster's node to Succeeded, the cluster's lack of shared storage said —
and its --uninstall leaves nothing of the operator."""

import subprocess

from hack import cluster_demo
from tests.quickstart.conftest import cluster_wide


def test_the_demo_runs_the_main_job_on_a_cluster_it_did_not_make(
    bare_cluster: dict[str, str], release_image: str
) -> None:
    env = {**bare_cluster, "TRAINER_OPERATOR_IMAGE": release_image}
    before = cluster_wide(env)
    done = subprocess.run(["bash", "hack/demo.sh"], cwd=cluster_demo.REPO, env=env, capture_output=True, text=True)
    print(done.stdout + done.stderr, flush=True)
    assert done.returncode == 0, f"hack/demo.sh failed: {done.stderr.strip()[-2000:]}"
    assert "No checkpoints: they need a ReadWriteMany StorageClass" in done.stdout  # the bare cluster has none
    shown = done.stdout.split("==> kubectl get trainers -o wide", 1)[1]
    assert "llama-7b-finetune" in shown.split("==>", 1)[0]
    assert "Succeeded" in shown.split("==>", 1)[0]
    assert "Local cluster" not in done.stdout  # nothing of the test bed
    gone = subprocess.run(
        [str(cluster_demo.REPO / ".venv" / "bin" / "python"), "hack/cluster_demo.py", "--uninstall"],
        cwd=cluster_demo.REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    print(gone.stdout + gone.stderr, flush=True)
    assert gone.returncode == 0, gone.stderr
    assert cluster_wide(env) == before  # nothing of the operator left
