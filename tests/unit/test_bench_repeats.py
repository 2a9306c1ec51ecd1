"""The benchmark's repetitions: medians and ranges, the paired share of the ceiling, pooled ramp
replacements, and the report's single-run fallback (bench/repeats.py)."""

from __future__ import annotations

from typing import Any

import pytest

from bench.kubeflow import reach
from bench.measure import Stalled
from bench.repeats import figure, merged, order, record_kubeflow, record_throughput, spread_text
from bench.report import kubeflow_lines, pytorchjob_lines, recovery_lines


def run(created: float, running: float, ceiling: tuple[float, float], ramp: list[float]) -> dict[str, Any]:
    """One throughput repetition as the suite returns it."""
    return {
        "operator": {
            "all_trainers_created_seconds": created / 2,
            "all_pods_created_seconds": created,
            "all_pods_running_seconds": running,
            "all_trainers_running_seconds": running + 1,
            "memory_mib": {"trainer": 100.0},
            "replacements_during_ramp": {
                "created_samples": ramp,
                "running_samples": [x + 1 for x in ramp],
                "stage_samples": {"deletion_seen": [x / 2 for x in ramp]},
            },
        },
        "ceiling": {"all_pods_created_seconds": ceiling[0], "all_pods_running_seconds": ceiling[1], "pods": 8},
    }


def test_three_repetitions_give_median_range_and_paired_shares() -> None:
    first = run(100, 200, (20, 40), [0.1, 0.2])
    record_throughput(first, first)
    record_throughput(first, run(120, 180, (30, 60), [0.3]))
    record_throughput(first, run(80, 220, (10, 44), []))

    assert figure(first, "operator", "all_pods_created_seconds") == 100
    assert spread_text(first, "operator", "all_pods_running_seconds") == "200 (180 to 220, 3 runs)"
    # paired: 20/100, 30/120, 10/80 -> 0.2, 0.25, 0.125; the median of the pairs, not 20/100
    assert first["median"]["of_ceiling"]["created"]["values"] == [0.2, 0.25, 0.125]
    assert spread_text(first, "of_ceiling", "created") == "0.2 (0.125 to 0.25, 3 runs)"
    ramp = first["operator"]["replacements_during_ramp"]
    assert (ramp["failures"], ramp["ramps"], ramp["replacement_created_seconds"]["max"]) == (3, 3, 0.3)
    # each stage pooled over the ramps as well
    assert (ramp["stages_seconds"]["deletion_seen"]["count"], ramp["stages_seconds"]["deletion_seen"]["max"]) == (
        3,
        0.15,
    )
    # and reported under the replacement's own row
    lines = recovery_lines({"throughput": {"1000": first}})
    row = lines.index(next(x for x in lines if "during the N = 1000 ramp" in x))
    assert lines[row + 1].startswith("| … of which then the failed pod's deletion seen (its delete) | 3 |")
    # the first repetition's whole result stays: its memory is the one reported
    assert first["operator"]["memory_mib"] == {"trainer": 100.0}


def test_a_ramp_whose_replacements_were_created_but_none_running_is_recorded() -> None:
    """The probe's replacements were created, none Running before the ramp ended: the run's
    figures are kept (an N = 1000 run lost them all at this point)."""
    only = run(100, 200, (20, 40), [0.1, 0.2])
    only["operator"]["replacements_during_ramp"]["running_samples"] = []
    record_throughput(only, only)
    ramp = only["operator"]["replacements_during_ramp"]
    assert (ramp["replacement_created_seconds"]["count"], ramp["replacement_running_seconds"]) == (2, None)
    assert any("during the N = 1000 ramp" in x for x in recovery_lines({"throughput": {"1000": only}}))


@pytest.mark.parametrize(
    ("path", "single"),
    [
        (("operator", "all_pods_created_seconds"), 100),
        (("ceiling", "all_pods_running_seconds"), 40),
    ],
)
def test_a_result_without_repetitions_reads_as_its_one_run(path: tuple[str, ...], single: float) -> None:
    one = run(100, 200, (20, 40), [])
    assert figure(one, *path) == single
    assert spread_text(one, *path) == str(single)


def test_one_repetition_shows_no_range() -> None:
    one = run(100, 200, (20, 40), [])
    record_throughput(one, one)
    assert spread_text(one, "operator", "all_pods_created_seconds") == "100.0"


def test_kubeflow_repetitions() -> None:
    times = (
        "all_jobs_created_seconds",
        "all_pods_created_seconds",
        "all_pods_running_seconds",
        "all_jobs_running_seconds",
    )
    first = dict(zip(times, (5.0, 50.0, 90.0, 95.0), strict=True)) | {"memory_mib": 60.0}
    record_kubeflow(first, first)
    record_kubeflow(first, dict(zip(times, (7.0, 70.0, 80.0, 85.0), strict=True)))
    assert spread_text(first, "all_pods_created_seconds") == "60 (50 to 70, 2 runs)"
    assert figure(first, "all_jobs_running_seconds") == 90


def test_every_size_runs_once_before_any_is_repeated() -> None:
    assert order([100, 1000], 2) == [(0, 100), (0, 1000), (1, 100), (1, 1000)]


def test_runs_made_apart_are_plotted_together_each_size_from_the_first_run_that_has_it() -> None:
    full = {"label": "full", "machine": {"cores": 2}, "throughput": {"100": "a", "1000": "b"}, "kubeflow": {"100": "k"}}
    more = {"label": "growth", "machine": {"cores": 2}, "throughput": {"1000": "other", "3000": "c"}}
    together = merged([full, more])
    assert together["throughput"] == {"100": "a", "1000": "b", "3000": "c"}
    assert together["kubeflow"] == {"100": "k"}
    assert (together["label"], together["machine"]) == ("full + growth", {"cores": 2})


def test_kubeflow_waits_after_a_stall_are_recorded_as_stalled_not_lost() -> None:
    """Kubeflow's operator left 3 of 1000 jobs short of Running: the times reached are kept."""

    def stalls() -> float:
        raise Stalled("kubeflow: PyTorchJobs Running: 997 of 1000 after 180 s without progress")

    reached, stalled = reach(
        {"all_pods_created_seconds": lambda: 40.0, "all_jobs_running_seconds": stalls, "later": lambda: 1.0}
    )
    assert reached == {"all_pods_created_seconds": 40.0, "all_jobs_running_seconds": None, "later": None}
    assert stalled == "kubeflow: PyTorchJobs Running: 997 of 1000 after 180 s without progress"
    assert reach({"all_pods_created_seconds": lambda: 40.0}) == ({"all_pods_created_seconds": 40.0}, None)


@pytest.mark.parametrize(
    ("running", "shown", "median"),
    [
        ((95.0, None, 85.0), "95 (85 to stalled, 3 runs)", 95.0),  # a stall ranks slower than any time
        ((95.0, None, None), "stalled (95 to stalled, 3 runs)", None),
    ],
)
def test_a_stalled_kubeflow_repetition_ranks_slowest(
    running: tuple[float | None, ...], shown: str, median: float | None
) -> None:
    times = ("all_jobs_created_seconds", "all_pods_created_seconds", "all_pods_running_seconds")
    reps: list[dict[str, Any]] = [
        {**dict(zip(times, (5.0, 50.0, 85.0), strict=True)), "all_jobs_running_seconds": r} for r in running
    ]
    first = reps[0] | {"memory_mib": 60.0, "writes_to_running_per_job": 18.0, "conflicts_409": 0, "stalled": None}
    for rep in reps:
        record_kubeflow(first, rep)
    assert figure(first, "all_jobs_running_seconds") == median
    assert spread_text(first, "all_jobs_running_seconds") == shown


def test_the_report_says_which_kubeflow_wait_stalled() -> None:
    stall = "kubeflow: PyTorchJobs Running: 997 of 1000 after 180 s without progress"
    kf = {
        "all_jobs_created_seconds": 20.0,
        "all_pods_created_seconds": 400.0,
        "all_pods_running_seconds": 401.0,
        "all_jobs_running_seconds": None,
        "memory_mib": 200.0,
        "writes_to_running_per_job": 18.0,
        "conflicts_409": 0,
        "stalled": stall,
    }
    record_kubeflow(kf, kf)
    record_kubeflow(kf, kf | {"all_jobs_running_seconds": 430.0, "stalled": None})
    record_kubeflow(kf, kf | {"stalled": stall.replace("997", "998")})
    lines = kubeflow_lines({"kubeflow": {"1000": kf}})
    row = next(x for x in lines if x.startswith("| 1000 |"))
    assert row.split(" | ")[1:4] == [
        "400 (400 to 400, 3 runs)",
        "401 (401 to 401, 3 runs)",
        "stalled (430 to stalled, 3 runs)",
    ]
    assert [x for x in lines if x.startswith("- ")] == [
        f"- N = 1000, repetition 1: {stall} (that time and the later ones: stalled)",
        f"- N = 1000, repetition 3: {stall.replace('997', '998')} (that time and the later ones: stalled)",
    ]


def test_the_same_pytorchjobs_through_ours_are_compared_with_kubeflows_run_of_them() -> None:
    def job_run(created: float, running: float, jobs: float | None, memory: Any) -> dict[str, Any]:
        return {
            "all_jobs_created_seconds": 5.0,
            "all_pods_created_seconds": created,
            "all_pods_running_seconds": running,
            "all_jobs_running_seconds": jobs,
            "memory_mib": memory,
            "writes_to_running_per_job": 14.0,
            "conflicts_409": 0,
            "stalled": None,
        }

    kf = job_run(40.0, 41.0, None, 200.0)  # Kubeflow's jobs never all Running: no ratio there
    record_kubeflow(kf, kf)
    ours = job_run(10.0, 20.5, 21.0, {"trainer": 110.0, "kubeflow": 60.25})
    record_kubeflow(ours, ours)
    lines = pytorchjob_lines({"pytorchjobs": {"100": ours}, "kubeflow": {"100": kf}})
    row = next(x for x in lines if x.startswith("| 100 |"))
    assert row.split(" | ")[4:8] == ["4.00", "2.00", "-", "60.2, 110.0"]
    assert pytorchjob_lines({"kubeflow": {"100": kf}}) == []  # the phase did not run
