#!/usr/bin/env python3
"""The benchmark suite: throughput against a plain client's ceiling, recovery latency, memory and
API cost, and the Kubeflow Training Operator v1 side by side (prints progress; writes figures).

    python bench/suite.py              # N = 100 and 1000 Trainers of 4 workers on 100 kwok nodes,
                                       # 100 failures, 10 restarts of a 32-pod gang, 5 spot losses,
                                       # Kubeflow v1 side by side, a profile of the trainer controller;
                                       # the same PyTorchJobs through ours; the throughput,
                                       # PyTorchJob and Kubeflow phases 3 times (--repeat)
    python bench/suite.py --smoke      # a small run that proves the harness (CI)

Writes <out>/<label>.json and <out>/<label>.md (default bench/results/full). Figures are printed,
never asserted. Uses the cluster in $KUBECONFIG, else brings the local cluster up with --nodes
kwok nodes (8 GPUs each) and takes it down again. The controllers run as local processes with
--restart-backoff-seconds 0 (the recovery figures are their reaction, not the deliberate backoff)
and their default resync.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lightkube import Client
from lightkube.config.kubeconfig import KubeConfig

from bench import kubeflow, leak, recovery, repeats, webhooks
from bench.measure import CREATORS, ApiServerProfile, Obj, Profile, machine, resident_mib, rss_mib
from bench.plot import plot
from bench.report import markdown
from bench.setup import gone, operator_running, scratch_namespace
from bench.throughput import ceiling_run, made_by_operator, memory_after_restart, operator_run
from testbed import cluster as cluster_tool
from testbed import localdev
from tests.harness import Cluster
from trainerop_common.config import ControllerConfig

REPO = Path(__file__).resolve().parent.parent
DEFAULTS = ControllerConfig(controller="bench")  # the controllers' own flag defaults
# The controllers' environment (--restart-backoff-seconds 0: the recovery figures are their
# reaction, not the deliberate backoff; --qps/--burst when given). Their resync is their default
# (the local test bed's 60 s would reconcile every Trainer four times more often during a ramp).
CONTROLLER_ENV = {
    "TRAINEROP_RESTART_BACKOFF_SECONDS": "0",
    "TRAINEROP_RESYNC_SECONDS": f"{DEFAULTS.resync_seconds:g}",
}


def scratch(c: Cluster, prefix: str) -> Any:
    return scratch_namespace(c, prefix)


def ceiling(c: Cluster, client: Client, made: tuple[list[Obj], list[Obj]], n: int, levels: list[int]) -> dict[str, Any]:
    """The ceiling at each concurrency of ``levels`` (the sweep), with every controller stopped; the
    best of them is the ceiling."""
    localdev.stop()  # no operator sees or answers anything while the ceiling is measured
    sweep = {}
    try:
        for level in levels:
            print(f"== ceiling: the same pods and Services from a plain client, {level} at once", file=sys.stderr)
            with scratch(c, f"bench-plain{n}-{level}") as plain_ns:
                sweep[level] = ceiling_run(c, client, made, plain_ns, level)
            gone(c, plain_ns)
    finally:
        localdev.start(extra_env=CONTROLLER_ENV)
    best = min(sweep.values(), key=lambda r: float(r["all_pods_created_seconds"]))
    return {**best, "sweep": {str(k): v for k, v in sweep.items()}}


def throughput(
    c: Cluster, client: Client, n: int, workers: int, profile_to: Path | None, levels: list[int], details: bool
) -> dict[str, Any]:
    """The operator's run and the ceiling at N; a worker of another Trainer failed again and again
    meanwhile (replacements under load); the profile, if asked. With ``details`` (the first
    repetition), the no-op resync, completion, and the controllers' memory after a restart among
    the N Trainers."""
    print(f"== throughput: {n} Trainers x {workers} workers", file=sys.stderr, flush=True)
    profile: list[Profile] = []
    apiserver: list[ApiServerProfile] = []

    def start_profile() -> None:
        pid = cluster_tool.running_pid(localdev.state_dir(), "controller-trainer")
        if profile_to is not None and pid:
            profile.append(Profile(pid, profile_to))
        if profile_to is not None:  # the ramp's first minute at most (the creates and the first pods)
            out = profile_to.with_name(profile_to.name.replace("-profile-", "-apiserver-")).with_suffix(".pprof")
            apiserver.append(ApiServerProfile(c, out, seconds=min(60, max(5, n // 10))))

    with scratch(c, f"bench-probe{n}") as probe_ns:
        probe = recovery.Replacements(client, probe_ns)
        during_ramp: dict[str, Any] = {}

        def ramp_started() -> None:
            start_profile()
            probe.meanwhile()

        with scratch(c, f"bench-op{n}") as op_ns:
            operator = operator_run(
                c, client, op_ns, n, workers, ramp_started, lambda: during_ramp.update(probe.result()), details
            )
            operator["replacements_during_ramp"] = during_ramp
            hot = profile[0].summary() if profile else None
            apiserver_hot = apiserver[0].summary() if apiserver else None
            if details:  # restarted among this run's N Trainers and their pods: what they hold once caught up
                localdev.stop()
                localdev.start(extra_env=CONTROLLER_ENV)
                operator["memory_mib_after_restart"] = memory_after_restart(c, n)
            made = made_by_operator(client, op_ns)
        # The ceiling runs on a cluster without the operator's pods: with them still there (12 000
        # at N = 3000), kwok ran the ceiling's pods at a fraction of its pace.
        gone(c, op_ns)
        top = ceiling(c, client, made, n, levels)
    gone(c, probe_ns)
    out = {"operator": operator, "ceiling": top}
    if hot is not None:
        out["trainer_controller_profile"] = hot
    if apiserver_hot is not None:
        out["apiserver_profile"] = apiserver_hot
    return out


# Kubeflow v1's client budget: controller-runtime's defaults (its operator has no flag for them).
KUBEFLOW_QPS = {"TRAINEROP_QPS": "20", "TRAINEROP_BURST": "30"}


def same_qps(c: Cluster, client: Client, sizes: list[int], workers: int) -> dict[str, Any]:
    """The operator's run again with every controller at Kubeflow v1's client budget: the
    comparison at the same QPS. The controllers are restarted at their usual budget after."""
    localdev.stop()
    localdev.start(extra_env=CONTROLLER_ENV | KUBEFLOW_QPS)
    out = {}
    try:
        for n in sizes:
            print(f"== same QPS as Kubeflow (20, burst 30): {n} Trainers", file=sys.stderr, flush=True)
            with scratch(c, f"bench-qps{n}") as ns:
                out[str(n)] = operator_run(c, client, ns, n, workers, details=False)
            gone(c, ns)
    finally:
        localdev.stop()
        localdev.start(extra_env=CONTROLLER_ENV)
    return out


def pytorchjobs(
    c: Cluster,
    client: Client,
    args: argparse.Namespace,
    who: str,
    memory: Callable[[], Any],
    into: dict[str, Any],
    save: Callable[[], None],
) -> None:
    """PyTorchJobs of 1 master + workers at each N (``--repeat`` times), served by ``who``
    (Kubeflow's operator, or ours through the kubeflow controller), each N's runs recorded
    ``into`` its entry and saved after each."""
    sizes = [int(n) for n in args.trainers.split(",") if n]
    for rep, n in repeats.order(sizes, args.repeat):
        print(
            f"== {who}: {n} PyTorchJobs x {args.workers} pods (repetition {rep + 1} of {args.repeat})",
            file=sys.stderr,
            flush=True,
        )
        with scratch(c, f"bench-{'kf' if who == 'kubeflow' else 'pj'}{n}") as ns:
            run = kubeflow.run(c, client, ns, n, args.workers, memory, who)
        gone(c, ns)
        repeats.record_kubeflow(into.setdefault(str(n), run), run)
        save()


def check_capacity(p: argparse.ArgumentParser, trainers: int, workers: int, nodes: int) -> None:
    """Refuse, before anything starts, a largest N whose pods the local cluster's nodes cannot all
    run, and the probe's (N = 3000 of 4 workers once waited forever at 10 990 of 12 000)."""
    pods = trainers * workers + recovery.PROBE_WORKERS
    if pods > nodes * cluster_tool.FAKE_NODE_PODS:
        wanted = -(-pods // cluster_tool.FAKE_NODE_PODS)
        p.error(
            f"{trainers} Trainers of {workers} workers and the probe need {pods} pods; {nodes} kwok nodes run "
            f"{nodes * cluster_tool.FAKE_NODE_PODS} ({cluster_tool.FAKE_NODE_PODS} each): use --nodes {wanted} or more"
        )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--trainers", default="100,1000", help="comma-separated N")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--failures", type=int, default=100)
    p.add_argument("--gang", type=int, default=32, help="workers of the gang-restart Trainer")
    p.add_argument("--gang-restarts", type=int, default=10)
    p.add_argument("--spot-losses", type=int, default=5)
    p.add_argument("--nodes", type=int, default=100, help="kwok nodes when the suite starts the local cluster")
    p.add_argument("--kubeflow", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--qps", type=float, default=0, help="the controllers' client rate limit (default: theirs)")
    p.add_argument("--burst", type=int, default=0, help="the controllers' client burst (default: 2 x --qps)")
    p.add_argument(
        "--ceiling-concurrency",
        default="4,8,16,32",
        help="the plain client's requests in flight to sweep (comma-separated) at the smallest N; "
        "larger N use the best of them",
    )
    p.add_argument(
        "--phases",
        default="throughput,pytorchjobs,same-qps,recovery,webhooks,leak,kubeflow",
        help="the parts to run, comma-separated",
    )
    p.add_argument("--leak-trainers", type=int, default=5000, help="Trainers created and deleted by the leak check")
    p.add_argument("--leak-batch", type=int, default=500, help="Trainers per round of the leak check")
    p.add_argument("--webhook-rate", type=float, default=50, help="Trainer creates a second of the webhook burst")
    p.add_argument("--webhook-seconds", type=float, default=20, help="how long the webhook burst lasts")
    p.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="runs of the headline figures (throughput, PyTorchJobs, Kubeflow) at each N",
    )
    p.add_argument(
        "--resync-seconds",
        type=float,
        default=DEFAULTS.resync_seconds,
        help="the controllers' resync (default: theirs); the no-op resync waits for one round",
    )
    p.add_argument("--profile", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument(
        "--details",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the first repetition of each N also times a no-op resync, completion and memory after a restart",
    )
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    p.add_argument("--label", default="full")
    p.add_argument(
        "--smoke",
        action="store_true",
        help="a small run: 5 Trainers and 5 PyTorchJobs once, 5 failures, a 4-pod gang, no Kubeflow",
    )
    args = p.parse_args(argv)
    if args.smoke:
        args.trainers, args.failures, args.gang, args.gang_restarts, args.spot_losses = "5", 5, 4, 2, 1
        args.webhook_rate, args.webhook_seconds, args.leak_trainers, args.leak_batch = 10, 1, 10, 5
        # Once, at one ceiling concurrency: the smoke run proves the harness, it measures nothing
        # (the repetitions' bookkeeping is tabled in tests/unit/test_bench_repeats.py).
        args.nodes, args.kubeflow, args.label, args.repeat = 16, False, "smoke", 1
        args.ceiling_concurrency = "8"
        args.resync_seconds = 10  # the no-op resync round comes sooner
    CONTROLLER_ENV["TRAINEROP_RESYNC_SECONDS"] = f"{args.resync_seconds:g}"
    sizes = [int(n) for n in args.trainers.split(",") if n]
    if not os.environ.get("KUBECONFIG"):
        check_capacity(p, max(sizes), args.workers, args.nodes)
    cluster_tool.FAKE_NODES = args.nodes
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "label": args.label,
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "settings": {
            "kwok_nodes": args.nodes if not os.environ.get("KUBECONFIG") else "the cluster's",
            "workers_per_trainer": args.workers,
            "concurrent_creates": CREATORS,
            "resync_seconds": args.resync_seconds,
            "restart_backoff_seconds": 0,
            "controller_qps": args.qps or DEFAULTS.qps,
            "controller_burst": args.burst or (int(2 * args.qps) if args.qps else DEFAULTS.burst),
        },
    }

    def save() -> None:
        """After every phase: a run that stops half-way keeps what it measured."""
        (args.out / f"{args.label}.json").write_text(json.dumps(results, indent=1) + "\n")

    phases = set(args.phases.split(","))
    env = CONTROLLER_ENV
    if args.qps:
        env.update(TRAINEROP_QPS=str(args.qps), TRAINEROP_BURST=str(args.burst or int(2 * args.qps)))
    with operator_running(extra_env=env) as c:
        client = Client(KubeConfig.from_file(str(c.kubeconfig)), field_manager="bench")
        results["memory_idle_mib"] = resident_mib(c)
        results["throughput"] = {}
        levels = [int(x) for x in args.ceiling_concurrency.split(",") if x]
        for rep, n in repeats.order(sizes, args.repeat) if "throughput" in phases else ():
            first = rep == 0
            profile = args.out / f"{args.label}-profile-{n}.txt" if first and args.profile and n == max(sizes) else None
            print(f"== repetition {rep + 1} of {args.repeat}", file=sys.stderr, flush=True)
            result = throughput(c, client, n, args.workers, profile, levels, details=first and args.details)
            levels = [int(result["ceiling"]["concurrency"])]  # the sweep's best for the rest
            repeats.record_throughput(results["throughput"].setdefault(str(n), result), result)
            save()
        if "pytorchjobs" in phases:  # the same jobs as Kubeflow's phase, carried out by ours
            results["pytorchjobs"] = {}
            pytorchjobs(c, client, args, "ours", functools.partial(resident_mib, c), results["pytorchjobs"], save)
        if "same-qps" in phases:
            results["same_qps"] = same_qps(c, client, sizes, args.workers)
            save()
        if "recovery" in phases:
            print("== recovery", file=sys.stderr, flush=True)
            with scratch(c, "bench-recovery") as ns:
                results["replacement"] = recovery.replacements(client, ns, args.failures)
            gone(c, ns)
            with scratch(c, "bench-gang") as ns:
                results["gang_restart"] = recovery.gang_restarts(client, ns, args.gang, args.gang_restarts)
            gone(c, ns)
            with scratch(c, "bench-spot") as ns:
                results["spot_loss"] = recovery.spot_losses(c, client, ns, args.spot_losses)
            gone(c, ns)
            save()
        if "webhooks" in phases:
            results["webhook_burst"] = webhooks.webhook_burst(c, client, args.webhook_rate, args.webhook_seconds)
            save()
        if "leak" in phases:
            with scratch(c, "bench-leak") as ns:
                results["leak_check"] = leak.leak_check(c, client, ns, args.leak_trainers, args.leak_batch)
            gone(c, ns)
            save()
        if args.kubeflow and "kubeflow" in phases:
            localdev.stop()  # one operator at a time on the machine's 2 cores
            results["kubeflow"] = {}
            with kubeflow.training_operator(c) as pid:
                pytorchjobs(c, client, args, "kubeflow", functools.partial(rss_mib, pid), results["kubeflow"], save)
    save()
    (args.out / f"{args.label}.md").write_text(markdown(results))
    if results["throughput"]:  # the growth plot (a single size draws single points)
        print(f"plotted: {plot(results, args.out / f'{args.label}.png')}", file=sys.stderr)
    print(markdown(results))
    print(f"written: {args.out / (args.label + '.json')} and .md", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
