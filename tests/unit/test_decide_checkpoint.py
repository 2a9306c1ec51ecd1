from trainerop_checkpoint.decide import Named, decide
from trainerop_common.api import Checkpoint
from trainerop_common.api.trainer import TrainerSpec

WITH_CKPT = TrainerSpec.model_validate({"epochs": 3, "image": "i", "checkpoint": {"bucket": "b"}})
WITHOUT = TrainerSpec.model_validate({"epochs": 3, "image": "i"})


def ckpt(name: str, trainer: str, epoch: int, phase: str | None, step: int = 0) -> Named:
    body = {"spec": {"trainer": trainer, "epoch": epoch, "step": step, "path": f"/ckpt/{name}"}}
    if phase:
        body["status"] = {"phase": phase}
    return Named(name, Checkpoint.model_validate(body))


def test_without_checkpointing_the_gate_is_open() -> None:
    d = decide("t", WITHOUT, [])
    assert d.status == {}
    assert d.conditions[0].reason == "NoCheckpointing"


def test_first_run_starts_from_scratch() -> None:
    d = decide("t", WITH_CKPT, [ckpt("a", "t", 1, "Staging")])
    assert d.status == {"checkpoint": {}}
    assert d.conditions[0].reason == "NoCheckpointYet"


def test_resumes_from_the_latest_committed_checkpoint_of_this_trainer() -> None:
    checkpoints = [
        ckpt("e1", "t", 1, "Committed"),
        ckpt("e2s5", "t", 2, "Committed", step=5),
        ckpt("e2s9", "t", 2, "Committed", step=9),
        ckpt("e3", "t", 3, "Staging"),
        ckpt("other", "u", 9, "Committed"),
    ]
    d = decide("t", WITH_CKPT, checkpoints)
    assert d.status == {"checkpoint": {"latest": "e2s9", "resumeFrom": "/ckpt/e2s9"}}
    assert d.conditions[0].reason == "Resumable"
    assert "epoch 2, step 9" in d.conditions[0].message
