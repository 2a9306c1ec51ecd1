"""Proactive mode's predictor (trainerop_quota.proactive) on recorded traces: readings 30 s apart,
played one evaluation at a time as the controller would."""

from collections.abc import Sequence
from typing import Any

import pytest

from trainerop_quota.config import QuotaConfig
from trainerop_quota.node_queries import by_node, queries, vector
from trainerop_quota.node_readings import reading, scraped
from trainerop_quota.proactive import DEFAULT_RULES, PREDICTED_TAINT, NodeState, Reading, Signal, assess
from trainerop_quota.proactive_nodes import Watched, change, node_message, observe, taints_after

STEP = 30.0


def trace(signal: Signal, values: Sequence[float], temperature: float | None = None) -> list[Reading]:
    """Readings of one signal, 30 s apart (and a steady temperature, if given)."""
    steady: dict[Signal, float] = {} if temperature is None else {"temperature": temperature}
    return [Reading(i * STEP, {**steady, signal: v}) for i, v in enumerate(values)]


def play(readings: Sequence[Reading]) -> tuple[list[bool], NodeState]:
    """Whether the node is predicted after each evaluation, and its last state."""
    state, out = NodeState(), []
    for i in range(len(readings)):
        state = assess(readings[: i + 1], state)
        out.append(state.predicted)
    return out, state


def first(flags: Sequence[bool], value: bool = True, start: int = 0) -> int | None:
    return next((i for i in range(start, len(flags)) if flags[i] == value), None)


RAMP = [60.0 + 2 * i for i in range(20)]  # 4 °C a minute; crosses 85 at reading 13
COOLED = [*RAMP[:10], *[60.0] * 12]
HOVERING = [*RAMP[:10], *[83.0, 84.0, 82.0, 84.0] * 4]
FLAPPING = [50.0, 95.0] * 10  # a sensor that reads either
ONE_SPIKE = [50.0] * 8 + [99.0] + [50.0] * 8
XID = [0.0] * 6 + [79.0, 0.0, 79.0, 79.0] + [0.0] * 4
LOAD_STEP = [70.0] * 8 + [82.0, 81.0, 83.0, 82.0, 81.5, 82.5] * 2  # a job starts: a new level, not a runaway
FLAP_NEAR = [67.0] * 6 + [92.5, 67.5, 93.4, 68.7, 67.9, 68.0] + [68.0] * 6  # a sensor flaps twice
ECC = [0.0] * 5 + [1.0] * 5

TRACES: list[tuple[str, list[Reading], int | None, int | None]] = [
    # (case, readings, the reading at which the node is predicted, the one at which it clears)
    ("thermal ramp: predicted from the trend, before the line is crossed", trace("temperature", RAMP), 6, None),
    # cooled from reading 10; the median is cool from 11; the fifth cool evaluation is 15
    ("ramp, then cooled: cleared after five cool evaluations", trace("temperature", COOLED), 6, 15),
    ("ramp, then hovering just under the line: kept (hysteresis)", trace("temperature", HOVERING), 6, None),
    ("a flapping sensor: never two hot evaluations in a row", trace("temperature", FLAPPING), None, None),
    ("one spike: the median ignores it", trace("temperature", ONE_SPIKE), None, None),
    ("an XID burst: three in the window, at once", trace("xid", XID, temperature=60.0), 9, None),
    ("a double-bit ECC error: at once", trace("ecc", ECC, temperature=60.0), 5, None),
    ("steady and cool: nothing", trace("temperature", [70.0] * 20), None, None),
    (
        "a step to a new level under the line: no line fits it, nothing projected",
        trace("temperature", LOAD_STEP),
        None,
        None,
    ),
    ("a sensor that flaps twice: its trend is not projected", trace("temperature", FLAP_NEAR), None, None),
]


@pytest.mark.parametrize(("case", "readings", "predicted", "cleared"), TRACES, ids=[t[0] for t in TRACES])
def test_recorded_traces(case: str, readings: list[Reading], predicted: int | None, cleared: int | None) -> None:
    flags, _ = play(readings)
    at = first(flags)
    assert at == predicted
    assert (None if at is None else first(flags, False, at)) == cleared


def test_the_thermal_ramp_is_predicted_minutes_before_it_crosses_the_threshold() -> None:
    flags, _ = play(trace("temperature", RAMP))
    crossed = next(i for i, v in enumerate(RAMP) if v >= DEFAULT_RULES.limits["temperature"].threshold)
    lead = (crossed - (first(flags) or 0)) * STEP
    assert lead >= 180, f"predicted {lead:.0f} s before the crossing"


def test_the_reason_names_the_signal_its_readings_and_the_prediction() -> None:
    _, state = play(trace("temperature", RAMP[:7]))
    assert state.predicted
    assert state.reason == "temperature 68, 70, 72 °C (median 70), rising 4 °C/min: 90 in 5 min ≥ 85"


# What a node's DCGM exporter and node exporter serve (their metric names and labels), two GPUs.
EXPOSITION = """\
# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).
# TYPE DCGM_FI_DEV_GPU_TEMP gauge
DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-a",Hostname="gpu-node-1",modelName="NVIDIA H100 80GB HBM3"} 71
DCGM_FI_DEV_GPU_TEMP{gpu="1",UUID="GPU-b",Hostname="gpu-node-1",modelName="NVIDIA H100 80GB HBM3"} 78
# HELP DCGM_FI_DEV_MEM_COPY_UTIL Memory utilization (in %).
# TYPE DCGM_FI_DEV_MEM_COPY_UTIL gauge
DCGM_FI_DEV_MEM_COPY_UTIL{gpu="0",UUID="GPU-a",Hostname="gpu-node-1"} 40
DCGM_FI_DEV_MEM_COPY_UTIL{gpu="1",UUID="GPU-b",Hostname="gpu-node-1"} 97
# HELP DCGM_FI_DEV_XID_ERRORS Value of the last XID error encountered.
# TYPE DCGM_FI_DEV_XID_ERRORS gauge
DCGM_FI_DEV_XID_ERRORS{gpu="0",UUID="GPU-a",Hostname="gpu-node-1"} 0
DCGM_FI_DEV_XID_ERRORS{gpu="1",UUID="GPU-b",Hostname="gpu-node-1"} 79
# HELP DCGM_FI_DEV_ECC_DBE_VOL_TOTAL Total number of double-bit volatile ECC errors.
# TYPE DCGM_FI_DEV_ECC_DBE_VOL_TOTAL counter
DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{gpu="0",UUID="GPU-a",Hostname="gpu-node-1"} 1
DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{gpu="1",UUID="GPU-b",Hostname="gpu-node-1"} 2
# HELP node_pressure_memory_waiting_seconds_total Total time in seconds that processes have waited for memory
# TYPE node_pressure_memory_waiting_seconds_total counter
node_pressure_memory_waiting_seconds_total 120.5
# HELP node_load1 1m load average.
# TYPE node_load1 gauge
node_load1 3.2
"""


def test_exporters_text_is_read_as_the_node_s_reading() -> None:
    samples = scraped(EXPOSITION)
    assert reading(60.0, samples, None) == Reading(
        60.0, {"temperature": 78.0, "memoryCopy": 97.0, "xid": 79.0, "ecc": 3.0}
    )
    # The pressure counter grew 6 s in 30 s: a fifth of the time stalled.
    assert reading(60.0, samples, (114.5, 30.0)).values["memoryPressure"] == pytest.approx(0.2)
    assert "memoryPressure" not in reading(60.0, samples, (200.0, 30.0)).values  # reset: no rate yet


def test_text_that_is_not_the_exposition_format_is_refused() -> None:
    with pytest.raises(ValueError, match="not the Prometheus exposition format"):
        scraped("DCGM_FI_DEV_GPU_TEMP{gpu=0 71\n")


def answer(*items: tuple[dict[str, str], str]) -> dict[str, Any]:
    """A Prometheus server's instant vector answer (/api/v1/query)."""
    result = [{"metric": metric, "value": [1764921600.5, value]} for metric, value in items]
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


def test_a_prometheus_server_is_asked_for_each_metric_folded_per_node_as_a_scrape_is() -> None:
    asked = queries("node")
    assert asked["DCGM_FI_DEV_GPU_TEMP"] == "max by (node) (DCGM_FI_DEV_GPU_TEMP)"
    assert asked["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"] == "sum by (node) (DCGM_FI_DEV_ECC_DBE_VOL_TOTAL)"
    # the pressure counter as its rate: the server knows when each sample was scraped
    rate = "node_pressure_memory_waiting_seconds:rate"
    assert asked[rate] == "sum by (node) (rate(node_pressure_memory_waiting_seconds_total[2m]))"
    scraped_families = set(scraped(EXPOSITION)) - {"node_pressure_memory_waiting_seconds"}
    assert set(asked) == scraped_families | {"DCGM_FI_DEV_POWER_USAGE", rate}  # every metric a scrape reads
    temperatures = answer(({"node": "gpu-node-1"}, "78"), ({"node": "gpu-node-2"}, "61"), ({}, "99"))
    temperatures["data"]["result"] += [{"metric": {"node": "gpu-node-3"}, "value": [1.0, "NaN"]}, "junk"]
    xids = answer(({"node": "gpu-node-1"}, "79"))
    stalls = answer(({"node": "gpu-node-1"}, "0.25"))
    answers = {"DCGM_FI_DEV_GPU_TEMP": temperatures, "DCGM_FI_DEV_XID_ERRORS": xids, rate: stalls}
    found = by_node({family: vector(answered, "node") for family, answered in answers.items()})
    assert found == {  # a series without the node's label, a NaN or an item that is not one names nothing
        "gpu-node-1": {"DCGM_FI_DEV_GPU_TEMP": 78.0, "DCGM_FI_DEV_XID_ERRORS": 79.0, rate: 0.25},
        "gpu-node-2": {"DCGM_FI_DEV_GPU_TEMP": 61.0},
    }
    expected = Reading(60.0, {"temperature": 78.0, "xid": 79.0, "memoryPressure": 0.25})
    assert reading(60.0, found["gpu-node-1"], None) == expected


@pytest.mark.parametrize(
    "refused",
    [
        {"status": "error", "errorType": "bad_data", "error": "parse error"},
        {"status": "success", "data": {"resultType": "matrix", "result": []}},
        {"status": "success"},
        {"status": "success", "data": {"resultType": "vector", "result": None}},
        ["not", "an", "answer"],
    ],
)
def test_an_answer_that_is_not_an_instant_vector_is_refused(refused: Any) -> None:
    with pytest.raises(ValueError, match="not a successful instant vector answer"):
        vector(refused, "node")


def dcgm(temperature: float) -> dict[str, float]:
    """What a scrape of one node's DCGM exporter folds into (the hottest GPU)."""
    return {"DCGM_FI_DEV_GPU_TEMP": temperature}


def test_a_node_watched_scrape_by_scrape_is_predicted_then_cleared() -> None:
    watched, changes = Watched(), []
    for i, value in enumerate(COOLED):
        after = observe(watched, i * STEP, dcgm(value))
        changes.append(change(watched.state, after.state))
        watched = after
        assert len(watched.history) <= DEFAULT_RULES.window  # the window, not the whole past
    assert [(i, c) for i, c in enumerate(changes) if c] == [(6, "predicted"), (15, "cleared")]


def test_memory_pressure_is_the_counter_s_rate_between_scrapes() -> None:
    w = observe(Watched(), 0.0, {"node_pressure_memory_waiting_seconds": 100.0})
    assert "memoryPressure" not in w.history[-1].values  # one reading of a counter is no rate
    w = observe(w, 30.0, {"node_pressure_memory_waiting_seconds": 106.0})
    assert w.history[-1].values["memoryPressure"] == pytest.approx(0.2)
    w = observe(w, 60.0, {})  # the node exporter did not answer: the last counter is kept
    assert w.pressure == (106.0, 30.0)


OTHER = {"key": "trainer.operator.kubeflow.org/reclaim", "value": "notice", "effect": "NoSchedule"}
GPU = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("taints", "predicted", "want"),
    [
        ([GPU], True, [GPU, PREDICTED_TAINT]),
        ([GPU, PREDICTED_TAINT], True, None),  # already so: no write
        ([GPU, PREDICTED_TAINT], False, [GPU]),
        ([GPU], False, None),
        ([OTHER], False, None),  # a reclaim notice someone else set is never removed
        ([OTHER], True, None),  # it stands for ours (one taint per key and effect: the API server's rule)
    ],
)
def test_only_the_taint_proactive_mode_sets_is_added_or_removed(
    taints: list[dict[str, str]], predicted: bool, want: list[dict[str, str]] | None
) -> None:
    assert taints_after(taints, predicted) == want


def test_the_node_event_says_what_predicted_it_and_what_follows() -> None:
    state = NodeState(predicted=True, reason="GPU temperature 80 °C rising 4 °C/min")
    assert node_message("n1", state) == (
        "node n1 is predicted to degrade: GPU temperature 80 °C rising 4 °C/min; tainted "
        "trainer.operator.kubeflow.org/reclaim=predicted:NoSchedule so nothing new lands on it, and the runs on it "
        "save a checkpoint and move"
    )
    assert node_message("n1", NodeState()) == (
        "node n1 reads cool again: taint trainer.operator.kubeflow.org/reclaim=predicted removed"
    )


def test_a_predicted_node_whose_gpu_readings_stop_stays_predicted() -> None:
    """The DCGM exporter dies (often with the GPU) while the node exporter still answers: the
    temperature that predicted the node is unknown, not cool, so the taint stays."""
    watched = Watched()
    for i, value in enumerate(RAMP[:8]):
        watched = observe(watched, i * STEP, dcgm(value))
    assert watched.state.predicted
    assert watched.state.signals == ("temperature",)
    for i in range(8, 30):
        watched = observe(watched, i * STEP, {"node_pressure_memory_waiting_seconds": 1.0})
    assert watched.state.predicted
    for i in range(30, 45):  # read again, and cool: cleared
        watched = observe(watched, i * STEP, dcgm(60.0))
    assert not watched.state.predicted


@pytest.mark.parametrize(
    ("settings", "problem"),
    [
        ({}, None),
        ({"proactive_prometheus_url": "http://prometheus-k8s.monitoring.svc:9090"}, None),
        ({"proactive_prometheus_url": "prometheus-k8s:9090"}, "--proactive-prometheus-url must be an http://"),
        ({"proactive_node_labels": ("pool",)}, "--proactive-node-labels takes label=value pairs"),
        ({"proactive_interval_seconds": 0.0}, "--proactive-interval-seconds must be more than 0"),
        ({"proactive_prometheus_node_label": "kubernetes.io/hostname"}, "--proactive-prometheus-node-label must be"),
    ],
)
def test_proactive_flags_that_cannot_work_are_refused_with_what_to_write(
    settings: dict[str, Any], problem: str | None
) -> None:
    problems = QuotaConfig(**settings).problems()
    if problem is None:
        assert problems == []
    else:
        (said,) = problems
        assert said.startswith(problem)
