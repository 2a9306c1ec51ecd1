"""The suite's results as a markdown table (bench/results/<label>.md)."""

from __future__ import annotations

from typing import Any

from bench.repeats import SHARES, figure, spread_text

# The stages of a replacement during a ramp (bench.recovery.STAGES), as the report names them.
STAGE_TITLES = {
    "failure_written": "the failure's write answered (API server)",
    "failure_counted": "then the failure counted in the Trainer's status (the trainer saw it and wrote)",
    "deletion_seen": "then the failed pod's deletion seen (its delete)",
    "replacement_seen": "then the replacement seen (its create)",
}


def _row(*cells: Any) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _spread_row(title: str, f: dict[str, Any]) -> str:
    """A row of a figure's percentiles (bench.measure.spread)."""
    return _row(title, f["count"], f["p50"], f["p95"], f["p99"], f["max"])


def _ratio(a: float | None, b: float | None) -> str:
    """a / b, or '-' when either is missing (a stalled wait's figure is None)."""
    return f"{a / b:.2f}" if a and b else "-"


def _share(t: dict[str, Any], name: str) -> str:
    """The ceiling's time over ours: the median of the repetitions' paired shares, else the one
    run's."""
    if "of_ceiling" in t.get("median", {}):
        return spread_text(t, "of_ceiling", name)
    return _ratio(t["ceiling"][SHARES[name]], t["operator"][SHARES[name]])


def recovery_lines(r: dict[str, Any]) -> list[str]:
    """The recovery table: idle replacements, the gang, the spot loss, and replacements during each
    ramp with their stages."""
    lines = ["", "## Recovery", "", _row("what", "count", "p50", "p95", "p99", "max"), _row(*["---"] * 6)]
    for title, key, name in (
        ("failed worker → replacement created", "replacement", "replacement_created_seconds"),
        ("failed worker → replacement running", "replacement", "replacement_running_seconds"),
        (
            f"gang restart of {r.get('gang_restart', {}).get('pods')} pods → all replaced",
            "gang_restart",
            "all_replaced_seconds",
        ),
        ("gang restart → all running", "gang_restart", "all_running_seconds"),
        ("spot node deleted → renegotiated admission", "spot_loss", "renegotiated_seconds"),
    ):
        f = r.get(key, {}).get(name)
        if f:
            lines.append(_spread_row(title, f))
    for n, t in r.get("throughput", {}).items():
        ramp = t["operator"].get("replacements_during_ramp") or {}
        f = ramp.get("replacement_created_seconds")
        if f:
            title = f"failed worker → replacement created, during the N = {n} ramp"
            lines.append(_spread_row(title, f))
        for stage, f in (ramp.get("stages_seconds") or {}).items():
            lines.append(_spread_row(f"… of which {STAGE_TITLES.get(stage, stage)}", f))
    return lines


def markdown(r: dict[str, Any]) -> str:
    m, s = r["machine"], r["settings"]
    lines = [
        f"# Benchmark results: {r['label']} ({r['date']})",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, Linux {m['kernel']}, Python {m['python']}. "
        f"Local cluster (testbed/cluster.py: etcd, kube-apiserver, scheduler, controller-manager, kwok) with "
        f"{s['kwok_nodes']} kwok nodes; controllers as local processes; {s['concurrent_creates']} concurrent creates; "
        f"resync {s['resync_seconds']} s; restart backoff {s['restart_backoff_seconds']} s; "
        f"the controllers' client rate limit {s.get('controller_qps', 20)} requests/s "
        f"(burst {s.get('controller_burst', 40)}). "
        "Times in seconds from the first create request, seen on watches (sub-second).",
        "",
        "## Throughput against the ceiling",
        "",
        "The ceiling: a plain client creating the same pods and Services (copied from what the operator made), "
        "unthrottled, with every controller stopped; 'of the ceiling' is the ceiling's time over ours (1: as fast "
        "as the plain client).",
        "",
        _row(
            "N Trainers",
            "pods",
            "operator: all Trainers created",
            "all pods created",
            "all pods running",
            "all Trainers Running",
            "ceiling: all pods created",
            "all pods running",
            "of the ceiling: created",
            "running",
        ),
        _row(*["---"] * 10),
    ]
    for n, t in r.get("throughput", {}).items():
        lines.append(
            _row(
                n,
                t["ceiling"]["pods"],
                spread_text(t, "operator", "all_trainers_created_seconds"),
                spread_text(t, "operator", "all_pods_created_seconds"),
                spread_text(t, "operator", "all_pods_running_seconds"),
                spread_text(t, "operator", "all_trainers_running_seconds"),
                spread_text(t, "ceiling", "all_pods_created_seconds"),
                spread_text(t, "ceiling", "all_pods_running_seconds"),
                _share(t, "created"),
                _share(t, "running"),
            )
        )
    lines += kubeflow_lines(r)
    lines += pytorchjob_lines(r)
    lines += same_qps_lines(r)
    lines += recovery_lines(r)
    lines += webhook_lines(r.get("webhook_burst"))
    lines += leak_lines(r.get("leak_check"))
    lines += ["", "## Memory (resident, MiB)", ""]
    sizes = list(r.get("throughput", {}))
    lines += [_row("controller", "0 Trainers", *[f"{n} Trainers" for n in sizes]), _row(*["---"] * (2 + len(sizes)))]
    for ctl, idle in r.get("memory_idle_mib", {}).items():
        lines.append(_row(ctl, idle, *[r["throughput"][n]["operator"]["memory_mib"].get(ctl, "-") for n in sizes]))
    if sizes:
        n, idle = sizes[-1], r.get("memory_idle_mib", {})
        at_n = r["throughput"][n]["operator"]["memory_mib"]
        per = [f"{ctl} {round((at_n[ctl] - idle[ctl]) * 2**20 / int(n) / 1024, 1)}" for ctl in at_n if ctl in idle]
        lines += ["", f"KiB per Trainer ((memory at N = {n} - idle) / N): " + ", ".join(per)]
    lines += [
        "",
        "## API cost (the API server's apiserver_request_total; writes of kwok, the scheduler, "
        "the controller-manager and lease renewals left out)",
        "",
        _row("N", "writes per Trainer to Running", "per lifecycle (to Succeeded)", "per no-op resync", "409 conflicts"),
        _row(*["---"] * 5),
    ]
    for n in sizes:
        o = r["throughput"][n]["operator"]
        lines.append(
            _row(
                n,
                o["writes_to_running_per_trainer"],
                o.get("writes_per_trainer_lifecycle", "-"),  # the first repetition's details (--details)
                o.get("writes_per_noop_resync_per_trainer", "-"),
                o.get("conflicts_409", "-"),
            )
        )
    for n in sizes:
        t = r["throughput"][n]
        by_controller = t["operator"].get("status_writes_to_running_per_trainer") or {}
        sweep = t["ceiling"].get("sweep") or {}
        notes = {
            f"Status writes per Trainer to Running by controller (N = {n})": [
                f"{k} {v}" for k, v in by_controller.items()
            ],
            f"Ceiling sweep (N = {n}), requests in flight: all pods created / all running (s)": [
                f"{k}: {v['all_pods_created_seconds']} / {v['all_pods_running_seconds']}" for k, v in sweep.items()
            ],
            f"CPU seconds to all Running by process (N = {n}), ours / the ceiling's": [
                f"{k} {v} / {t['ceiling'].get('cpu_seconds_to_running', {}).get(k, '-')}"
                for k, v in (t["operator"].get("cpu_seconds_to_running") or {}).items()
            ],
            f"Memory after the controllers' restart with the {n} Trainers present (MiB)": [
                f"{k} {v}" for k, v in (t["operator"].get("memory_mib_after_restart") or {}).items()
            ],
        }
        lines += [line for title, parts in notes.items() if parts for line in ("", f"{title}: " + ", ".join(parts))]
    last = r["throughput"][sizes[-1]]["operator"].get("writes_by_resource") if sizes else None
    if last:
        lines += [
            "",
            f"Writes per Trainer lifecycle by resource (N = {sizes[-1]}): "
            + ", ".join(f"{k} {v}" for k, v in last.items()),
        ]
    for n, t in r.get("throughput", {}).items():
        prof = t.get("trainer_controller_profile")
        if prof and "own_time" in prof:
            lines += [
                "",
                f"## Where the trainer controller's time goes (py-spy, N = {n}, {prof['samples']} samples)",
                "",
                _row("own time", "%", "including callees", "%"),
                _row(*["---"] * 4),
            ]
            for a, b in zip(prof["own_time"], prof["inclusive"], strict=False):
                lines.append(_row(a["function"], a["percent"], b["function"], b["percent"]))
        lines += apiserver_lines(n, t.get("apiserver_profile"))
    return "\n".join(lines) + "\n"


def apiserver_lines(n: str, prof: dict[str, Any] | None) -> list[str]:
    """The API server's CPU profile during the ramp, by the handlers our requests reach."""
    if not prof or "parts" not in prof:
        return [] if not prof else ["", f"The API server's profile (N = {n}) could not be read: {prof.get('error')}"]
    lines = [
        "",
        f"## Where the API server's CPU goes (its pprof, the ramp's first {prof['seconds']} s, N = {n}, "
        f"{prof['cpu_seconds_sampled']} CPU-s sampled; shares include what each calls, so they overlap)",
        "",
        _row("part", "% of the CPU sampled"),
        _row("---", "---"),
    ]
    return lines + [_row(p["part"], p["percent"]) for p in prof["parts"]]


def webhook_lines(w: dict[str, Any] | None) -> list[str]:
    """The webhook burst: create latency with and without the webhooks, refusals by cause."""
    if not w:
        return []
    on, off = w["with_webhooks"], w["without_webhooks"]
    lines = [
        "",
        f"## Admission webhooks under {on['rate_per_second']:g} Trainer creates a second ({on['creates']} creates)",
        "",
        _row("", "create p50 (s)", "p99", "max", "refused", "rejections by error_type (API server)"),
        _row(*["---"] * 6),
    ]
    for title, b in (("with the webhooks", on), ("without (baseline)", off)):
        t = b["create_seconds"]
        rejected = ", ".join(f"{k} {v}" for k, v in b["rejections_by_error_type"].items()) or "none"
        lines.append(_row(title, t["p50"], t["p99"], t["max"], b["refused"], rejected))
    lines += ["", f"Added by the webhooks: p50 {w['added_seconds']['p50']} s, p99 {w['added_seconds']['p99']} s."]
    per_hook = [
        f"{k} {v['calls']} calls, mean {v['mean_s']} s, p99 ≤ {v['p99_at_most_s']} s" for k, v in on["webhooks"].items()
    ]
    return [*lines, "", "Each webhook, as the API server timed it: " + "; ".join(per_hook) + "."]


def leak_lines(leak: dict[str, Any] | None) -> list[str]:
    """The leak check: memory after each round, and the growth after the first."""
    if not leak:
        return []
    rounds = leak["memory_mib_by_round"]
    lines = [
        "",
        f"## Leak check: {leak['trainers']} Trainers created and deleted, {leak['batch']} at a time (resident MiB)",
        "",
        _row("controller", *[f"after round {i + 1}" for i in range(len(rounds))], "growth after round 1"),
        _row(*["---"] * (len(rounds) + 2)),
    ]
    for ctl, growth in leak["growth_mib_after_first_round"].items():
        lines.append(_row(ctl, *[r.get(ctl, "-") for r in rounds], growth))
    return lines


def kubeflow_lines(r: dict[str, Any]) -> list[str]:
    """Kubeflow v1's runs beside ours and the ceiling, and which of its waits stalled."""
    kf = r.get("kubeflow") or {}
    if not kf:
        return []
    lines = [
        "",
        "Kubeflow Training Operator v1 (PyTorchJob, 1 master + workers, same pod count) on the same cluster:",
        "",
        _row(
            "N jobs",
            "all pods created",
            "all pods running",
            "all jobs Running",
            "of the ceiling: running",
            "ours faster: created",
            "running",
            "memory MiB",
            "writes per job to Running",
            "409s",
        ),
        _row(*["---"] * 10),
    ]
    for n, k in kf.items():
        t = r.get("throughput", {}).get(n)
        ceiling_running = figure(t, "ceiling", "all_pods_running_seconds") if t else 0
        ours_created = figure(t, "operator", "all_pods_created_seconds") if t else 0
        ours_running = figure(t, "operator", "all_pods_running_seconds") if t else 0
        lines.append(
            _row(
                n,
                spread_text(k, "all_pods_created_seconds"),
                spread_text(k, "all_pods_running_seconds"),
                spread_text(k, "all_jobs_running_seconds"),
                _ratio(ceiling_running, figure(k, "all_pods_running_seconds")),
                _ratio(figure(k, "all_pods_created_seconds"), ours_created),
                _ratio(figure(k, "all_pods_running_seconds"), ours_running),
                k["memory_mib"],
                k["writes_to_running_per_job"],
                k["conflicts_409"],
            )
        )
    lines += [
        f"- N = {n}, {stall} (that time and the later ones: stalled)"
        for n, k in kf.items()
        for stall in k.get("stalls", ())
    ]
    return lines


def pytorchjob_lines(r: dict[str, Any]) -> list[str]:
    """The same PyTorchJobs carried out by ours (the kubeflow controller, then the Trainer's
    controllers) against Kubeflow v1's run of them."""
    ours, kf = r.get("pytorchjobs") or {}, r.get("kubeflow") or {}
    if not ours:
        return []
    lines = [
        "",
        "The same PyTorchJobs through ours (the kubeflow controller makes a Trainer of each) against Kubeflow v1:",
        "",
        _row(
            "N jobs",
            "all pods created",
            "all pods running",
            "all jobs Running",
            "ours faster: created",
            "running",
            "jobs Running",
            "memory MiB (kubeflow, trainer)",
            "writes per job to Running",
            "409s",
        ),
        _row(*["---"] * 10),
    ]
    for n, o in ours.items():
        k = kf.get(n) or {}
        times = ("all_pods_created_seconds", "all_pods_running_seconds", "all_jobs_running_seconds")
        memory = o["memory_mib"]
        lines.append(
            _row(
                n,
                *[spread_text(o, t) for t in times],
                *[_ratio(figure(k, t), figure(o, t)) if k else "-" for t in times],
                f"{memory.get('kubeflow', 0):.1f}, {memory.get('trainer', 0):.1f}",
                o["writes_to_running_per_job"],
                o["conflicts_409"],
            )
        )
    lines += [
        f"- N = {n}, {stall} (that time and the later ones: stalled)"
        for n, o in ours.items()
        for stall in o.get("stalls", ())
    ]
    return lines


def same_qps_lines(r: dict[str, Any]) -> list[str]:
    """Ours at Kubeflow v1's client budget (20 requests/s, burst 30) against Kubeflow's run."""
    same, kf = r.get("same_qps") or {}, r.get("kubeflow") or {}
    if not same:
        return []
    lines = [
        "",
        "At the same client QPS (every controller of ours at 20 requests/s, burst 30: Kubeflow v1's"
        " controller-runtime defaults):",
        "",
        _row(
            "N",
            "ours: all pods created",
            "all pods running",
            "Kubeflow: created",
            "running",
            "ours faster: created",
            "running",
        ),
        _row(*["---"] * 7),
    ]
    for n, o in same.items():
        k = kf.get(n, {})
        lines.append(
            _row(
                n,
                o["all_pods_created_seconds"],
                o["all_pods_running_seconds"],
                spread_text(k, "all_pods_created_seconds") if k else "-",
                spread_text(k, "all_pods_running_seconds") if k else "-",
                _ratio(figure(k, "all_pods_created_seconds") if k else 0, o["all_pods_created_seconds"]),
                _ratio(figure(k, "all_pods_running_seconds") if k else 0, o["all_pods_running_seconds"]),
            )
        )
    return lines
