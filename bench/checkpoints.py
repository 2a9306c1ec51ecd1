#!/usr/bin/env python3
"""How fast checkpoints are written, verified and committed on the local S3 server (prints figures).

    python bench/checkpoints.py --checkpoints 10 --shards 4 --mb 8

One Trainer (replicationFactor 3); for each checkpoint every shard is saved with the SDK as the
training pod's identity. Figures: the SDK's time to write a shard's 3 copies and report it
(MB/s); the time from the last shard's report until the checkpoint is Committed (the controller
reads each shard's copies back as it is reported, so this is mostly the last shard's); and the
controller's read-and-hash rate, from its checkpoint_verify_seconds histogram.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.setup import operator_running, percentile, scratch_namespace
from testbed import cluster as cluster_tool
from tests.harness import Cluster, eventually
from tests.integration.test_checkpoints import as_pod, create_credentials, phase_is, start
from trainerop_sdk.s3 import Credentials, S3Client


def run(c: Cluster, namespace: str, checkpoints: int, shards: int, mb: int) -> None:
    name = f"bench-{uuid.uuid4().hex[:8]}"
    S3Client(Credentials.from_env(cluster_tool.s3_credentials()), name).create_bucket()
    create_credentials(c, namespace)
    ckpt = as_pod(c, namespace, start(c, namespace, f"s3://{name}/runs", maxRetention=3))
    data = os.urandom(mb << 20)
    verify_before = (
        c.metric("checkpoint", "checkpoint_verify_seconds_sum", {}),
        c.metric("checkpoint", "checkpoint_verify_seconds_count", {}),
    )
    writes, commits = [], []
    for step in range(1, checkpoints + 1):
        for shard in range(shards):
            t0 = time.monotonic()
            ckpt.save(data, step=step, epoch=0, shard=shard, shards=shards)
            writes.append(time.monotonic() - t0)
        t0 = time.monotonic()
        checkpoint = f"alpha-step-{step}"
        eventually(lambda: phase_is(c, namespace, checkpoint, "Committed"), timeout=300, what=checkpoint)  # noqa: B023
        commits.append(time.monotonic() - t0)
    copies = ckpt.replication
    print(f"checkpoints {checkpoints} shards {shards} shard_mb {mb} copies {copies}")
    for q in (50, 99):
        print(f"sdk_save_shard_seconds_p{q} {percentile(writes, q):.3f}")
        print(f"report_to_commit_seconds_p{q} {percentile(commits, q):.3f}")
    print(f"sdk_write_mb_per_second_p50 {copies * mb / percentile(writes, 50):.1f}")
    # The controller verifies each shard as it is reported; its own histogram gives the read rate.
    seconds = c.metric("checkpoint", "checkpoint_verify_seconds_sum", {}) - verify_before[0]
    read = c.metric("checkpoint", "checkpoint_verify_seconds_count", {}) - verify_before[1]
    print(f"copies_verified {read:.0f}")
    print(f"verify_mb_per_second_mean {read * mb / seconds:.1f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--checkpoints", type=int, default=10)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--mb", type=int, default=8, help="size of one shard in MiB")
    args = parser.parse_args()
    with operator_running() as c, scratch_namespace(c) as namespace:
        run(c, namespace, args.checkpoints, args.shards, args.mb)
    return 0


if __name__ == "__main__":
    sys.exit(main())
