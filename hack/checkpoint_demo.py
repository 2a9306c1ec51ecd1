#!/usr/bin/env python3
"""The checkpoint part of the main job (hack/demo.sh): what two training pods of
examples/checkpoints/trainer-s3.yaml would do, run here with their own identity (kwok nodes run
no containers): save their shards to the local S3 server, three copies each, for three steps.

    python hack/checkpoint_demo.py [--namespace default]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from testbed import cluster as cluster_tool
from trainerop_common.contracts import RUNNER_SERVICE_ACCOUNT
from trainerop_sdk.checkpoint import Checkpointer
from trainerop_sdk.kubeapi import ApiClient
from trainerop_sdk.layout import parse_s3_uri
from trainerop_sdk.s3 import Credentials, S3Client

TRAINER = "llama-7b-s3"
REPO = Path(__file__).resolve().parent.parent


def kubectl(*args: str) -> str:
    return subprocess.run(
        [str(cluster_tool.bin_dir() / "kubectl"), *args], check=True, capture_output=True, text=True
    ).stdout


def wait(what: str, check: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    raise SystemExit(f"timed out waiting for {what}; see `kubectl describe trainer {TRAINER}`")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--namespace", default="default")
    ns = parser.parse_args().namespace
    manifest = yaml.safe_load((REPO / "examples" / "checkpoints" / "trainer-s3.yaml").read_text())
    creds = cluster_tool.s3_credentials()
    S3Client(Credentials.from_env(creds), parse_s3_uri(manifest["spec"]["checkpoint"]["bucket"]).bucket).create_bucket()
    secret = yaml.safe_dump(
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "checkpoint-credentials"}, "stringData": creds}
    )
    subprocess.run(
        [str(cluster_tool.bin_dir() / "kubectl"), "apply", "-n", ns, "-f", "-"],
        input=secret,
        text=True,
        check=True,
        capture_output=True,
    )
    kubectl("apply", "-n", ns, "-f", str(REPO / "examples" / "checkpoints" / "trainer-s3.yaml"))

    def phase() -> str:
        return kubectl("get", "trainer", TRAINER, "-n", ns, "-o", "jsonpath={.status.phase}")

    wait("the Trainer to run", lambda: phase() == "Running")
    config = yaml.safe_load(Path(cluster_tool.RUN_DIR / "admin.kubeconfig").read_text())["clusters"][0]["cluster"]
    for replica in (0, 1):
        pod = yaml.safe_load(kubectl("get", "pod", f"{TRAINER}-worker-{replica}", "-n", ns, "-o", "yaml"))
        bound = ("--bound-object-kind", "Pod", "--bound-object-name", pod["metadata"]["name"])
        token = kubectl("create", "token", RUNNER_SERVICE_ACCOUNT, "-n", ns, *bound).strip()  # the pod's identity
        env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"] if "value" in e}
        env |= creds | {"POD_NAME": pod["metadata"]["name"]}
        ckpt = Checkpointer.in_cluster(ApiClient(config["server"], token, ns, config["certificate-authority"]), env)
        for step in (100, 200, 300):
            name = ckpt.save(f"weights of replica {replica} at step {step}".encode(), step=step, epoch=step // 100)
            print(f"{pod['metadata']['name']}: saved shard {ckpt.shard} of {name} ({ckpt.replication} copies)")

    def latest() -> str:
        return kubectl("get", "trainer", TRAINER, "-n", ns, "-o", "jsonpath={.status.checkpoint.latest}")

    wait("the newest checkpoint to commit", lambda: latest() == f"{TRAINER}-step-300")
    wait("the oldest to be garbage-collected", lambda: "GarbageCollected" in kubectl("get", "checkpoints", "-n", ns))
    return 0


if __name__ == "__main__":
    sys.exit(main())
