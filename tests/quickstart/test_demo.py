"""hack/demo.sh on a cluster it did not make (the bare cluster, $KUBECONFIG naming it): the main job
runs there with nothing of the test bed assumed — the operator from the release's image, the seed
Trainer sized for the cluster's node to Succeeded, checkpointing to an S3 server the demo starts
(the bare cluster has no shared storage), SeaweedFS's image as its project names it — and its
--uninstall leaves nothing of the operator."""

import subprocess

from hack import cluster_demo, demo_storage
from testbed import containerd, images
from tests.quickstart.conftest import cluster_wide


def test_the_demo_runs_the_main_job_on_a_cluster_it_did_not_make(
    bare_cluster: dict[str, str], release_image: str
) -> None:
    run_the_demo(bare_cluster, release_image)


def run_the_demo(cluster: dict[str, str], release_image: str) -> None:
    """hack/demo.sh on the cluster ``cluster`` names, then its --uninstall."""
    # SeaweedFS's image, the version the test bed's weed is, where the node pulls docker.io from
    built = images.seaweedfs(containerd.node_dir())
    assert built == f"docker.io/{demo_storage.S3_IMAGE}", "the test bed's weed and the demo's image differ in version"
    env = {**cluster, "TRAINER_OPERATOR_IMAGE": release_image}
    before = cluster_wide(env)
    done = subprocess.run(["bash", "hack/demo.sh"], cwd=cluster_demo.REPO, env=env, capture_output=True, text=True)
    print(done.stdout + done.stderr, flush=True)
    assert done.returncode == 0, f"hack/demo.sh failed: {done.stderr.strip()[-2000:]}"
    assert "Checkpoints to s3://checkpoints/seed on demo-s3 (SeaweedFS, for the demo only" in done.stdout
    trainers = section(done.stdout, "kubectl get trainers -o wide")
    assert "llama-7b-finetune" in trainers
    assert "Succeeded" in trainers
    listed = section(done.stdout, "kubectl get checkpoints").splitlines()
    phases = dict(line.split()[0:5:4] for line in listed if line.startswith(cluster_demo.NAME))  # NAME ... PHASE
    assert len(phases) == 10, phases  # one per epoch, each shard written by the 4 workers
    assert phases["llama-7b-finetune-step-1000"] == "Committed"
    # the seed's maxRetention 3: the older ones collected (the last one's collection may lag the end)
    assert sorted(phases.values()).count("GarbageCollected") >= 6, phases
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


def section(output: str, heading: str) -> str:
    """What the demo printed under ``==> heading``."""
    return output.split(f"==> {heading}", 1)[1].split("==>", 1)[0]
