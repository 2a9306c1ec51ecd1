#!/usr/bin/env python3
"""bench-smoke: one small run of every benchmark, to prove that each harness runs (figures are
printed, never asserted), on one local cluster brought up here and taken down at the end (each
benchmark alone brings up its own: eight clusters were most of the smoke run's time).

    python bench/smoke.py --out DIR     # the suite's smoke results go to DIR

Every benchmark runs even when one before it failed; the exit status says whether all passed, and
a table says how long each took.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from testbed import cluster as cluster_tool

REPO = Path(__file__).resolve().parent.parent


def commands(out: Path) -> list[list[str]]:
    """Each benchmark with sizes that fit the shared cluster's 16 nodes at once (status_protocol:
    five whole nodes a Trainer)."""
    return [
        ["bench/suite.py", "--smoke", "--out", str(out)],
        ["bench/status_protocol.py", "--trainers", "2"],
        ["bench/profiles.py", "--trainers", "10"],
        ["bench/checkpoints.py", "--checkpoints", "3", "--shards", "2", "--mb", "1"],
        ["bench/quota.py", "--trainers", "10"],
        ["bench/placement.py", "--trainers", "4"],
        ["bench/audit.py", "--updates", "10"],
        ["bench/watch_path.py", "--objects", "50", "--changes", "2"],
        ["bench/proactive.py", "--node-days", "2", "--ramps", "20"],
    ]


def run_all(out: Path) -> list[tuple[str, float, int]]:
    """(command, seconds, exit status) of each benchmark, on the cluster in $KUBECONFIG."""
    results = []
    for command in commands(out):
        shown = " ".join(command)
        cluster_tool.say(f"bench-smoke: {shown}")
        started = time.monotonic()
        status = subprocess.run([sys.executable, *command], cwd=REPO).returncode
        results.append((shown, time.monotonic() - started, status))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="where the suite's smoke results go")
    args = parser.parse_args(argv)
    started = time.monotonic()
    if os.environ.get("KUBECONFIG"):
        raise SystemExit("bench-smoke brings up its own local cluster: unset KUBECONFIG")
    if cluster_tool.main(["up"]) != 0:
        raise SystemExit("the local cluster did not come up; see the messages above")
    os.environ["KUBECONFIG"] = str(cluster_tool.RUN_DIR / "admin.kubeconfig")
    # The audit controller's summaries held 2 s, not 30 (as in the integration tests): the suite's
    # no-op resync and status_protocol wait for them, and the smoke run measures nothing.
    os.environ.setdefault("TRAINEROP_SUMMARY_DELAY_SECONDS", "2")
    try:
        results = run_all(args.out)
    finally:
        cluster_tool.main(["down"])
    print("bench-smoke: each benchmark, how long it took (on one cluster), and its exit status")
    for shown, seconds, status in results:
        print(f"  {seconds:7.1f} s  {'ok' if status == 0 else f'FAILED ({status})':12} {shown}")
    print(f"  {time.monotonic() - started:7.1f} s  in all, the cluster's start and stop included")
    failed = [shown for shown, _, status in results if status != 0]
    if failed:
        print(f"error: {len(failed)} benchmark(s) failed: {'; '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
