"""The checkpoint controller's metrics (docs/metrics.md)."""

from prometheus_client import Counter, Histogram

COMMITS = Counter("checkpoint_commits_total", "Checkpoints committed (every shard reached a quorum).")
FAILURES = Counter("checkpoint_failures_total", "Checkpoints failed.", ["reason"])
COLLECTED = Counter("checkpoint_collected_total", "Checkpoints whose data was garbage-collected.")
# source: "stored" (S3's checksum, checked against the data when it was written: nothing read),
# "read" (the data read and hashed).
VERIFIED = Counter("checkpoint_copies_verified_total", "Shard copies checked.", ["verdict", "source"])
WRITE_SECONDS = Histogram(
    "checkpoint_write_seconds",
    "Time a training pod took to write all copies of its shard (as it reported).",
    buckets=(0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600),
)
COMMIT_SECONDS = Histogram(
    "checkpoint_commit_seconds",
    "From the Checkpoint's creation to its commit.",
    buckets=(0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800),
)
VERIFY_SECONDS = Histogram("checkpoint_verify_seconds", "Reading and hashing one shard copy.")
STORAGE_PODS = Counter(
    "checkpoint_storage_pods_total",
    "Pods that verify or delete checkpoints on a PersistentVolumeClaim, by what happened to them.",
    ["purpose", "outcome"],  # verify|collect, created|failed (ended without an answer, or refused by the API server)
)
SAVE_REQUESTS = Counter(
    "checkpoint_save_requests_total",
    "Saves asked of a run's ranks before a disruption, by trigger (SpotReclaimed, NodePredicted, NodeDrained, "
    "Requested) and where they went (Requested, Committed, Missed).",
    ["reason", "phase"],
)
