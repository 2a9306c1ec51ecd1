"""Tamper evidence of the audit trail (issue 20): seals chain the records' hashes; verification
reports the first broken link (trainerop_audit.seal)."""

import copy
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from trainerop_audit.record import stamp_of, subject_uid
from trainerop_audit.retention import Retention, pruned_record
from trainerop_audit.seal import forgettable, held, next_seal, record_hash, trimmed_seals, verify
from trainerop_common.clock import parse_time

NS = "team-a"


def record(name: str, second: int, action: str = "Created") -> dict[str, Any]:
    stamp = f"2026-12-01T12:00:{second:02d}Z"
    return {
        "metadata": {"namespace": NS, "name": name, "uid": f"uid-{name}", "creationTimestamp": stamp},
        "spec": {"action": action, "stageTimestamp": stamp, "message": f"{name} happened"},
    }


def stored(obj: dict[str, Any], second: int) -> dict[str, Any]:
    """As the API server stores a record the controller created."""
    out = copy.deepcopy(obj)
    out["metadata"] |= {"uid": f"uid-{obj['metadata']['name']}", "creationTimestamp": f"2026-12-01T12:00:{second:02d}Z"}
    return out


def trail() -> list[dict[str, Any]]:
    """Two records, a seal; a third record, a second seal; a fourth record, not sealed yet."""
    records = [record("a", 1), record("b", 2)]
    first = next_seal(NS, records, "2026-12-01T12:00:03.000000Z")
    assert first is not None
    records.append(stored(first, 3))
    records.append(record("c", 4))
    second = next_seal(NS, records, "2026-12-01T12:00:05.000000Z")
    assert second is not None
    records.append(stored(second, 5))
    records.append(record("d", 6))
    return records


def test_an_untouched_trail_is_intact_and_says_what_is_not_sealed_yet() -> None:
    records = trail()
    first, second = [r for r in records if r["spec"]["action"] == "Sealed"]
    assert sorted(first["spec"]["seal"]["records"]) == ["a", "b"]
    assert sorted(second["spec"]["seal"]["records"]) == ["c"]  # a seal is covered by the chain itself
    assert (second["spec"]["seal"]["previous"], second["spec"]["seal"]["previousHash"]) == (
        "audit-seal-00000001",
        record_hash(first),
    )
    (verdict,) = verify(records)
    assert (verdict.broken, verdict.records, verdict.seals, verdict.unsealed) == (None, 6, 2, 1)
    third = next_seal(NS, records, "2026-12-01T12:00:07.000000Z")
    assert third is not None
    assert sorted(third["spec"]["seal"]["records"]) == ["d"]
    assert next_seal(NS, [*records, stored(third, 7)], "2026-12-01T12:00:08.000000Z") is None  # all sealed


def drop(name: str) -> Callable[[list[dict[str, Any]]], list[dict[str, Any]]]:
    return lambda records: [r for r in records if r["metadata"]["name"] != name]


def recreate(name: str) -> Callable[[list[dict[str, Any]]], list[dict[str, Any]]]:
    """Deleted and written again with other words (a new uid, as the API server gives it)."""

    def change(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = [r for r in records if r["metadata"]["name"] != name]
        forged = record(name, 4)
        forged["metadata"]["uid"] = "uid-forged"
        return [*out, forged]

    return change


def inject(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A record slipped in afterwards with an old creation time."""
    late = record("late", 0)
    late["metadata"]["creationTimestamp"] = "2026-12-01T11:00:00Z"
    return [*records, late]


def prune(name: str) -> Callable[[list[dict[str, Any]]], list[dict[str, Any]]]:
    """Retention deleted it, and said so."""

    def change(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        said = pruned_record(NS, [name], Retention(max_records=5), parse_time("2026-12-01T12:00:08Z"))
        return [*drop(name)(records), stored(said, 8)]

    return change


@pytest.mark.parametrize(
    ("tamper", "broken"),
    [
        (drop("a"), "record a, sealed by audit-seal-00000001, is gone and was not pruned"),
        (recreate("c"), "record c no longer matches its hash in audit-seal-00000002 (changed or recreated)"),
        (drop("audit-seal-00000001"), "seal audit-seal-00000002 follows audit-seal-00000001, which is gone"),
        (inject, "record late predates seal audit-seal-00000002 but no seal lists it"),
        (prune("a"), None),  # retention's deletions are accounted for
        (prune("audit-seal-00000001"), None),  # an oldest seal pruned: the chain starts at the next
    ],
)
def test_tampering_is_reported_as_the_first_broken_link(
    tamper: Callable[[list[dict[str, Any]]], list[dict[str, Any]]], broken: str | None
) -> None:
    (verdict,) = verify(tamper(trail()))
    if broken is None:
        assert verdict.broken is None
    else:
        assert verdict.broken is not None
        assert verdict.broken.startswith(broken)


def test_the_controller_holds_a_record_as_what_its_seals_and_decisions_read() -> None:
    """The controller's cache holds each record as a projection with its hash (trainerop_audit.seal
    .held): the seals made from held records are the seals made from whole ones, and what the
    decisions read of a record (the Trainer it is about, when) is unchanged."""
    about = {"objectRef": {"resource": "trainers", "uid": "t-1", "name": "t", "namespace": NS}}
    whole = [
        record("a", 1) | {"spec": record("a", 1)["spec"] | about | {"user": {"username": "alice"}}},
        record("b", 2) | {"spec": record("b", 2)["spec"] | {"trainer": {"uid": "t-2", "name": "u"}}},
    ]
    first = next_seal(NS, whole, "2026-12-01T12:00:03.000000Z")
    assert first is not None
    whole.append(stored(first, 3))
    whole.append(record("c", 4))
    kept = [held(r) for r in whole]
    assert kept[2]["spec"]["seal"] == {"sequence": 1, "records": ["a", "b"]}  # a seal: names, not hashes
    assert "user" not in kept[0]["spec"]
    assert [(subject_uid(k), stamp_of(k)) for k in kept] == [(subject_uid(w), stamp_of(w)) for w in whole]
    assert next_seal(NS, kept, "2026-12-01T12:00:05.000000Z") == next_seal(NS, whole, "2026-12-01T12:00:05.000000Z")


def about(trainer_uid: str, rec: dict[str, Any]) -> dict[str, Any]:
    return rec | {"spec": rec["spec"] | {"objectRef": {"resource": "trainers", "uid": trainer_uid}}}


@pytest.mark.parametrize(
    ("name", "live", "minutes_later", "forgotten"),
    [
        ("a", set(), 5, True),  # sealed, old, its Trainer gone: no longer held
        ("a", {"t-1"}, 5, False),  # its Trainer still there: its reconciles read it
        ("a", set(), 4, False),  # young: may be about a Trainer the watch has not delivered yet
        ("c", set(), 5, True),  # about no Trainer at all, sealed and old
        ("d", set(), 60, False),  # not sealed yet: the next seal needs it
        ("audit-seal-00000001", set(), 60, False),  # seals stay: the next one chains to them
    ],
)
def test_a_sealed_old_record_of_a_gone_trainer_is_no_longer_held(
    name: str, live: set[str], minutes_later: int, forgotten: bool
) -> None:
    """The audit controller's cache would otherwise grow with every Trainer ever run (the trail
    stays in the cluster until retention): 24 MiB over 5000 Trainers in the benchmark's leak check."""
    records = [about("t-1", r) if r["metadata"]["name"] in ("a", "b") else r for r in trail()]
    now = parse_time("2026-12-01T12:00:06Z") + timedelta(minutes=minutes_later)
    gone = {r["metadata"]["name"] for r in forgettable(records, live, now)}
    assert (name in gone) is forgotten


def test_a_held_seal_lists_only_the_records_still_held() -> None:
    """Once the controller lets sealed records go, the seals it holds stop naming them (else the
    names of every record ever sealed stay held); the next seal is the same with trimmed seals."""
    kept = [held(r) for r in trail()]  # a, b, seal 1 (a, b), c, seal 2 (c), d
    still = [r for r in kept if r["metadata"]["name"] != "a"]  # a let go (forgettable)
    trimmed = trimmed_seals(still)
    assert [(t["metadata"]["name"], t["spec"]["seal"]["records"]) for t in trimmed] == [("audit-seal-00000001", ["b"])]
    replaced = [next((t for t in trimmed if t["metadata"] == r["metadata"]), r) for r in still]
    assert trimmed_seals(replaced) == []
    now = "2026-12-01T12:00:07.000000Z"
    assert next_seal(NS, replaced, now) == next_seal(NS, kept, now)  # d only, chained to seal 2


@pytest.mark.parametrize("as_held", [False, True])
def test_when_retention_deletes_every_seal_the_chain_goes_on_and_no_name_is_written_again(as_held: bool) -> None:
    """Retention by count can delete a namespace's every seal (the oldest records go first). The
    next seal follows the newest one deleted, named by retention's record; it used to start again at
    audit-seal-00000001, writing a deleted record again under its name (seen in CI, issue 50)."""
    records = [*prune("audit-seal-00000002")(prune("audit-seal-00000001")(trail()))]
    assert not [r for r in records if r["spec"]["action"] == "Sealed"]
    records = [held(r) for r in records] if as_held else records
    follows = next_seal(NS, records, "2026-12-01T12:00:09.000000Z")
    assert follows is not None
    assert follows["metadata"]["name"] == "audit-seal-00000003"
    assert follows["spec"]["seal"]["previous"] == "audit-seal-00000002"
    assert "previousHash" not in follows["spec"]["seal"]  # gone with the seal
    whole = prune("audit-seal-00000002")(prune("audit-seal-00000001")(trail()))
    (verdict,) = verify([*whole, stored(follows, 9)])
    assert verdict.broken is None
