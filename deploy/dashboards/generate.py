#!/usr/bin/env python3
"""Write trainer-operator.json beside this script, the Grafana dashboard of the operator's metrics
(docs/metrics.md), from the panel list below; `--check` fails if the file is stale.

    python deploy/dashboards/generate.py          # write it
    python deploy/dashboards/generate.py --check  # what the unit tests run

Every panel's query is checked by tests/unit/test_dashboard.py against the metrics the five
controllers register, so a renamed metric cannot leave an empty panel behind.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent / "trainer-operator.json"
RATE = "[$__rate_interval]"

# (row, [(title, unit, [(query, legend)], description)])
Panel = tuple[str, str, list[tuple[str, str]], str]
ROWS: list[tuple[str, list[Panel]]] = [
    (
        "Controllers",
        [
            ("Controllers up", "none", [("operator_up", "{{controller}}")], "1 while connected and serving"),
            (
                "Reconciles per second",
                "ops",
                [(f"sum by (controller) (rate(operator_reconcile_duration_seconds_count{RATE}))", "{{controller}}")],
                "operator_reconcile_duration (seed README)",
            ),
            (
                "Reconcile duration p95",
                "s",
                [
                    (
                        "histogram_quantile(0.95, sum by (le, controller) "
                        f"(rate(operator_reconcile_duration_seconds_bucket{RATE})))",
                        "{{controller}}",
                    )
                ],
                "",
            ),
            (
                "Reconcile errors per second",
                "ops",
                [
                    (
                        'sum by (controller, result) (rate(operator_reconcile_duration_seconds_count{result!="ok"}'
                        f"{RATE}))",
                        "{{controller}} {{result}}",
                    )
                ],
                "temporary errors are retried with backoff; permanent ones become a condition and an Event",
            ),
            ("Queue depth", "none", [("operator_queue_depth", "{{controller}}")], "reconciles waiting to start"),
            ("Reconciles in flight", "none", [("operator_reconciles_in_flight", "{{controller}}")], ""),
            (
                "API requests per second",
                "reqps",
                [(f"sum by (controller, verb) (rate(operator_api_requests_total{RATE}))", "{{controller}} {{verb}}")],
                "the controllers' own client (watches excluded)",
            ),
            (
                "API errors per second",
                "reqps",
                [(f"sum by (controller, code) (rate(operator_api_errors_total{RATE}))", "{{controller}} {{code}}")],
                "by HTTP status, or connection",
            ),
            (
                "Status writes per second",
                "ops",
                [
                    (
                        f"sum by (controller, outcome) (rate(operator_status_writes_total{RATE}))",
                        "{{controller}} {{outcome}}",
                    )
                ],
                "skipped: nothing changed, no request made",
            ),
            (
                "Warning Events per hour",
                "none",
                [('sum by (controller, reason) (increase(operator_events_total{type="Warning"}[1h]))', "{{reason}}")],
                "",
            ),
            (
                "Admission reviews per second",
                "reqps",
                [
                    (
                        f"sum by (webhook, outcome) (rate(operator_admission_reviews_total{RATE}))",
                        "{{webhook}} {{outcome}}",
                    )
                ],
                "refused: the user was told what to fix",
            ),
            (
                "Admission review duration p99",
                "s",
                [
                    (
                        "histogram_quantile(0.99, sum by (le, webhook) "
                        f"(rate(operator_admission_duration_seconds_bucket{RATE})))",
                        "{{webhook}}",
                    )
                ],
                "the API server waits 5 s at most",
            ),
        ],
    ),
    (
        "Training",
        [
            (
                "Epochs per minute",
                "none",
                [
                    (
                        f"sum by (namespace, trainer) (rate(training_epochs_total{RATE})) * 60",
                        "{{namespace}}/{{trainer}}",
                    )
                ],
                "training_epochs_total (seed README), from the pods' heartbeats",
            ),
            (
                "Pods created per hour",
                "none",
                [("sum by (role) (increase(trainer_pods_created_total[1h]))", "{{role}}")],
                "",
            ),
            (
                "Worker restarts per hour",
                "none",
                [("sum by (role) (increase(trainer_worker_restarts_total[1h]))", "{{role}}")],
                "worker_restart_count (seed README)",
            ),
            (
                "Pod spawn latency p95",
                "s",
                [
                    (
                        f"histogram_quantile(0.95, sum by (le, stage) (rate(trainer_pod_spawn_seconds_bucket{RATE})))",
                        "{{stage}}",
                    )
                ],
                "creation to scheduled, and to the training container running",
            ),
        ],
    ),
    (
        "Quota",
        [
            ("Admitted runs", "none", [("quota_admitted_trainers", "{{capacity_type}}")], ""),
            ("Runs waiting for quota", "none", [("quota_pending_trainers", "pending")], ""),
            (
                "Spot renegotiation p95",
                "s",
                [
                    (
                        f"histogram_quantile(0.95, sum by (le) (rate(quota_renegotiation_seconds_bucket{RATE})))",
                        "p95",
                    )
                ],
                "from a spot reclaim to the new admission",
            ),
            (
                "Admission plan duration p95",
                "s",
                [(f"histogram_quantile(0.95, sum by (le) (rate(quota_plan_seconds_bucket{RATE})))", "p95")],
                "",
            ),
            (
                "Cost per hour",
                "currencyUSD",
                [("sum by (basis) (quota_cost_per_hour)", "{{basis}}")],
                "admitted runs at the policies' prices, and the same all on-demand",
            ),
        ],
    ),
    (
        "Checkpoints",
        [
            (
                "Commits and failures per hour",
                "none",
                [
                    ("increase(checkpoint_commits_total[1h])", "committed"),
                    ("sum by (reason) (increase(checkpoint_failures_total[1h]))", "failed: {{reason}}"),
                    ("increase(checkpoint_collected_total[1h])", "garbage-collected"),
                    ("sum by (phase) (increase(checkpoint_save_requests_total[1h]))", "saves asked: {{phase}}"),
                ],
                "",
            ),
            (
                "Checkpoint write time p95",
                "s",
                [(f"histogram_quantile(0.95, sum by (le) (rate(checkpoint_write_seconds_bucket{RATE})))", "write")],
                "as the training pods report it, per shard",
            ),
            (
                "Checkpoint commit time p95",
                "s",
                [(f"histogram_quantile(0.95, sum by (le) (rate(checkpoint_commit_seconds_bucket{RATE})))", "commit")],
                "from the Checkpoint's creation to its quorum",
            ),
            (
                "Copies verified per hour",
                "none",
                [("sum by (verdict) (increase(checkpoint_copies_verified_total[1h]))", "{{verdict}}")],
                "",
            ),
            (
                "Copy verification time p95",
                "s",
                [(f"histogram_quantile(0.95, sum by (le) (rate(checkpoint_verify_seconds_bucket{RATE})))", "p95")],
                "",
            ),
            (
                "Storage pods per hour",
                "none",
                [
                    (
                        "sum by (purpose, outcome) (increase(checkpoint_storage_pods_total[1h]))",
                        "{{purpose}} {{outcome}}",
                    )
                ],
                "verifier and collector pods on PersistentVolumeClaims",
            ),
        ],
    ),
    (
        "Audit and notifications",
        [
            (
                "Audit records per hour",
                "none",
                [
                    ("sum by (source) (increase(audit_records_total[1h]))", "{{source}}"),
                    ("increase(audit_records_pruned_total[1h])", "pruned"),
                ],
                "",
            ),
            (
                "Audit webhook per second",
                "reqps",
                [
                    (
                        f"sum by (outcome) (rate(audit_webhook_requests_total{RATE}))",
                        "{{outcome}}",
                    ),
                    (f"rate(audit_webhook_records_lost_total{RATE})", "lost"),
                ],
                "lost: a user's request that could not be recorded",
            ),
            (
                "Notifications per hour",
                "none",
                [("sum by (event, outcome) (increase(audit_notifications_total[1h]))", "{{event}} {{outcome}}")],
                "",
            ),
        ],
    ),
    (
        "Image verification",
        [
            (
                "Image checks per hour",
                "none",
                [("sum by (result) (increase(verify_image_checks_total[1h]))", "{{result}}")],
                "refused: a run held (Enforce) or warned about; unreachable: its registry did not answer",
            ),
            (
                "Registry request time p95",
                "s",
                [
                    (
                        "histogram_quantile(0.95, sum by (le, read) "
                        f"(rate(verify_registry_request_seconds_bucket{RATE})))",
                        "{{read}}",
                    )
                ],
                "a tag's digest, a signature manifest, a signature payload",
            ),
        ],
    ),
]


def dashboard() -> dict[str, Any]:
    panels: list[dict[str, Any]] = []
    y, next_id = 0, 1
    for row, items in ROWS:
        panels.append(
            {
                "type": "row",
                "title": row,
                "id": next_id,
                "collapsed": False,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
            }
        )
        next_id, y = next_id + 1, y + 1
        for i, (title, unit, queries, description) in enumerate(items):
            panels.append(
                {
                    "type": "timeseries",
                    "title": title,
                    "description": description,
                    "id": next_id,
                    "datasource": {"type": "prometheus", "uid": "${datasource}"},
                    "gridPos": {"h": 8, "w": 8, "x": (i % 3) * 8, "y": y + (i // 3) * 8},
                    "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
                    "options": {"legend": {"displayMode": "list", "placement": "bottom"}},
                    "targets": [
                        {
                            "refId": chr(ord("A") + k),
                            "datasource": {"type": "prometheus", "uid": "${datasource}"},
                            "expr": expr,
                            "legendFormat": legend,
                        }
                        for k, (expr, legend) in enumerate(queries)
                    ],
                }
            )
            next_id += 1
        y += ((len(items) + 2) // 3) * 8
    return {
        "title": "Trainer Operator",
        "uid": "trainer-operator",
        "description": "The Trainer Operator's controllers, runs, quota, checkpoints and audit (docs/metrics.md)",
        "tags": ["trainer-operator", "kubernetes", "ml-training"],
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "timezone": "browser",
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Prometheus",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                    "hide": 0,
                }
            ]
        },
        "annotations": {"list": []},
        "panels": panels,
    }


def render() -> str:
    return json.dumps(dashboard(), indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="fail if the committed dashboard is stale")
    args = parser.parse_args(argv)
    if args.check:
        if not OUT.exists() or OUT.read_text() != render():
            print(f"{OUT} is stale: run python deploy/dashboards/generate.py", file=sys.stderr)
            return 1
        return 0
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(render())
    print(f"wrote {OUT} ({sum(1 for p in dashboard()['panels'] if p['type'] != 'row')} panels)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
