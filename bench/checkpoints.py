#!/usr/bin/env python3
"""How fast checkpoints are written, verified and committed on the local S3 server (prints figures).

    python bench/checkpoints.py --checkpoints 10 --shards 4 --mb 8
    python bench/checkpoints.py --file-gb 12     # one shard of 12 GB saved from a file (issue 20)

One Trainer (replicationFactor 3); for each checkpoint every shard is saved with the SDK as the
training pod's identity. Figures: the SDK's time to write a shard's 3 copies and report it
(MB/s); the time from the last shard's report until the checkpoint is Committed (the controller
verifies each shard's copies as it is reported, so this is mostly the last shard's); and the
controller's time per copy verified, from its checkpoint_verify_seconds histogram (a HEAD when S3
kept the checksum the writer reported, else the copy read and hashed).

``--file-gb``: one checkpoint whose shard 0 is a file of that size, saved with ``save_file`` by a
process of its own (multipart with boto3, trainerop-sdk[s3]): its write time and the writer's peak
memory (it must not hold the shard), then the time until the controller has verified the 3 copies
(from the multipart uploads' stored checksums, which the writer reports) and committed. Needs
about 4 times the size free on disk (the file and 3 copies in SeaweedFS).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.setup import operator_running, percentile, scratch_namespace
from testbed import cluster as cluster_tool
from tests.harness import Cluster, eventually
from tests.integration.buckets import create_credentials
from tests.integration.test_checkpoints import as_pod, phase_is, start
from trainerop_sdk.s3 import Credentials, S3Client


def run(c: Cluster, namespace: str, checkpoints: int, shards: int, mb: int) -> None:
    name = f"bench-{uuid.uuid4().hex[:8]}"
    S3Client(Credentials.from_env(cluster_tool.s3_credentials()), name).create_bucket()
    create_credentials(c, namespace)
    ckpt = as_pod(c, namespace, start(c, namespace, f"s3://{name}/runs", maxRetention=3))
    data = os.urandom(mb << 20)
    verify_before = verification(c)
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
    # The controller verifies each shard as it is reported; its own histogram gives the time per
    # copy (a HEAD when S3 kept the checksum the writer reported, else the copy read and hashed).
    seconds, checked, stored = (after - before for after, before in zip(verification(c), verify_before, strict=True))
    print(f"copies_verified {checked:.0f} (from S3's stored checksum: {stored:.0f}, read: {checked - stored:.0f})")
    print(f"verify_seconds_per_copy_mean {seconds / checked:.4f}")


def verification(c: Cluster) -> tuple[float, float, float]:
    """The checkpoint controller's time spent verifying, copies verified, and those of them judged
    from S3's stored checksum without being read."""
    return (
        c.metric("checkpoint", "checkpoint_verify_seconds_sum", {}),
        c.metric("checkpoint", "checkpoint_verify_seconds_count", {}),
        c.metric("checkpoint", "checkpoint_copies_verified_total", {"verdict": "ok", "source": "stored"}),
    )


WRITER = """
import json, resource, sys, time
from trainerop_sdk.checkpoint import Checkpointer
from trainerop_sdk.kubeapi import ApiClient
server, token, namespace, ca, env, path = *sys.argv[1:5], json.loads(sys.argv[5]), sys.argv[6]
t0 = time.monotonic()
Checkpointer.in_cluster(ApiClient(server, token, namespace, ca), env).save_file(path, step=1, epoch=0, shard=0)
print(time.monotonic() - t0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def large(c: Cluster, namespace: str, gb: int, workdir: Path) -> None:
    name = f"bench-{uuid.uuid4().hex[:8]}"
    S3Client(Credentials.from_env(cluster_tool.s3_credentials()), name).create_bucket()
    create_credentials(c, namespace)
    ckpt = as_pod(c, namespace, start(c, namespace, f"s3://{name}/runs", maxRetention=3))
    shard = workdir / "shard.bin"
    print(f"writing a {gb} GB shard file ...", file=sys.stderr, flush=True)
    with shard.open("wb") as f:
        for _ in range(gb * 1024):
            f.write(os.urandom(1 << 20))
    api = ckpt.api
    argv = [api.server, api.token, namespace, api.ca_file or "", json.dumps(dict(ckpt.env)), str(shard)]
    print("saving it (3 copies) ...", file=sys.stderr, flush=True)
    out = subprocess.run([sys.executable, "-c", WRITER, *argv], capture_output=True, text=True, check=True).stdout
    seconds, peak_kib = out.split()
    ckpt.save(b"shard 1", step=1, epoch=0, shard=1)
    t0 = time.monotonic()
    eventually(lambda: phase_is(c, namespace, "alpha-step-1", "Committed"), timeout=7200, what="the commit")
    verified = time.monotonic() - t0
    shard.unlink()
    print(f"shard_gb {gb} copies {ckpt.replication}")
    print(f"sdk_save_file_seconds {float(seconds):.1f} ({ckpt.replication * gb * 1024 / float(seconds):.0f} MB/s)")
    print(f"writer_peak_rss_mib {int(peak_kib) / 1024:.0f}")
    print(f"report_to_commit_seconds {verified:.1f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--checkpoints", type=int, default=10)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--mb", type=int, default=8, help="size of one shard in MiB")
    parser.add_argument("--file-gb", type=int, default=0, help="instead: one shard of this many GB from a file")
    args = parser.parse_args()
    with operator_running() as c, scratch_namespace(c) as namespace:
        if args.file_gb:
            with tempfile.TemporaryDirectory(dir=str(Path.home())) as workdir:
                large(c, namespace, args.file_gb, Path(workdir))
        else:
            run(c, namespace, args.checkpoints, args.shards, args.mb)
    return 0


if __name__ == "__main__":
    sys.exit(main())
