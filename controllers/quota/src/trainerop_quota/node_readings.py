"""A node's metrics, as its exporters serve them in the Prometheus exposition format, read into
the predictor's readings (pure; docs/design/disruption.md, decision 4).

DCGM exporter (NVIDIA's, one sample per GPU): the hottest GPU's temperature, memory copy
utilisation and power, the last XID code any GPU reported, the double-bit ECC errors of all GPUs
together. Node exporter: the time some task stalled on memory (pressure stall information), a
counter turned into the share of time between two scrapes.
"""

from collections.abc import Mapping
from typing import Literal

from prometheus_client.parser import text_string_to_metric_families

from .proactive import Reading, Signal

Fold = Literal["max", "sum"]
SAMPLES: Mapping[str, tuple[Signal, Fold]] = {
    "DCGM_FI_DEV_GPU_TEMP": ("temperature", "max"),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("memoryCopy", "max"),
    "DCGM_FI_DEV_POWER_USAGE": ("power", "max"),
    "DCGM_FI_DEV_XID_ERRORS": ("xid", "max"),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": ("ecc", "sum"),
}
PRESSURE = "node_pressure_memory_waiting_seconds"  # a counter (served with the suffix _total)
PRESSURE_RATE = f"{PRESSURE}:rate"  # that counter's rate, as a Prometheus server computes it (node_queries)
FOLDS: Mapping[str, Fold] = {name: fold for name, (_, fold) in SAMPLES.items()} | {PRESSURE: "sum"}


def scraped(text: str) -> dict[str, float]:
    """The metrics the predictor reads, by family name (the parser's, which drops a counter's
    ``_total``), each folded over the node's GPUs (ValueError: not the exposition format)."""
    try:
        return _folded(text)
    except ValueError as err:
        raise ValueError(f"not the Prometheus exposition format: {err}") from err


def _folded(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        fold = FOLDS.get(family.name)
        values = [s.value for s in family.samples if not s.name.endswith("_created")]
        if fold is not None and values:
            out[family.name] = sum(values) if fold == "sum" else max(values)
    return out


def reading(at: float, samples: Mapping[str, float], previous: tuple[float, float] | None) -> Reading:
    """The predictor's reading at ``at`` (seconds); ``previous``: the pressure counter and the
    time it was read before, to turn it into a share of time (left out on the first scrape or
    after the counter was reset); a rate read as such (``PRESSURE_RATE``) is taken as it is."""
    values: dict[Signal, float] = {signal: samples[name] for name, (signal, _) in SAMPLES.items() if name in samples}
    if PRESSURE_RATE in samples:
        values["memoryPressure"] = samples[PRESSURE_RATE]
    elif PRESSURE in samples and previous is not None:
        counter, then = previous
        if at > then and samples[PRESSURE] >= counter:
            values["memoryPressure"] = (samples[PRESSURE] - counter) / (at - then)
    return Reading(at, values)
