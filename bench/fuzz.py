#!/usr/bin/env python3
"""Fuzzing at length (issue 20): thousands of generated Trainer, TrainingProfile and QuotaPolicy
specs (tests/fuzzing.py) through the real API server (dry run: schema, CEL, the operator's
webhooks) and the controllers' decisions. Prints, per kind, how many were accepted and refused,
the refusals that name no field and the decisions that crashed (each should be 0), and writes
bench/results/fuzz.json (--out).

    python bench/fuzz.py [--examples 2000]

Uses the cluster in $KUBECONFIG, else brings the local cluster up (and down again)."""

from __future__ import annotations

import argparse
import json
import sys
import traceback
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.measure import machine
from bench.setup import operator_running
from tests import fuzzing
from tests.harness import Cluster
from tests.integration.test_fuzz import dry_run, valid_trainer

REPO = Path(__file__).resolve().parent.parent


def run_kind(
    c: Cluster,
    kind: str,
    specs: st.SearchStrategy[dict[str, Any]],
    decide: Callable[[dict[str, Any]], None],
    namespace: str | None,
    examples: int,
) -> dict[str, Any]:
    counts: Counter[str] = Counter()
    samples: dict[str, list[str]] = {"unnamed_refusals": [], "crashes": []}

    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(spec=specs)
    def one(spec: dict[str, Any]) -> None:
        name = "fuzz" if namespace else f"fuzz-{uuid.uuid4().hex[:6]}"
        result = dry_run(c, fuzzing.manifest(kind, name, spec, namespace))
        if isinstance(result, str):
            counts["refused"] += 1
            if not fuzzing.names_a_field(result):
                counts["unnamed_refusals"] += 1
                samples["unnamed_refusals"].append(result[-300:])
            return
        counts["accepted"] += 1
        try:
            decide(result)
        except Exception:  # counted and shown: the figure the run exists for
            counts["crashes"] += 1
            samples["crashes"].append(traceback.format_exc()[-600:])
        if sum(counts.values()) % 200 == 0:
            print(f"  {kind}: {dict(counts)}", file=sys.stderr, flush=True)

    one()
    return {"counts": dict(counts), "samples": {k: v[:5] for k, v in samples.items()}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--examples", type=int, default=2000, help="examples of each kind")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "fuzz.json")
    args = p.parse_args(argv)
    with operator_running() as c:
        namespace = f"fuzz-{uuid.uuid4().hex[:6]}"
        c.kubectl("create", "namespace", namespace)
        c.kubectl("label", "namespace", namespace, "team=a")
        trainer = valid_trainer(namespace)
        kinds = {
            "Trainer": (fuzzing.trainer_specs, fuzzing.decide_trainer, namespace),
            "TrainingProfile": (fuzzing.profile_specs, lambda body: fuzzing.decide_profile(trainer, body), namespace),
            "QuotaPolicy": (fuzzing.policy_specs, lambda body: fuzzing.decide_quota(trainer, body), None),
        }
        results = {}
        for kind, (specs, decide, ns) in kinds.items():
            print(f"== {kind}: {args.examples} generated specs", file=sys.stderr, flush=True)
            results[kind] = run_kind(c, kind, specs, decide, ns, args.examples)
        c.kubectl("delete", "namespace", namespace, "--wait=false")
    text = json.dumps({"machine": machine(), "examples_per_kind": args.examples, "kinds": results}, indent=1)
    args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
