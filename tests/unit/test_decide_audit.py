from trainerop_audit.decide import TrainerFacts, creator_of, decide

FACTS = TrainerFacts("ns", "llama", "0123456789abcdef", 1, "kubectl-client-side-apply", "2026-01-01T00:00:00Z")


def test_a_new_trainer_gets_its_creation_record() -> None:
    d = decide(FACTS, [])
    (record,) = d.create
    assert record["metadata"]["name"] == "llama-created-01234567"
    assert record["spec"]["action"] == "Created"
    assert record["spec"]["actor"] == "kubectl-client-side-apply"
    assert "ownerReferences" not in record["metadata"], "the trail must outlive the Trainer"
    assert d.status == {"audit": {"records": 1, "lastRecord": "llama-created-01234567"}}


def test_existing_records_are_not_written_again_and_are_counted() -> None:
    existing = decide(FACTS, []).create[0]
    d = decide(FACTS, [existing])
    assert d.create == ()
    assert d.status == {"audit": {"records": 1, "lastRecord": "llama-created-01234567"}}


def test_records_of_an_earlier_trainer_with_the_same_name_do_not_count() -> None:
    earlier = decide(TrainerFacts("ns", "llama", "ffff", 1, "x", "2025-01-01T00:00:00Z"), []).create[0]
    d = decide(FACTS, [earlier])
    assert len(d.create) == 1
    assert d.status["audit"]["records"] == 1


def test_creator_is_the_first_spec_manager() -> None:
    fields = [
        {"manager": "kubectl-client-side-apply", "operation": "Update"},
        {"manager": "trainer-operator/trainer", "operation": "Apply", "subresource": "status"},
    ]
    assert creator_of(fields) == "kubectl-client-side-apply"
    assert creator_of(None) == "unknown"
