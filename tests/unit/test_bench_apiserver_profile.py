"""The API server's profile folded into the parts a training operator's requests reach
(bench/measure.py, ``apiserver_parts``), from ``go tool pprof -top -cum`` as it prints."""

from __future__ import annotations

import pytest

from bench.measure import apiserver_parts, pprof_seconds

CRD, HANDLERS = "k8s.io/apiextensions-apiserver/pkg", "k8s.io/apiserver/pkg/endpoints/handlers"
ENTRIES = [  # cum, cum%, function
    ("13.04s", "20.10%", "runtime.mallocgc"),
    ("12.72s", "19.61%", f"{CRD}/registry/customresource.(*StatusREST).Update"),
    ("9.17s", "14.13%", "runtime.gcBgMarkWorker"),
    ("9.15s", "14.10%", "runtime.gcBgMarkWorker.func2"),
    ("8.15s", "12.56%", f"{HANDLERS}.CreateResource.createHandler.func1.2"),
    ("5.71s", "8.80%", f"{HANDLERS}.CreateResource.createHandler.func1.1"),
    ("1.05s", "1.62%", f"{HANDLERS}.CreateNamedResource.createHandler.func1.2"),
    ("2.58s", "3.98%", f"{CRD}/apiserver.(*crdHandler).serveResource.CreateResource.createHandler.func9.2"),
]
TOP = "\n".join(
    [
        "File: kube-apiserver",
        "Type: cpu",
        "Duration: 60.21s, Total samples = 64.88s (107.76%)",
        "      flat  flat%   sum%        cum   cum%",
        *(f"         0     0%  1.11%  {cum:>9} {share:>6}  {name}" for cum, share, name in ENTRIES),
    ]
)


def test_each_part_is_its_largest_entry_and_unlisted_parts_are_left_out() -> None:
    parts = apiserver_parts(TOP, 60)
    assert parts["seconds"] == 60
    assert parts["cpu_seconds_sampled"] == 64.88
    assert {p["part"]: p["percent"] for p in parts["parts"]} == {
        "custom resources' status writes (the Trainers')": 19.61,
        "creates of built-in kinds (pods, Services, Events)": 12.56,  # its closure's largest, not 8.80
        "creates of custom resources (Trainers, AuditLogs)": 3.98,  # not counted as a built-in create
        "garbage collection, in the background": 14.13,
    }


def test_an_empty_profile_names_no_part() -> None:
    assert apiserver_parts("", 5) == {"seconds": 5, "cpu_seconds_sampled": 0.0, "parts": []}


@pytest.mark.parametrize(
    ("printed", "seconds"),
    [("64.88s", 64.88), ("550ms", 0.55), ("1.2mins", 72.0), ("250us", 0.0), ("2hrs", 7200.0)],
)
def test_pprof_durations_are_read_in_their_unit(printed: str, seconds: float) -> None:
    assert pprof_seconds(printed) == seconds


def test_a_short_profile_totals_in_milliseconds() -> None:
    top = TOP.replace("Total samples = 64.88s (107.76%)", "Total samples = 550ms ( 9.16%)")
    assert apiserver_parts(top, 5)["cpu_seconds_sampled"] == 0.55
