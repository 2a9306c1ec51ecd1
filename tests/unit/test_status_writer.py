"""The writer plans server-side apply requests for one controller's own status fields."""

from typing import Any

import pytest

from tests.factories import trainer_body
from trainerop_common.api import kind_info
from trainerop_common.conditions import Desired
from trainerop_common.outcome import StatusSection
from trainerop_common.status_writer import StatusWriter

NOW, LATER = "2026-01-01T00:00:00Z", "2026-01-01T01:00:00Z"


class RecordingApplier:
    def __init__(self) -> None:
        self.calls: list[tuple[str | None, str, dict[str, Any], str]] = []

    async def apply_status(
        self, info: Any, namespace: str | None, name: str, body: dict[str, Any], fm: str
    ) -> str | None:
        self.calls.append((namespace, name, body, fm))
        return "20"


def trainer(resource_version: str | None = None) -> dict[str, Any]:
    return trainer_body("t", "ns", resource_version=resource_version, status={})


def writer(applier: RecordingApplier | None = None) -> StatusWriter:
    return StatusWriter(
        applier or RecordingApplier(),
        kind_info("Trainer"),
        "profile",
        StatusSection(("profile",), ("ProfileResolved",)),
    )


RESOLVED = Desired.true("ProfileResolved", "NoProfile", "spec.profile is not set")


def applied_status(obj: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    """What the API server would hold after applying ``body`` (enough for these tests)."""
    status = dict(obj["status"])
    others = [
        c
        for c in status.get("conditions", [])
        if c["type"] not in {c["type"] for c in body["status"].get("conditions", [])}
    ]
    status.update(body["status"])
    status["conditions"] = others + body["status"].get("conditions", [])
    return {**obj, "status": status}


async def test_first_write_applies_section_and_conditions_under_own_field_manager() -> None:
    applier = RecordingApplier()
    wrote = await writer(applier).write(trainer(), {"profile": {"name": "p"}}, [RESOLVED], NOW)
    assert wrote
    ((namespace, name, body, manager),) = applier.calls
    assert (namespace, name, manager) == ("ns", "t", "trainer-operator/profile")
    assert body["status"]["profile"] == {"name": "p"}
    assert body["status"]["conditions"][0]["observedGeneration"] == 1
    assert body["kind"] == "Trainer"


async def test_no_request_when_nothing_would_change() -> None:
    w = writer()
    first = w.plan(trainer(), {"profile": {"name": "p"}}, [RESOLVED], NOW)
    assert first is not None
    converged = applied_status(trainer(), first.body)
    applier = RecordingApplier()
    assert not await writer(applier).write(converged, {"profile": {"name": "p"}}, [RESOLVED], LATER)
    assert applier.calls == []


def test_saying_nothing_takes_back_what_was_said_once() -> None:
    """A concern the spec no longer asks (contracts.asks) applies an empty section: the API server
    removes the fields and conditions its manager owned. Once nothing is said, no request."""
    w = writer()
    first = w.plan(trainer(), {"profile": {"name": "p"}}, [RESOLVED], NOW)
    assert first is not None
    cleared = w.plan(applied_status(trainer(), first.body), {}, [], LATER)
    assert cleared is not None
    assert cleared.body["status"] == {}
    assert w.plan(trainer(), {}, [], LATER) is None


def test_other_controllers_conditions_do_not_cause_writes() -> None:
    w = writer()
    first = w.plan(trainer(), {}, [RESOLVED], NOW)
    assert first is not None
    obj = applied_status(trainer(), first.body)
    obj["status"]["conditions"].append(
        {"type": "QuotaAdmitted", "status": "False", "reason": "X", "lastTransitionTime": NOW, "observedGeneration": 1}
    )
    assert w.plan(obj, {}, [RESOLVED], LATER) is None


@pytest.mark.parametrize(
    "change",
    ["generation", "section", "condition", "dropped"],
)
def test_a_real_change_is_written(change: str) -> None:
    w = writer()
    first = w.plan(trainer(), {"profile": {"name": "p"}}, [RESOLVED], NOW)
    assert first is not None
    obj = applied_status(trainer(), first.body)
    section, conditions = {"profile": {"name": "p"}}, [RESOLVED]
    if change == "generation":
        obj["metadata"]["generation"] = 2
    elif change == "section":
        section = {"profile": {"name": "q"}}
    elif change == "condition":
        conditions = [Desired.false("ProfileResolved", "ProfileNotFound")]
    else:
        conditions = []
    patch = w.plan(obj, section, conditions, LATER)
    assert patch is not None
    if change == "condition":
        assert patch.body["status"]["conditions"][0]["lastTransitionTime"] == LATER
    if change == "generation":
        assert patch.body["status"]["conditions"][0]["lastTransitionTime"] == NOW


def test_writing_what_the_controller_does_not_own_is_a_bug() -> None:
    with pytest.raises(ValueError, match="does not own status fields"):
        writer().plan(trainer(), {"quota": {}}, [], NOW)
    with pytest.raises(ValueError, match="does not own condition types"):
        writer().plan(trainer(), {}, [Desired.true("QuotaAdmitted", "X")], NOW)


async def test_an_event_older_than_our_own_write_is_not_written_again() -> None:
    applier = RecordingApplier()
    w = writer(applier)
    old = trainer(resource_version="10")
    assert await w.write(old, {"profile": {"name": "p"}}, [RESOLVED], NOW)  # server answers version 20
    # An event from before our write (version 15) arrives: it lacks our status but is stale.
    stale = trainer(resource_version="15")
    assert not await w.write(stale, {"profile": {"name": "p"}}, [RESOLVED], NOW)
    # A newer object that lost our status (say, recreated) is written again.
    newer = trainer(resource_version="25")
    assert await w.write(newer, {"profile": {"name": "p"}}, [RESOLVED], NOW)
    assert len(applier.calls) == 2


async def test_the_writer_knows_how_long_ago_it_wrote_each_object_until_it_is_forgotten() -> None:
    w = writer()
    assert w.since_written("ns", "t") is None  # nothing written by this process
    assert await w.write(trainer(), {"profile": {"name": "p"}}, [RESOLVED], NOW)
    since = w.since_written("ns", "t")
    assert since is not None and since >= 0  # noqa: PT018
    w.forget("ns", "t")
    assert w.since_written("ns", "t") is None
